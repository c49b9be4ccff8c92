#!/usr/bin/env bash
# A one-node Slurm on this host, for testing `srun` against the real thing: munged, slurmctld and
# slurmd from Debian (slurmd, slurmctld, munge), started directly (no systemd), with every file of
# theirs (configuration, munge key, state, logs, pid files) in one folder. munged wants every
# folder above its socket open to all (a test's private temporary folder is not), so the socket
# lives in a folder of its own under /tmp, named in DIR/socket-dir and removed by `stop`.
#
#   scripts/one-node-slurm.sh start [DIR [CTLD_PORT SLURMD_PORT]]
#                                            start (or find running) and wait until the node is idle
#   scripts/one-node-slurm.sh stop [DIR]     stop the daemons started in DIR
#   scripts/one-node-slurm.sh status [DIR]   exit 0 when the node is idle
#
# DIR defaults to $LOOM_SLURM_DIR, else /tmp/loom-slurm-$(id -u); the ports (slurmctld's and
# slurmd's) to the first free ones from 26817. `start` prints the line SLURM_CONF=DIR/slurm.conf:
# clients (srun, sinfo) need it in their environment. Nothing outside DIR and the socket's folder
# is written, so a Slurm the host already runs is left alone, and several of these may run side
# by side in their own folders with their own ports (tests running in parallel do).
#
# Exit status: 0 done; 2 usage; 3 this host cannot run it (daemons missing), with the reason on
# stderr; 1 a daemon did not start (the tail of its log on stderr).
set -euo pipefail

action=${1:-}
dir=${2:-${LOOM_SLURM_DIR:-/tmp/loom-slurm-$(id -u)}}
if [ "$action" = start ]; then mkdir -p "$dir"; fi
if [ -d "$dir" ]; then dir=$(cd "$dir" && pwd); fi  # slurm.conf names absolute paths
ctld_port=${3:-}
slurmd_port=${4:-}
conf=$dir/slurm.conf
export SLURM_CONF=$conf

say() { echo "one-node-slurm: $*" >&2; }
cannot() { say "$*"; exit 3; }

# The node is up and takes jobs.
node_idle() {
  [ -f "$conf" ] || return 1
  local state
  state=$(timeout 10 sinfo --noheader --format=%T 2>/dev/null) || return 1
  [ "$state" = "idle" ]
}

# The daemon named in DIR/NAME.pid is alive (and is that daemon, not a process that took its
# number since).
pid_alive() {
  local file=$dir/$1.pid
  [ -f "$file" ] && [ "$(cat "/proc/$(cat "$file")/comm" 2>/dev/null)" = "$1" ]
}

# A TCP port nothing listens on, from `first` upward.
free_port() {
  local port=$1
  while [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ]; do port=$((port + 1)); done
  echo "$port"
}

write_config() {
  local host node
  host=$(hostname -s)
  [ -n "$ctld_port" ] || ctld_port=$(free_port 26817)
  [ -n "$slurmd_port" ] || slurmd_port=$(free_port $((ctld_port + 1)))
  # The node as slurmd sees the hardware (sockets, cores, memory), on the loopback address.
  node=$(slurmd -C | head -n 1)
  mkdir -p "$dir/state" "$dir/spool" "$dir/munge" "$dir/log"
  socket_dir=$(mktemp -d /tmp/loom-munge.XXXXXX)
  chmod 0755 "$socket_dir"
  echo "$socket_dir" > "$dir/socket-dir"
  cat > "$conf" <<EOF
# Written by scripts/one-node-slurm.sh: one node, every file under $dir.
ClusterName=loom-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$(id -un)
SlurmdUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$socket_dir/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
# No cgroups (a container rarely lets a daemon make them): processes tracked through /proc, tasks
# not bound, no accounting.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# The node's description wins over what slurmd finds: a node with fewer cores than declared (a
# test pinned to one core) is not drained.
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=30
KillWait=5
InactiveLimit=0
MinJobAge=10
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
}

start_munge() {
  if [ ! -s "$dir/munge/munge.key" ]; then
    (umask 077 && dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none)
  fi
  chmod 0700 "$dir/munge"  # munged wants its key private
  munged --key-file="$dir/munge/munge.key" --socket="$socket_dir/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/munged.seed" --num-threads=1 ||
    { tail -n 5 "$dir/log/munged.log" >&2 || true; say "munged did not start"; exit 1; }
}

start() {
  for tool in munged slurmctld slurmd sinfo srun; do
    command -v "$tool" > /dev/null ||
      cannot "$tool is not installed (Debian: apt-get install munge slurmctld slurmd slurm-client)"
  done
  # Any user may run it: the daemons run as that user (SlurmUser, SlurmdUser) and take only
  # that user's jobs (slurmd needs root to run those of others).
  if pid_alive slurmctld && node_idle; then
    say "already running in $dir"
    echo "SLURM_CONF=$conf"
    return
  fi
  stop_daemons quietly
  rm -rf "$dir/state" "$dir/spool" "$dir/log"
  write_config
  start_munge
  slurmctld -f "$conf" ||
    { tail -n 20 "$dir/log/slurmctld.log" >&2 || true; say "slurmctld did not start"; exit 1; }
  slurmd -f "$conf" ||
    { tail -n 20 "$dir/log/slurmd.log" >&2 || true; say "slurmd did not start"; exit 1; }
  for _ in $(seq 1 60); do
    if node_idle; then
      echo "SLURM_CONF=$conf"
      return
    fi
    for daemon in slurmctld slurmd; do
      # A pid file whose process is gone: the daemon started, then failed.
      if [ -f "$dir/$daemon.pid" ] && ! pid_alive "$daemon"; then
        tail -n 20 "$dir/log/$daemon.log" >&2 || true
        say "$daemon exited"
        exit 1
      fi
    done
    sleep 0.5
  done
  sinfo >&2 || true
  tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
  say "the node did not become idle within 30 s"
  exit 1
}

# Stops each daemon by its pid file (SIGTERM, then SIGKILL after 10 s).
stop_daemons() {
  local pids=() daemon
  for daemon in slurmd slurmctld munged; do
    if pid_alive "$daemon"; then
      pids+=("$(cat "$dir/$daemon.pid")")
      kill -TERM "$(cat "$dir/$daemon.pid")" 2>/dev/null || true
    fi
  done
  for _ in $(seq 1 100); do
    local alive=0 pid
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  if [ -f "$dir/socket-dir" ]; then
    case "$(cat "$dir/socket-dir")" in /tmp/loom-munge.*) rm -rf "$(cat "$dir/socket-dir")" ;; esac
    rm -f "$dir/socket-dir"
  fi
  [ "${1:-}" = quietly ] || say "stopped ${#pids[@]} daemon(s) of $dir"
}

case "$action" in
  start) start ;;
  stop) stop_daemons ;;
  status) pid_alive slurmctld && node_idle ;;
  *)
    echo "usage: $0 start [DIR [CTLD_PORT SLURMD_PORT]] | stop [DIR] | status [DIR]" >&2
    exit 2
    ;;
esac

#!/usr/bin/env bash
# The multi-host test bed: turns this machine into several hosts with Linux network namespaces.
#
#   netbed.sh check                      exit 0 when namespaces can be made here (root, iproute2)
#   netbed.sh up NAME HOSTS [RATE]       hosts NAME-h1..NAME-hHOSTS at 10.213.0.1..HOSTS/24, each
#                                        joined to a switch (a bridge in NAME-sw) by a veth link
#                                        limited to RATE in both directions (tc tbf; e.g. 1gbit;
#                                        default: unlimited)
#                                        and each knows the others by name (/etc/netns/HOST/hosts,
#                                        which `ip netns exec` puts in place of /etc/hosts)
#   netbed.sh address HOST               the address of host HOST (1-based)
#   netbed.sh exec NAME HOST CMD...      runs CMD on host HOST (its own network and hostname,
#                                        NAME-hHOST, so processes see different hosts)
#   netbed.sh down NAME                  removes them
#
# Like a rack of machines with one NIC each behind a switch: every host's traffic to any other
# crosses its own link, so a host's link is its bottleneck, as on real hosts. Traffic stays in
# the namespaces this script made (10.213.0.0/24 exists nowhere else).
set -Eeuo pipefail

subnet=10.213.0

address() { echo "$subnet.$1"; }

check() {
  if [ "$(id -u)" -ne 0 ]; then echo "netbed: needs root for ip netns" >&2; return 1; fi
  if ! command -v ip > /dev/null || ! command -v tc > /dev/null; then
    echo "netbed: needs iproute2 (ip, tc)" >&2
    return 1
  fi
  local probe="netbed-probe-$$"
  if ! ip netns add "$probe" 2> /dev/null; then
    echo "netbed: cannot create network namespaces here" >&2
    return 1
  fi
  ip netns del "$probe"
}

limit() {  # limit NAMESPACE DEVICE RATE: token bucket on the device's egress
  local ns=$1 dev=$2 rate=$3
  # burst: at least rate x 1 ms and a few jumbo frames, so tbf can reach its rate
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 50ms
}

up() {
  local name=$1 hosts=$2 rate=${3:-}
  # A bed half made is removed, not left behind.
  trap 'down "$name"' ERR
  ip netns add "$name-sw"
  ip netns exec "$name-sw" ip link add br0 type bridge
  ip netns exec "$name-sw" ip link set br0 up
  ip netns exec "$name-sw" ip link set lo up
  for i in $(seq 1 "$hosts"); do
    local host="$name-h$i"
    ip netns add "$host"
    ip link add "nb$$-$i" type veth peer name "nbs$$-$i"
    ip link set "nb$$-$i" netns "$host"
    ip link set "nbs$$-$i" netns "$name-sw"
    ip netns exec "$host" ip link set "nb$$-$i" name eth0
    ip netns exec "$name-sw" ip link set "nbs$$-$i" name "port$i"
    ip netns exec "$name-sw" ip link set "port$i" master br0
    ip netns exec "$name-sw" ip link set "port$i" up
    ip netns exec "$host" ip addr add "$(address "$i")/24" dev eth0
    ip netns exec "$host" ip link set eth0 up
    ip netns exec "$host" ip link set lo up
    if [ -n "$rate" ]; then
      limit "$host" eth0 "$rate"          # what the host sends
      limit "$name-sw" "port$i" "$rate"   # what it receives
    fi
  done
  for i in $(seq 1 "$hosts"); do
    mkdir -p "/etc/netns/$name-h$i"
    {
      echo "127.0.0.1 localhost"
      for j in $(seq 1 "$hosts"); do echo "$(address "$j") $name-h$j"; done
    } > "/etc/netns/$name-h$i/hosts"
  done
}

down() {
  local name=$1
  for ns in $(ip netns list | awk '{print $1}' | grep -E "^$name-(sw|h[0-9]+)$" || true); do
    ip netns del "$ns"
  done
  rm -rf /etc/netns/"$name"-h[0-9]*
}

case "${1:-}" in
  check) check ;;
  up) shift; up "$@" ;;
  address) address "$2" ;;
  exec)
    name=$2 host=$3
    shift 3
    # A UTS namespace too: Loom (like torchrun) tells hosts apart by hostname.
    exec ip netns exec "$name-h$host" unshare --uts sh -c 'hostname "$0" && exec "$@"' \
      "$name-h$host" "$@"
    ;;
  down) down "$2" ;;
  *) sed -n '2,20p' "$0" >&2; exit 2 ;;
esac

#!/usr/bin/env python3
"""All-reduce between two hosts: Loom's tcp backend against torch's gloo, in the same run.

Two namespace hosts of the test bed (scripts/netbed.sh) joined by veth links, unlimited unless
--link names a rate. Each round runs both, one after the other, on the same hosts: Loom as one
`loom launch` per host (`loom bench comm --backends tcp`), torch as one process per host
(bench/peers/torch_gloo_allreduce.py, torch.distributed over gloo from the same environment).
Both time fp32 all-reduces the same way (a barrier, then one timed call; the median of calls);
the table holds the median over rounds and torch's time over Loom's (above 1: Loom is faster).

    sudo .venv/bin/python bench/comm_between_hosts.py [--rounds 3] [--link 10gbit]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BED = os.path.join(HERE, "..", "scripts", "netbed.sh")
PEER = os.path.join(HERE, "peers", "torch_gloo_allreduce.py")
SIZES = {"4 KB": 4 << 10, "4 MB": 4 << 20, "64 MB": 64 << 20}


def on_hosts(bed, commands, timeout=600):
    """Runs commands[i] on host i+1 at once; the outputs, or exits with them on a failure."""
    procs = [subprocess.Popen([BED, "exec", bed, str(host), *command], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
             for host, command in enumerate(commands, start=1)]
    logs = [p.communicate(timeout=timeout)[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.exit("comm_between_hosts: a run failed:\n" + "\n---\n".join(logs))
    return logs


def loom_round(loom, bed, master, port, out):
    sizes = ",".join(str(b) for b in SIZES.values())
    on_hosts(bed, [[loom, "launch", "--nnodes", "2", "--node-rank", str(host),
                    "--master", f"{master}:{port}", "--nproc-per-node", "1", "--",
                    loom, "bench", "comm", "--backends", "tcp", "--dtypes", "float32",
                    "--sizes", sizes, "--json", out] for host in range(2)])
    with open(out) as f:
        return {row["bytes"]: row["median_seconds"] for row in json.load(f)["rows"]}


def torch_round(bed, master, port, out):
    sizes = ",".join(str(b) for b in SIZES.values())
    # gloo picks its interface from the hostname; name the host's one link instead.
    env = ["env", "GLOO_SOCKET_IFNAME=eth0", "OMP_NUM_THREADS=1"]
    on_hosts(bed, [[*env, sys.executable, PEER, "--rank", str(rank), "--world", "2",
                    "--master", f"{master}:{port}", "--sizes", sizes, "--json", out]
                   for rank in range(2)])
    with open(out) as f:
        return {row["bytes"]: row["median_seconds"] for row in json.load(f)["rows"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loom", default=os.path.join(HERE, "..", "build", "bin", "loom"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--link", default="", help="a tc rate per link (10gbit); none: unlimited")
    parser.add_argument("--json")
    args = parser.parse_args()
    if subprocess.run([BED, "check"]).returncode != 0:
        print("comm_between_hosts: skipped (scripts/netbed.sh check failed)")
        return
    loom = os.path.abspath(args.loom)
    bed = f"cb{os.getpid()}"
    master = subprocess.run([BED, "address", "1"], capture_output=True, text=True,
                            check=True).stdout.strip()
    subprocess.run([BED, "up", bed, "2", *([args.link] if args.link else [])], check=True)
    loom_times = {b: [] for b in SIZES.values()}
    torch_times = {b: [] for b in SIZES.values()}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for r in range(args.rounds):
                for b, s in loom_round(loom, bed, master, 29700 + 2 * r,
                                       os.path.join(tmp, f"loom{r}.json")).items():
                    loom_times[b].append(s)
                for b, s in torch_round(bed, master, 29701 + 2 * r,
                                        os.path.join(tmp, f"torch{r}.json")).items():
                    torch_times[b].append(s)
    finally:
        subprocess.run([BED, "down", bed])

    link = args.link or "unlimited veth"
    print(f"\nfp32 all-reduce between 2 namespace hosts ({link}), medians of {args.rounds} rounds")
    print(f"{'size':>6} {'loom tcp us':>12} {'torch gloo us':>14} {'gloo/loom':>10}  rounds (loom | gloo)")
    rows = []
    for name, b in SIZES.items():
        lm, tm = statistics.median(loom_times[b]), statistics.median(torch_times[b])
        spread = (" ".join(f"{s * 1e6:.0f}" for s in loom_times[b]) + " | " +
                  " ".join(f"{s * 1e6:.0f}" for s in torch_times[b]))
        print(f"{name:>6} {lm * 1e6:12.1f} {tm * 1e6:14.1f} {tm / lm:9.2f}x  {spread}")
        rows.append({"bytes": b, "loom_tcp_seconds": lm, "torch_gloo_seconds": tm,
                     "ratio": tm / lm})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"link": link, "rounds": args.rounds, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()

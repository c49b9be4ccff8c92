#!/usr/bin/env python3
"""Parameter servers vs ring all-reduce on ResNet-18's gradients, across namespace hosts.

n workers and k servers, each on its own host of the multi-host test bed (scripts/netbed.sh),
every host's link limited with tc. For each (n, k) one `loom launch` per host runs
`loom bench ps`, which times, alternately, a ring step (the workers all-reduce every gradient
bucket among themselves over tcp) and a server step (Loom's PsBucketExchange: parts pushed to
the servers and sums pulled back), on the same links, in the same run. Worker rank 0 prints
both medians; this script collects them with the bandwidth arithmetic (BytePS):

    ring:    2(n-1)/n * M / B          servers: max(M/B, n*M/(k*B))

and checks the figures the issue asks for: each measured time within 20% of its arithmetic,
and servers faster, tied or slower exactly where the arithmetic says.

    sudo python3 bench/ps_vs_ring.py [--link 1gbit] [--repeats 5] [--json out.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BED = os.path.join(HERE, "..", "scripts", "netbed.sh")
CASES = [(2, 1), (2, 2), (2, 4), (4, 1), (4, 2), (4, 4)]


def link_bytes_per_second(rate):
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * scale / 8
    raise ValueError(f"link rate {rate}: expected NNgbit, NNmbit or NNkbit")


def run_case(loom, bed, n, k, args, port):
    """One (n, k): hosts 1..n train, n+1..n+k serve; returns worker rank 0's JSON."""
    out = tempfile.mktemp(prefix="loom-ps-bench-", suffix=".json")
    nodes = n + k
    master = subprocess.run([BED, "address", "1"], capture_output=True, text=True).stdout.strip()
    procs = []
    for host in range(1, nodes + 1):
        serving = host > n
        cmd = [BED, "exec", bed, str(host), loom, "launch", "--nnodes", str(nodes),
               "--node-rank", str(host - 1), "--master", f"{master}:{port}",
               "--nproc-per-node", "0" if serving else "1",
               "--servers", "1" if serving else "0", "--",
               loom, "bench", "ps", "--servers", str(k), "--model", args.model,
               "--repeats", str(args.repeats), "--part-mb", str(args.part_mb), "--link-gbit",
               str(link_bytes_per_second(args.link) * 8 / 1e9), "--json", out]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    logs = [p.communicate(timeout=900)[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.exit(f"n={n} k={k} failed:\n" + "\n---\n".join(logs))
    print(logs[0].strip())
    with open(out) as f:
        return json.load(f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--loom", default="build/bin/loom")
    parser.add_argument("--link", default="1gbit")
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--part-mb", type=float, default=4)
    parser.add_argument("--cases", default=",".join(f"{n}x{k}" for n, k in CASES),
                        help="workers x servers, comma-separated (default: all six)")
    parser.add_argument("--json")
    args = parser.parse_args()
    cases = [tuple(int(v) for v in c.split("x")) for c in args.cases.split(",")]
    loom = os.path.abspath(args.loom)
    if subprocess.run([BED, "check"]).returncode != 0:
        print("ps_vs_ring: skipped (scripts/netbed.sh check failed)")
        return
    bed = f"ps{os.getpid()}"
    rows = []
    subprocess.run([BED, "up", bed, str(max(n + k for n, k in cases)), args.link], check=True)
    try:
        for i, (n, k) in enumerate(cases):
            r = run_case(loom, bed, n, k, args, 29600 + i)
            rows.append(r)
    finally:
        subprocess.run([BED, "down", bed])

    print(f"\n{args.model} gradients over {args.link} links (medians of {args.repeats} steps)")
    print(" n  k   ring ms (model)   servers ms (model)   ring/servers (model)  verdict")
    checks = []
    for r in rows:
        n, k = r["workers"], r["servers"]
        measured = r["ring_seconds"] / r["ps_seconds"]
        predicted = r["ring_model_seconds"] / r["ps_model_seconds"]
        ring_err = r["ring_seconds"] / r["ring_model_seconds"] - 1
        ps_err = r["ps_seconds"] / r["ps_model_seconds"] - 1
        # Faster / tie / slower as the arithmetic says (a tie: within 10% either way).
        expect = "tie" if abs(predicted - 1) < 0.1 else ("faster" if predicted > 1 else "slower")
        got = "tie" if abs(measured - 1) < 0.1 else ("faster" if measured > 1 else "slower")
        ok = expect == got and abs(ring_err) <= 0.2 and abs(ps_err) <= 0.2
        checks.append(ok)
        print(f"{n:2d} {k:2d}  {1e3 * r['ring_seconds']:7.0f} ({1e3 * r['ring_model_seconds']:5.0f})"
              f"   {1e3 * r['ps_seconds']:9.0f} ({1e3 * r['ps_model_seconds']:5.0f})"
              f"      {measured:5.2f}x ({predicted:4.2f}x)      servers {got}, arithmetic {expect}; "
              f"errors {100 * ring_err:+.0f}% / {100 * ps_err:+.0f}%{'' if ok else '  MISSED'}")
    print(f"\n{sum(checks)} of {len(checks)} cases as the arithmetic says")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"link": args.link, "model": args.model, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()

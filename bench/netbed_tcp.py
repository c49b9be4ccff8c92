#!/usr/bin/env python3
"""What plain TCP gets out of the test bed's links for the ring's and the servers' traffic.

`bench/ps_vs_ring.py` holds Loom's exchanges against the bandwidth arithmetic. This script asks
the links alone: the same bytes over the same pattern of connections, sent with plain sockets,
nothing summed and nothing waiting for anything else, on the same namespace hosts
(scripts/netbed.sh), each host's link limited with tc. Medians of several rounds:

    ring     n hosts; each sends 2(n-1)/n * M to the next and receives as much from the previous
             (one connection each way per host)
    servers  n workers and k servers; every worker sends M/k to every server and every server
             sends M/k to every worker, all at once (k connections out of every worker,
             n out of every server)

and prints each time against the arithmetic (2(n-1)/n*M/B and max(M/B, n*M/(k*B))). No exchange
can beat what its pattern gets here, however it orders its messages.

    sudo python3 bench/netbed_tcp.py [--link 1gbit] [--mb 46.8] [--rounds 5] [--cases 4x4,2x2]
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from ps_vs_ring import BED, link_bytes_per_second

PORT = 29990
CHUNK = 1 << 20


def address(host):
    return subprocess.run([BED, "address", str(host)], capture_output=True,
                          text=True, check=True).stdout.strip()


def connect(peer, deadline):
    """A connection to `peer`, retried until its listener is up or `deadline` passes."""
    while True:
        try:
            return socket.create_connection((peer, PORT))
        except ConnectionRefusedError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def receive(bind, connections, out):
    """Accepts `connections` senders, reads everything, writes the time of the last byte."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((bind, PORT))
    listener.listen(64)
    accepted = [listener.accept()[0] for _ in range(connections)]
    last = [0.0]
    lock = threading.Lock()

    def drain(conn):
        buffer = bytearray(CHUNK)
        while conn.recv_into(buffer):
            pass
        with lock:
            last[0] = max(last[0], time.time())

    threads = [threading.Thread(target=drain, args=(c,)) for c in accepted]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(out, "w") as f:
        json.dump({"last": last[0]}, f)


def send(peers, nbytes, start_at):
    """Sends `nbytes` to every peer at once, beginning at `start_at` (a shared clock)."""
    conns = [connect(p, start_at + 30) for p in peers]
    data = memoryview(bytes(CHUNK))  # slices without copies
    time.sleep(max(0.0, start_at - time.time()))

    def push(conn):
        left = nbytes
        while left > 0:
            n = min(left, CHUNK)
            conn.sendall(data[:n])
            left -= n
        conn.shutdown(socket.SHUT_WR)

    threads = [threading.Thread(target=push, args=(c,)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def one_round(bed, pattern, n, k, m_bytes):
    """Starts every host's receiver and sender; returns seconds from start to the last byte."""
    me = os.path.abspath(__file__)
    hosts = n if pattern == "ring" else n + k
    if pattern == "ring":
        targets = {h: [(h % n) + 1] for h in range(1, n + 1)}
        per_peer = int(2 * (n - 1) / n * m_bytes)
    else:
        targets = {h: list(range(n + 1, n + k + 1)) if h <= n else list(range(1, n + 1))
                   for h in range(1, hosts + 1)}
        per_peer = int(m_bytes / k)
    incoming = {h: sum(h in t for t in targets.values()) for h in range(1, hosts + 1)}
    incoming = {h: count for h, count in incoming.items() if count > 0}
    addresses = {h: address(h) for h in range(1, hosts + 1)}
    outs = {h: tempfile.mktemp(prefix="loom-netbed-tcp-") for h in incoming}
    receivers = [subprocess.Popen([BED, "exec", bed, str(h), sys.executable, me, "--receive",
                                   addresses[h], str(count), outs[h]])
                 for h, count in incoming.items()]
    # Every sender connects (waiting for the listeners), then all begin at this instant.
    start_at = time.time() + 1.5
    senders = [subprocess.Popen([BED, "exec", bed, str(h), sys.executable, me, "--send",
                                 ",".join(addresses[p] for p in targets[h]), str(per_peer),
                                 repr(start_at)])
               for h in targets]
    for p in senders + receivers:
        if p.wait(timeout=300) != 0:
            sys.exit(f"netbed_tcp: a {pattern} process failed")
    last = 0.0
    for path in outs.values():
        with open(path) as f:
            last = max(last, json.load(f)["last"])
        os.unlink(path)
    return last - start_at


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--receive":
        return receive(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    if len(sys.argv) > 1 and sys.argv[1] == "--send":
        return send(sys.argv[2].split(","), int(sys.argv[3]), float(sys.argv[4]))
    parser = argparse.ArgumentParser()
    parser.add_argument("--link", default="1gbit")
    parser.add_argument("--mb", type=float, default=46.8, help="M: gradient MB (ResNet-18: 46.8)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", default="4x4,2x2,4x2", help="workers x servers")
    args = parser.parse_args()
    if subprocess.run([BED, "check"]).returncode != 0:
        print("netbed_tcp: skipped (scripts/netbed.sh check failed)")
        return
    cases = [tuple(int(v) for v in c.split("x")) for c in args.cases.split(",")]
    m, b = args.mb * 1e6, link_bytes_per_second(args.link)
    bed = f"tcp{os.getpid()}"
    subprocess.run([BED, "up", bed, str(max(n + k for n, k in cases)), args.link], check=True)
    try:
        print(f"plain TCP over {args.link} links, M = {args.mb} MB, medians of {args.rounds}")
        print(" n  k   ring ms (arithmetic)      servers ms (arithmetic)")
        for n, k in cases:
            ring = [one_round(bed, "ring", n, k, m) for _ in range(args.rounds)]
            servers = [one_round(bed, "servers", n, k, m) for _ in range(args.rounds)]
            ring_model, ps_model = 2 * (n - 1) / n * m / b, max(m / b, n * m / (k * b))
            r, s = statistics.median(ring), statistics.median(servers)
            print(f"{n:2d} {k:2d}  {1e3 * r:7.0f} ({1e3 * ring_model:5.0f})"
                  f" {100 * (r / ring_model - 1):+4.0f}%"
                  f"    {1e3 * s:7.0f} ({1e3 * ps_model:5.0f}) {100 * (s / ps_model - 1):+4.0f}%"
                  f"   servers' rounds: {', '.join(f'{1e3 * x:.0f}' for x in servers)} ms")
    finally:
        subprocess.run([BED, "down", bed])


if __name__ == "__main__":
    main()

"""Real-mode DP round trip between two OS processes, against trio over a socketpair.

    python benchmarks/bench_real.py [--iters 5000]
"""
import argparse
import socket
import statistics
import time

import trio

from libdp import pingpong
from libdp._realrun import run_real_spmd


async def _socketpair_rtt(iters: int) -> float:
    a, b = trio.socket.from_stdlib_socket(socket.socketpair()[0]), None
    s0, s1 = socket.socketpair()
    a, b = trio.socket.from_stdlib_socket(s0), trio.socket.from_stdlib_socket(s1)

    async def echo():
        for _ in range(iters):
            await b.send(await b.recv(16))

    async with trio.open_nursery() as n:
        n.start_soon(echo)
        t = time.perf_counter()
        for _ in range(iters):
            await a.send(b"x")
            await a.recv(16)
        dt = time.perf_counter() - t
    a.close(); b.close()
    return dt / iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=5000)
    args = ap.parse_args()
    runs = [run_real_spmd(pingpong, [1], args.iters)[0][0][0]["rtt_us"] for _ in range(3)]
    base = trio.run(_socketpair_rtt, args.iters) * 1e6
    dp = statistics.median(runs)
    print(f"DP real-mode 1-byte round trip (2 processes, shm, polling): {dp:8.1f} us (median of 3: {runs})")
    print(f"baseline: trio over a UNIX socketpair (1 process, 2 tasks): {base:8.1f} us")
    print(f"ratio DP / baseline: {dp / base:.2f}")


if __name__ == "__main__":
    main()

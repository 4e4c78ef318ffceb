"""AM on the TB2 as the node count grows: memory per node, wall time per engine event.

For each node count N, in a fresh process: build N modeled SP nodes with am loaded, open
an AM endpoint on every node, and send `--requests` one-word requests from every node to
the next around the ring (each polls until its own have arrived). Reported per N:

* memory per node: the process's resident set after the run less before the cluster was
  built, over N (endpoints, FIFOs, pinned segments, node kernels);
* wall µs per engine event, and per request: the per-message work must not grow with
  N (a poll visits only the peers with work, the keep-alive only peers with unacked
  messages);
* a 1-word AM round trip between nodes 0 and 1 while the other N-2 nodes sit idle with
  their endpoints open: wall µs per round trip.

"Wall" time is this process's CPU time (``time.process_time``): on a shared machine the
figures then do not move with the load.

    python benchmarks/bench_am_scale.py [--nodes 2,32,128] [--requests 200] [--iters 2000] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time


H_WAKE, H_PING, H_PONG = 1, 2, 3


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


async def ring_program(dp, rank, size, requests):
    from libdp.am import AM
    am = await AM.open(dp)
    got = [0]
    am.set_handler(H_WAKE, lambda tok, x: got.__setitem__(0, got[0] + 1))
    for i in range(requests):
        await am.am_request_1((rank + 1) % size, H_WAKE, i)
    await am.poll_until(lambda: got[0] >= requests)
    await am.close()


async def idle_program(dp, rank, size):
    """An idle node: its endpoint open, waiting for rank 0's word at the end."""
    from libdp.am import AM
    am = await AM.open(dp)
    am.set_handler(H_WAKE, lambda tok, x: None)
    await am.poll_until(lambda: am.stats()["handlers_run"] >= 1)
    await am.close()


def one(n: int, requests: int, iters: int) -> dict:
    from libdp import Cluster
    rss0 = _rss_bytes()
    c = Cluster(nodes=n, nic="tb2", load=[("am", {})])
    t = time.process_time()
    c.run_spmd(ring_program, requests)
    wall = time.process_time() - t
    rss1 = _rss_bytes()
    events = c.engine.events_run
    out = {"nodes": n, "memory_per_node_mb": (rss1 - rss0) / n / 1e6, "ring_requests": n * requests,
           "wall_us_per_event": wall / events * 1e6, "wall_us_per_request": wall / (n * requests) * 1e6,
           "events_per_request": events / (n * requests)}
    if iters:
        c = Cluster(nodes=n, nic="tb2", load=[("am", {})])

        async def prog(dp, rank, size):
            return await (idle_program(dp, rank, size) if rank >= 2 else pingpong_program(dp, rank, size, iters))

        t = time.process_time()
        rows = c.run_spmd(prog)
        out["pingpong_wall_us_per_rt"] = (time.process_time() - t) / iters * 1e6
        out["pingpong_modeled_rtt_us"] = rows[0]
    return out


async def pingpong_program(dp, rank, size, iters):
    """The AM ping-pong of ranks 0 and 1 (rank 0's modeled RTT, µs); then rank 0 wakes every idle node."""
    from libdp.am import AM
    am = await AM.open(dp)
    got = [0]
    am.set_handler(H_WAKE, lambda tok, x: None)
    am.set_handler(H_PING, lambda tok, x: tok.reply(H_PONG, x))
    am.set_handler(H_PONG, lambda tok, x: got.__setitem__(0, got[0] + 1))
    rtt = None
    if rank == 0:
        t0 = dp.now()
        for i in range(iters):
            await am.am_request_1(1, H_PING, i)
            await am.poll_until(lambda i=i: got[0] > i)
        rtt = (dp.now() - t0) / iters * 1e6
        for other in range(1, size):
            await am.am_request_1(other, H_WAKE, 0)
    else:
        await am.poll_until(lambda: am.stats()["handlers_run"] >= iters + 1)
    await am.close()
    return rtt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="2,32,128", help="node counts, comma-separated")
    ap.add_argument("--requests", type=int, default=200, help="requests each node sends around the ring")
    ap.add_argument("--iters", type=int, default=2000, help="round trips of the 0-1 ping-pong (0: none)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one is not None:
        json.dump(one(args.one, args.requests, args.iters), sys.stdout)
        return 0
    rows = []
    for n in (int(x) for x in args.nodes.split(",")):
        res = subprocess.run([sys.executable, __file__, "--one", str(n), "--requests", str(args.requests),
                              "--iters", str(args.iters)], capture_output=True, text=True, check=True)
        rows.append(json.loads(res.stdout))
        if not args.json:
            r = rows[-1]
            print(f"{n:>5} nodes: {r['memory_per_node_mb']:7.3f} MB/node  {r['wall_us_per_event']:6.2f} us/event  "
                  f"{r['wall_us_per_request']:7.1f} us/request  {r['events_per_request']:5.1f} events/request  "
                  f"ping-pong {r.get('pingpong_wall_us_per_rt', 0):7.1f} wall us/rt", flush=True)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

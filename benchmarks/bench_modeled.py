"""Simulated round trips per wall second, modeled 1-byte DP ping-pong.

Baseline in the same run: the bare event engine stepping a no-op callback chain (the
floor any modeled round trip pays per event), so the figure can be read as "events per
round trip x cost per event" on whatever machine runs it.

    python benchmarks/bench_modeled.py [--iters 20000]
"""
import argparse
import time

from bench_sim_speed import engine_us_per_event
from libdp import Cluster, pingpong


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20000)
    args = ap.parse_args()
    c = Cluster()
    t = time.perf_counter()
    rows = c.run_spmd(pingpong, [1], args.iters, 0)[0]
    wall = time.perf_counter() - t
    events = c.engine.events_run / args.iters
    per_event = engine_us_per_event() * 1e-6
    rtt_wall = wall / args.iters
    print(f"modeled 1-byte round trip            {rows[0]['rtt_us']:10.3f} us (modeled)")
    print(f"simulated round trips per wall second {1 / rtt_wall:10.0f}")
    print(f"wall time per simulated round trip    {rtt_wall * 1e6:10.1f} us")
    print(f"engine events per round trip          {events:10.1f}")
    print(f"baseline: bare engine event           {per_event * 1e6:10.3f} us  "
          f"(round trip = {rtt_wall / per_event:.0f} bare events)")


if __name__ == "__main__":
    main()

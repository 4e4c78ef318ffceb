"""``python -m nic_drivers.tb2``: the raw TB2 FIFO ping-pong (SP-B03), modeled.

    python -m nic_drivers.tb2 [--iters 1000] [--sizes 0,64,224] [--param KEY=VALUE ...]
                              [--pop-every K] [--seed N] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys

from libdp._cluster import Cluster
from nic_drivers.tb2 import DEFAULT_PLATFORM
from nic_drivers.tb2.bench import PAPER_RTT_US, raw_pingpong


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nic_drivers.tb2",
                                 description="raw TB2 FIFO ping-pong, application to application, modeled time")
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--sizes", default="0", help="data bytes per packet, comma-separated (0..224; default 0)")
    ap.add_argument("--platform", default=DEFAULT_PLATFORM)
    ap.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--pop-every", type=int, default=None, help="lazy receive-FIFO pop interval (default: module's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
        cluster = Cluster(nodes=2, platform=args.platform, nic="tb2", params=args.param, seed=args.seed)
        rows = raw_pingpong(cluster, iters=args.iters, sizes=sizes, pop_every=args.pop_every)
    except (OSError, ValueError) as exc:
        print(f"tb2: {exc}", file=sys.stderr)
        return 1
    for r in rows:
        r.pop("fifo_stats", None)
    if args.json:
        json.dump({"benchmark": "tb2-raw-pingpong", "time": "modeled", "platform": cluster.profile.name,
                   "iters": args.iters, "overrides": dict(cluster.profile.overrides), "results": rows,
                   "paper_rtt_us": list(PAPER_RTT_US)}, sys.stdout, indent=1)
        print()
        return 0
    over = ", ".join(f"{k}={v}" for k, v in cluster.profile.overrides.items())
    print(f"# raw TB2 ping-pong (user FIFOs, polling): {cluster.profile.name}, modeled time, "
          f"{args.iters} round trips" + (f"; {over}" if over else ""))
    print(f"# paper (SP-B03): {PAPER_RTT_US[0]}-{PAPER_RTT_US[1]} us round trip, no data")
    print(f"# {'Data':<10}{'One-way (us)':>14}{'RTT (us)':>14}")
    for r in rows:
        print(f"{r['size']:<12}{r['one_way_us']:>14.2f}{r['rtt_us']:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``dp pingpong`` and ``dp bandwidth``: DP's measurements, modeled or real.

    dp pingpong [--sizes 1,64,1500] [--iters N] [--nic NAME] [--platform NAME]
                [--param KEY=VALUE ...] [--load NAME[:k=v,...] ...] [--seed N]
                [--stats] [--json] [--real [--transport shm|udp|packet]]
    dp bandwidth   (same options; --pipeline adaptive|fixed:N on Myrinet)

Variants a NIC brings: ``--raw`` (TB2: the SP AM paper's user-level FIFO ping-pong,
no DP) and ``--pipeline`` (Myrinet: EPOS's five-stage bulk pipeline).
"""
from __future__ import annotations

import errno

from libdp import _bench
from libdp._argtypes import int_list, positive_int
from libdp._cluster import Cluster, build_profile, resolve_platform
from libdp._report import emit, overrides_note

__all__ = ["add_commands"]


def _sizes(text: str) -> list[int]:
    return int_list(text, "sizes", 0)


def _bench_parser(sub, common, name, help_text, program):
    p = sub.add_parser(name, help=help_text, description=help_text, parents=[common["model"]])
    p.add_argument("--sizes", type=_sizes, default=None,
                   help=f"comma-separated message sizes in bytes (default: {','.join(map(str, _bench.DEFAULT_SIZES))})")
    p.add_argument("--iters", type=positive_int, default=None,
                   help="iterations (ping-pong) or messages (bandwidth) per size (default: 1000, as DP-A08)")
    p.add_argument("--nic", default=None, help="NIC model (default: the platform's)")
    p.add_argument("--real", action="store_true",
                   help="real time: one OS process per node, frames on a real transport, wall-clock figures")
    p.add_argument("--transport", choices=("shm", "udp", "packet"), default="shm",
                   help="with --real: shared-memory rings between processes, UDP on loopback, or raw Ethernet "
                        "frames (AF_PACKET) on a veth pair between network namespaces (root, --nic dec21140) "
                        "(default: shm)")
    p.add_argument("--cluster", default=None, metavar="FILE",
                   help="with --real: run on this running cluster's nodes instead of bringing one up for the run")
    p.set_defaults(func=lambda args: _run_bench(args, program, name))
    return p


def add_commands(sub, common) -> None:
    p = _bench_parser(sub, common, "pingpong", "DP ping-pong latency over two nodes (one-way = half the round trip)",
                      _bench.pingpong)
    p.add_argument("--raw", action="store_true",
                   help="tb2 only: the raw user-level FIFO ping-pong of the SP AM paper, no DP (SP-B03)")
    p = _bench_parser(sub, common, "bandwidth", "DP one-way streaming bandwidth (MB = 10^6 bytes)", _bench.bandwidth)
    p.add_argument("--pipeline", default=None, metavar="adaptive|fixed:N",
                   help="myrinet only: bulk transfers through the EPOS pipeline, packet size adaptive or fixed")


def _variant(args, program, kind):
    """The program and arguments a bench command runs (DP's, or a NIC's own variant)."""
    sizes, iters = args.sizes, args.iters or 1000
    if getattr(args, "raw", False):
        if args.nic != "tb2":
            raise OSError(errno.EINVAL, "--raw is the TB2's user-level FIFO ping-pong: use it with --nic tb2")
        from libdp._tb2_raw import raw_pingpong_program
        return raw_pingpong_program, (tuple(sizes or (0,)), iters), "raw TB2 FIFO pingpong", True
    if getattr(args, "pipeline", None):
        if args.nic != "myrinet":
            raise OSError(errno.EINVAL, "--pipeline is the EPOS bulk pipeline: use it with --nic myrinet")
        from libdp._epos import BULK_SIZES, bulk_pingpong
        from nic_drivers.myrinet.pipeline import parse_pipeline
        parse_pipeline(args.pipeline)
        return bulk_pingpong, (list(sizes or BULK_SIZES), args.iters or 10, args.pipeline), \
            f"EPOS pipeline ({args.pipeline}) bandwidth", False
    return program, (list(sizes or _bench.DEFAULT_SIZES), iters), kind, False


def _run_bench(args, program, kind):
    params = [tuple(x.split("=", 1)) if "=" in x else x for x in args.param]
    args.platform, args.nic = resolve_platform(args.platform, args.nic)
    profile = build_profile(args.platform, params)
    nic = args.nic
    program, prog_args, title, without_dp = _variant(args, program, kind)
    args.iters = prog_args[1]
    stats = None
    if args.real and program not in (_bench.pingpong, _bench.bandwidth):
        raise OSError(errno.EINVAL, f"{title} runs in modeled time only")
    if args.real:
        from libdp._realrun import run_real_spmd
        results, stats = run_real_spmd(program, *prog_args, platform=args.platform, nic=args.nic,
                                       params=params, load=args.load, transport=args.transport,
                                       seed=args.seed, cluster=args.cluster)
    else:
        cluster = Cluster(nodes=2, platform=args.platform, nic=args.nic, params=params, seed=args.seed,
                          load=args.load)
        if without_dp:                   # the user FIFOs and DP cannot share the card (SP-A18)
            for node in cluster.nodes:
                node.modules.rmmod("dp")
        results = cluster.run_spmd(program, *prog_args)
        stats = cluster.stats
    rows = results[0]
    doc = {"benchmark": kind, "time": "real" if args.real else "modeled", "platform": profile.name, "nic": nic,
           "iters": args.iters, "seed": args.seed, "params": profile.as_dict(),
           "overrides": dict(profile.overrides), "results": rows}

    def table():
        mode = "real time (wall clock)" if args.real else "modeled time"
        name = title if title != kind else f"DP {kind}"
        print(f"# {name}: {profile.name} + {nic}, {mode}, {args.iters} per size{overrides_note(profile.overrides)}")
        if rows and "packet_bytes" in rows[0]:
            print(f"# {'Size':<10}{'Bandwidth (MB/s)':>18}{'Packet (B)':>12}{'Latency (us)':>14}")
            for r in rows:
                print(f"{r['size']:<12}{r['mbytes_per_s']:>18.2f}{r['packet_bytes']:>12}{r['one_way_us']:>14.2f}")
        elif kind == "pingpong":
            print(f"# {'Size':<10}{'Latency (us)':>14}{'RTT (us)':>14}")
            for r in rows:
                print(f"{r['size']:<12}{r['one_way_us']:>14.2f}{r['rtt_us']:>14.2f}")
        else:
            print(f"# {'Size':<10}{'Bandwidth (MB/s)':>18}{'Delivered':>12}")
            for r in rows:
                print(f"{r['size']:<12}{r['mbytes_per_s']:>18.2f}{r['delivered']:>8}/{r['messages']}")

    return emit(args, doc, stats, table)

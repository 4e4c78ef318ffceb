"""The `dp` command.

    dp pingpong [--sizes 1,64,1500] [--iters N] [--platform NAME] [--nic NAME]
                [--param KEY=VALUE ...] [--load NAME[:k=v,...] ...] [--seed N]
                [--stats] [--json] [--real [--transport shm|udp|packet]]
    dp bandwidth   (same options)
    dp profile [NAME]      the platform profile's values and their sources
    dp modules             every available kernel module
    dp modinfo NAME        one module's description, parameters and sources
    dp am-pingpong         Active Messages round trip, 1..4 words (TB2, SP thin node)
    dp am-bandwidth        Active Messages store/get bandwidth, r-infinity and n-half
"""
from __future__ import annotations

import argparse
import errno
import json
import sys

from kernelsim import available_modules, available_profiles, find_module, load_profile
from libdp import _bench
from libdp._argtypes import int_list, positive_int
from libdp._cluster import Cluster, build_profile, resolve_platform
from libdp import _am_cli as am_cli

__all__ = ["main"]


def _sizes(text: str) -> list[int]:
    return int_list(text, "sizes", 0)


def _bench_parser(sub, name, help_text, default_sizes):
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--sizes", type=_sizes, default=None,
                   help=f"comma-separated message sizes in bytes (default: {','.join(map(str, default_sizes))})")
    p.add_argument("--iters", type=positive_int, default=None,
                   help="iterations (ping-pong) or messages (bandwidth) per size (default: 1000, as DP-A08)")
    p.add_argument("--platform", default=None,
                   help=f"platform profile ({', '.join(available_profiles())}; default: the NIC's, else p133)")
    p.add_argument("--nic", default=None, help="NIC model (default: the platform's)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a platform-profile value, e.g. link.rate_bps=10e6 (repeatable)")
    p.add_argument("--load", action="append", default=[], metavar="NAME[:key=value,...]",
                   help="load an extra kernel module into every node (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the modeled run (default: 0)")
    p.add_argument("--stats", action="store_true", help="print the counters of every ring, pool and queue")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    p.add_argument("--real", action="store_true",
                   help="real time: one OS process per node, frames on a real transport, wall-clock figures")
    p.add_argument("--transport", choices=("shm", "udp", "packet"), default="shm",
                   help="with --real: shared-memory rings between processes, UDP on loopback, or raw Ethernet "
                        "frames (AF_PACKET) on a veth pair between network namespaces (root, --nic dec21140) "
                        "(default: shm)")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dp", description="Directed Point, rebuilt: modeled and real cluster messaging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p = _bench_parser(sub, "pingpong", "DP ping-pong latency over two nodes (one-way = half the round trip)",
                      _bench.DEFAULT_SIZES)
    p.add_argument("--raw", action="store_true",
                   help="tb2 only: the raw user-level FIFO ping-pong of the SP AM paper, no DP (SP-B03)")
    p = _bench_parser(sub, "bandwidth", "DP one-way streaming bandwidth (MB = 10^6 bytes)", _bench.DEFAULT_SIZES)
    p.add_argument("--pipeline", default=None, metavar="adaptive|fixed:N",
                   help="myrinet only: bulk transfers through the EPOS pipeline, packet size adaptive or fixed")
    p = sub.add_parser("profile", help="show a platform profile's values and sources")
    p.add_argument("name", nargs="?", default="p133")
    p.add_argument("--json", action="store_true")
    sub.add_parser("modules", help="list every available kernel module")
    p = sub.add_parser("modinfo", help="show a module's description, parameters and sources")
    p.add_argument("name")
    am_cli.add_commands(sub)
    return parser


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
                                       params=params, load=args.load, transport=args.transport)
    else:
        cluster = Cluster(nodes=2, platform=args.platform, nic=args.nic, params=params, seed=args.seed,
                          load=args.load)
        if without_dp:                   # the user FIFOs and DP cannot share the card (SP-A18)
            for node in cluster.nodes:
                node.modules.rmmod("dp")
        results = cluster.run_spmd(program, *prog_args)
        stats = cluster.stats()
    rows = results[0]
    doc = {"benchmark": kind, "time": "real" if args.real else "modeled", "platform": profile.name, "nic": nic,
           "iters": args.iters, "seed": args.seed, "params": profile.as_dict(),
           "overrides": dict(profile.overrides), "results": rows}
    if args.stats:
        doc["stats"] = stats
    if args.json:
        json.dump(doc, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
        return 0
    mode = "real time (wall clock)" if args.real else "modeled time"
    over = ", ".join(f"{k}={v}" for k, v in profile.overrides.items())
    title = title if title != kind else f"DP {kind}"
    print(f"# {title}: {profile.name} + {nic}, {mode}, {args.iters} per size" + (f"; {over}" if over else ""))
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
    if args.stats:
        print("# statistics")
        _print_tree(stats, "#   ")
    return 0


def _print_tree(d, indent):
    for k, v in d.items():
        if isinstance(v, dict):
            print(f"{indent}{k}:")
            _print_tree(v, indent + "  ")
        else:
            print(f"{indent}{k}: {v}")


def _profile(args):
    prof = load_profile(args.name)
    if args.json:
        json.dump({k: {"value": prof.entry(k).value, "unit": prof.entry(k).unit, "source": prof.entry(k).source}
                   for k in sorted(prof.keys())}, sys.stdout, indent=1)
        print()
        return 0
    print(f"# {prof.name}: {prof.description}")
    for k in sorted(prof.keys()):
        e = prof.entry(k)
        print(f"{k:<24} {e.value!s:>12} {e.unit:<8} {e.source}")
    return 0


def _modules(_args):
    for name in sorted(available_modules()):
        try:
            desc = find_module(name).description
        except OSError as exc:
            desc = f"(cannot be loaded: {exc.strerror})"
        print(f"{name:<12} {desc}")
    return 0


def _modinfo(args):
    info = find_module(args.name).info()
    print(f"name:        {info['name']}")
    print(f"description: {info['description']}")
    print(f"depends:     {', '.join(info['depends']) or '-'}")
    print(f"sources:     {', '.join(info['sources']) or '-'}")
    for k, p in info["params"].items():
        print(f"parm:        {k}:{p['help']} ({p['type']}, default {p['default']!r})")
    return 0


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command in am_cli.COMMANDS:
            return am_cli.run_command(args)
        if args.command == "pingpong":
            return _run_bench(args, _bench.pingpong, "pingpong")
        if args.command == "bandwidth":
            return _run_bench(args, _bench.bandwidth, "bandwidth")
        if args.command == "profile":
            return _profile(args)
        if args.command == "modules":
            return _modules(args)
        if args.command == "modinfo":
            return _modinfo(args)
        parser.print_help()
        return 2
    except OSError as exc:
        print(f"dp: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

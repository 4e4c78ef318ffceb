"""``dp fm-pingpong`` and ``dp fm-bandwidth``: Fast Messages' figures, modeled or real.

    dp fm-pingpong  [--transport myrinet|smt] [--notify memory|pci] [--pacing auto|off|N] [--sizes 0,8,...]
                    [--iters N] [--platform P] [--param KEY=VALUE ...] [--seed N] [--stats] [--json]
    dp fm-pingpong  --real --transport smt [--sizes 8] [--iters N]     # two real processes, wall-clock us
    dp fm-bandwidth [--transport ...] [--notify ...] [--pacing ...] [--sizes ...] [--total BYTES] ...

``--param`` overrides a platform-profile value (``--param chipset.pwq_lines=8``) or, with
the ``fm.`` prefix, a parameter of the fm module (``--param fm.credits=4``); ``--load
fm:key=value,...`` does the latter too. ``--notify`` and ``--pacing`` are the module's
``notify`` and ``pacing``. Over Myrinet the two FM nodes are two hosts; over the
shared-memory transport they are two processes on the two CPUs of one host.
"""
from __future__ import annotations

import errno
import sys

from libdp._argtypes import int_list, positive_int
from libdp._report import emit, overrides_note
from libdp.targets import Target, notes_for, register

__all__ = ["add_commands"]

DEFAULT_PLATFORM = "hpvm19"


def add_commands(sub, common) -> None:
    parents = [common["model"]]
    for name, help_text in (("fm-pingpong", "FM ping-pong latency, one-way = half the round trip (FM-B01)"),
                            ("fm-bandwidth", "FM streaming bandwidth with r_inf and n_1/2, MB = 10^6 bytes (FM-B02)")):
        p = sub.add_parser(name, help=help_text, parents=parents,
                           description=f"{help_text}. Default platform: {DEFAULT_PLATFORM} (the assumed HPVM 1.9 "
                                       "machine). --param fm.KEY=VALUE sets a parameter of the fm module.")
        p.add_argument("--transport", choices=("myrinet", "smt"), default="myrinet",
                       help="myrinet: two hosts; smt: two processes of one host over shared memory")
        p.add_argument("--notify", choices=("memory", "pci"), default=None,
                       help="arrival notification (fm's notify; default memory, FM-C06)")
        p.add_argument("--pacing", default=None, metavar="auto|off|BYTES",
                       help="PIO pacing (fm's pacing; default auto: the start-up micro-benchmark, FM-A17)")
        p.add_argument("--sizes", default=None, type=lambda t: int_list(t, "message sizes", 0),
                       help="message sizes in bytes, comma-separated")
        p.add_argument("--iters", type=positive_int, default=None,
                       help="round trips per size (ping-pong, default 1000) or at most this many messages per "
                            "size (bandwidth, default 2000)")
        p.add_argument("--real", action="store_true",
                       help="two real processes of this host, one per CPU, over the real shared-memory transport "
                            "(--transport smt), wall clock")
        if name == "fm-pingpong":
            p.set_defaults(func=_pingpong)
        else:
            p.add_argument("--total", type=positive_int, default=None,
                           help="bytes streamed per size (default 1048576)")
            p.set_defaults(func=_bandwidth)


def _fm_params(args) -> tuple[list, dict, list]:
    """Profile overrides, and the fm module's parameters (``fm.KEY=VALUE``, --load fm:..., --notify, --pacing)."""
    from kernelsim import parse_param
    from libdp._cluster import parse_load
    profile, module = [], {}
    for item in args.param:
        key, value = parse_param(item)
        if key.startswith("fm."):
            module[key[3:]] = value
        else:
            profile.append((key, value))
    others = []
    for spec in args.load:
        name, mparams = parse_load(spec)
        if name == "fm":
            module.update(mparams)
        else:
            others.append((name, mparams))
    if args.notify:
        module["notify"] = args.notify
    if args.pacing:
        module["pacing"] = args.pacing
    return profile, module, others


def _cluster(args):
    from libdp._cluster import Cluster
    from libdp._fm_bench import placement_for
    profile, module, others = _fm_params(args)
    placement = placement_for(args.transport)
    args.platform = args.platform or DEFAULT_PLATFORM     # (the shared --platform's default is the NIC's)
    cluster = Cluster(nodes=max(placement) + 1, platform=args.platform, nic="myrinet", params=profile,
                      seed=args.seed, load=[*others, ("fm", module)])
    return cluster, module, placement


def _run(cluster, run_job, program, placement, *args):
    """Run the job; a modeled deadlock on a lossy wire says why: FM never retransmits."""
    try:
        return run_job(cluster, program, placement, *args)
    except OSError as exc:
        prof = cluster.profile
        faults = {k: prof[k] for k in ("fault.loss", "fault.corrupt") if prof[k]}
        if exc.errno != errno.EDEADLK or not faults:
            raise
        said = ", ".join(f"{k}={v:g}" for k, v in faults.items())
        raise OSError(errno.EDEADLK, f"FM lost a packet ({said}) and never retransmits (FM-C02): every process "
                                     "waits for a message that will not come") from None


def _doc(args, cluster, module, kind):
    prof = cluster.profile
    node = cluster.nodes[0]
    info = node.modules.modinfo("fm")["loaded"]
    return {"benchmark": kind, "time": "modeled", "platform": prof.name, "nic": "myrinet",
            "transport": args.transport, "seed": args.seed, "params": prof.as_dict(),
            "overrides": dict(prof.overrides), "fm_params": info["params"], "fm_overrides": dict(module),
            "notify": info["notify"], "pacing": info.get("pacing"), "dmesg": node.dmesg()}


def _title(doc) -> str:
    pacing = doc.get("pacing") or {}
    chunk = pacing.get("chunk_bytes")
    pace = "none" if not chunk else f"{chunk}-byte chunks"
    via = "Myrinet, two hosts" if doc["transport"] == "myrinet" else "shared memory, two processes of one host"
    over = overrides_note({**doc["overrides"], **{f"fm.{k}": v for k, v in doc["fm_overrides"].items()}})
    return (f"{doc['platform']}, {via}, modeled time; notify={doc['notify']}, PIO pacing: {pace} "
            f"({pacing.get('source', '-')}){over}")


def _pingpong(args) -> int:
    from libdp._fm_bench import DEFAULT_PP_SIZES, PAPER_LATENCY_US, fm_pingpong_program, run_job
    if args.real:
        return _real_pingpong(args)
    cluster, module, placement = _cluster(args)
    sizes = args.sizes or list(DEFAULT_PP_SIZES)
    iters = args.iters or 1000
    (rows, stats), _ = _run(cluster, run_job, fm_pingpong_program, placement, tuple(sizes), iters)
    doc = _doc(args, cluster, module, "fm-pingpong")
    doc.update(iters=iters, results=rows,
               paper_latency_us={"size": 0, "one_way_us": PAPER_LATENCY_US, "source": "FM-B01 (HPVM 1.9)"})

    def table():
        print(f"# FM ping-pong: {_title(doc)}, {iters} round trips per size")
        for note in notes_for(doc):
            print(f"# {note}")
        print(f"# {'Size':<10}{'Latency (us)':>14}{'RTT (us)':>14}")
        for r in rows:
            print(f"{r['size']:<12}{r['one_way_us']:>14.2f}{r['rtt_us']:>14.2f}")

    return emit(args, doc, lambda: {"fm_node0": stats, **cluster.stats()}, table)


def _bandwidth(args) -> int:
    from libdp._fm_bench import (DEFAULT_BW_MESSAGES, DEFAULT_BW_SIZES, PAPER_BANDWIDTH, fm_bandwidth_program,
                                 run_job, summarize)
    if args.real:
        return _real_bandwidth(args)
    cluster, module, placement = _cluster(args)
    sizes = args.sizes or list(DEFAULT_BW_SIZES)
    if 0 in sizes:
        raise OSError(errno.EINVAL, "fm-bandwidth streams messages of at least one byte")
    total = args.total or (1 << 20)

    def progress(row):
        print(f"# {row['size']} B: {row['mbytes_per_s']:.2f} MB/s", file=sys.stderr, flush=True)

    args.iters = args.iters or DEFAULT_BW_MESSAGES
    (rows, stats), _ = _run(cluster, run_job, fm_bandwidth_program, placement, tuple(sizes), total, args.iters,
                               progress if sys.stderr.isatty() and not args.json else None)
    r_inf, n_half = summarize(rows)
    doc = _doc(args, cluster, module, "fm-bandwidth")
    doc.update(total_bytes=total, max_messages=args.iters, results=rows, r_inf_mbytes_per_s=r_inf,
               n_half_bytes=n_half,
               paper_bandwidth_mbytes_per_s={"value": PAPER_BANDWIDTH, "source": "FM-B02 (HPVM 1.9): 100+ MB/s"})

    def table():
        cap = f", at most {args.iters} messages per size" if args.iters else ""
        print(f"# FM bandwidth: {_title(doc)}, {total} bytes per size{cap}")
        for note in notes_for(doc):
            print(f"# {note} (MB = 10^6 bytes)")
        print(f"# {'Size':<10}{'Bandwidth (MB/s)':>18}{'Messages':>10}")
        for r in rows:
            print(f"{r['size']:<12}{r['mbytes_per_s']:>18.2f}{r['messages']:>10}")
        nh = f"{n_half:.0f} bytes" if n_half is not None else "not reached"
        print(f"# r_inf = {r_inf:.2f} MB/s (largest message), n_1/2 = {nh}")

    return emit(args, doc, lambda: {"fm_node0": stats, **cluster.stats()}, table)


def _real_module(args) -> dict:
    if args.transport != "smt":
        raise OSError(errno.EINVAL, "real-time FM runs over the shared-memory transport: --real --transport smt")
    _profile, module, _others = _fm_params(args)
    return module


def _real_bandwidth(args) -> int:
    from libdp._fm_bench import real_smt_bandwidth, summarize
    module = _real_module(args)
    sizes = args.sizes or [64, 256, 1024, 2048, 8192]
    if 0 in sizes:
        raise OSError(errno.EINVAL, "fm-bandwidth streams messages of at least one byte")
    count = args.iters or 20000
    rows, stats = real_smt_bandwidth(tuple(sizes), count, fm_params=module)
    r_inf, n_half = summarize(rows)
    doc = {"benchmark": "fm-bandwidth", "time": "real", "transport": "smt", "messages": count, "results": rows,
           "r_inf_mbytes_per_s": r_inf, "n_half_bytes": n_half, "fm_overrides": dict(module)}

    def table():
        print(f"# FM bandwidth: two real processes of this host over POSIX shared memory (the SMT's queues on "
              f"real atomics), one per CPU, wall clock, {count} messages per size")
        print(f"# {'Size':<10}{'Bandwidth (MB/s)':>18}{'Messages':>10}")
        for r in rows:
            print(f"{r['size']:<12}{r['mbytes_per_s']:>18.2f}{r['messages']:>10}")
        nh = f"{n_half:.0f} bytes" if n_half is not None else "not reached"
        print(f"# r_inf = {r_inf:.2f} MB/s (largest message), n_1/2 = {nh}")

    return emit(args, doc, stats, table)


def _real_pingpong(args) -> int:
    from libdp._fm_bench import real_smt_pingpong
    module = _real_module(args)
    sizes = args.sizes or [8]
    iters = args.iters or 10000
    rows, stats = real_smt_pingpong(tuple(sizes), iters, fm_params=module)
    doc = {"benchmark": "fm-pingpong", "time": "real", "transport": "smt", "iters": iters, "results": rows,
           "fm_overrides": dict(module)}

    def table():
        print(f"# FM ping-pong: two real processes of this host over POSIX shared memory (the SMT's queues on "
              f"real atomics), one per CPU, wall clock, {iters} round trips per size")
        print(f"# {'Size':<10}{'Latency (us)':>14}{'RTT (us)':>14}{'RTT median':>14}")
        for r in rows:
            print(f"{r['size']:<12}{r['one_way_us']:>14.2f}{r['rtt_us']:>14.2f}{r['rtt_median_us']:>14.2f}")

    return emit(args, doc, stats, table)


# --------------------------------------------------------------------------- the paper's figures


def _row(doc, size, key):
    for r in doc["results"]:
        if r.get("size") == size:
            return r[key]
    raise ValueError(f"no row of size {size} in the result")


LINK_MBYTES_PER_S = 160.0   # the LANai 4 board's Myrinet link, 1.28 Gb/s (FM-A01): what "100+" can reach

register(Target(
    id="FM-B01", what="FM one-way latency, 0-byte message, HPVM 1.9 (memory notification)", unit="us",
    argv=("fm-pingpong", "--sizes", "0"), quick_argv=("fm-pingpong", "--sizes", "0", "--iters", "50"),
    model=lambda doc: _row(doc, 0, "one_way_us"), published=8.8,
    benchmark="fm-pingpong", platform=DEFAULT_PLATFORM, nic="myrinet", size=0,
    points={"one_way_us": 8.8, "rtt_us": 17.6}, settings={"notify": "memory"}))
register(Target(
    id="FM-B02", what="FM streaming bandwidth, 64 KB messages, HPVM 1.9 (\"100+\": 100 up to the link's 160)",
    unit="MB/s", argv=("fm-bandwidth", "--sizes", "65536"), quick_argv=("fm-bandwidth", "--sizes", "65536"),
    model=lambda doc: _row(doc, 65536, "mbytes_per_s"), published=100.0,
    published_range=(100.0, LINK_MBYTES_PER_S),
    benchmark="fm-bandwidth", platform=DEFAULT_PLATFORM, nic="myrinet", size=65536, points={"mbytes_per_s": 100.0},
    settings={"notify": "memory"}))
# FM 2.1 on the PII-300 polled a LANai register (memory notification came with HPVM 1.9):
# the same costs, the PII-300's machine, notify=pci. Nothing is fitted to these two.
register(Target(
    id="FM-B16", what="FM 2.1 minimum latency, PII-300 (PCI-register notification)", unit="us",
    argv=("fm-pingpong", "--platform", "pii300_lanai4", "--notify", "pci", "--sizes", "0"),
    quick_argv=("fm-pingpong", "--platform", "pii300_lanai4", "--notify", "pci", "--sizes", "0", "--iters", "50"),
    model=lambda doc: _row(doc, 0, "one_way_us"), published=9.0,
    benchmark="fm-pingpong", platform="pii300_lanai4", nic="myrinet", size=0, points={"one_way_us": 9.0},
    settings={"notify": "pci"}))
register(Target(
    id="FM-B17", what="FM 2.1 peak bandwidth (64 KB messages), PII-300 (PCI-register notification)", unit="MB/s",
    argv=("fm-bandwidth", "--platform", "pii300_lanai4", "--notify", "pci", "--sizes", "65536"),
    model=lambda doc: _row(doc, 65536, "mbytes_per_s"), published=92.0,
    benchmark="fm-bandwidth", platform="pii300_lanai4", nic="myrinet", size=65536, points={"mbytes_per_s": 92.0},
    settings={"notify": "pci"}))

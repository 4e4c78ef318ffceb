"""``dp pingpong``, ``dp bandwidth``, ``dp bibw``: DP's measurements, modeled or real.

    dp pingpong  [--sizes 1:1500] [--iters N] [--warmup N] [--full] [--nic NAME] [--platform NAME]
                 [--param KEY=VALUE ...] [--load NAME[:k=v,...] ...] [--seed N] [--stats] [--json]
                 [--plot FILE] [--real [--transport shm|udp|packet] [--kernel node|rank]]
    dp bandwidth [--window W] [--mode window|pingpong] (same options; --pipeline adaptive|fixed:N on Myrinet)
    dp bibw      [--window W] (same options)

``bandwidth`` and ``bibw`` are the OSU window benchmarks (osu_bw, osu_bibw), with the
messages DP dropped counted and placed (`libdp._bench`); ``bandwidth --mode pingpong``
is the size over half a round trip. Variants a NIC brings: ``--raw`` (TB2: the SP AM
paper's user-level FIFO ping-pong, no DP) and ``--pipeline`` (Myrinet: EPOS's
five-stage bulk pipeline). Options that do not apply to a run are refused.
"""
from __future__ import annotations

import errno
import functools

from libdp import _bench
from libdp._argtypes import non_negative_int, positive_int, size_list
from libdp._cluster import Cluster, build_profile, resolve_platform
from libdp._report import Column, Table, emit, overrides_note, progress
from libdp.targets import Target, notes_for, register

__all__ = ["add_commands"]

DEFAULT_PINGPONG_ITERS = 1000       # DP-A08
DEFAULT_WINDOWS = 16                # windows of 64 per size: about DP-A08's 1000 messages


def _sizes(text: str) -> list[int]:
    return size_list(text, "sizes", 0)


def _bench_parser(sub, common, name, help_text, iters_help):
    p = sub.add_parser(name, help=help_text, description=help_text, parents=[common["model"]])
    p.add_argument("--sizes", type=_sizes, default=None,
                   help=f"message sizes in bytes: a list (1,64,1500), a doubling range (1:4096), or both "
                        f"(default: {','.join(map(str, _bench.DEFAULT_SIZES))}, cut to the NIC's largest "
                        f"DP message)")
    p.add_argument("--iters", type=positive_int, default=None, help=iters_help)
    p.add_argument("--warmup", type=non_negative_int, default=None,
                   help="untimed iterations (windows) before each size's measurement")
    p.add_argument("--full", action="store_true", help="also min, max and standard deviation columns")
    p.add_argument("--nic", default=None, help="NIC model (default: the platform's)")
    p.add_argument("--real", action="store_true",
                   help="real time: one OS process per node, frames on a real transport, wall-clock figures")
    p.add_argument("--transport", choices=("shm", "udp", "packet"), default=None,
                   help="with --real: shared-memory rings between processes, UDP on loopback, or raw Ethernet "
                        "frames (AF_PACKET) on a veth pair between network namespaces (root, --nic dec21140) "
                        "(default: shm)")
    p.add_argument("--cluster", default=None, metavar="FILE",
                   help="with --real: run on this running cluster's nodes (dp cluster up) instead of bringing "
                        "one up for the run")
    p.add_argument("--kernel", choices=("node", "rank"), default=None,
                   help="with --real: where each node's kernel runs -- in a node process the benchmark's "
                        "ranks attach to (node, the default), or in the rank's own process (rank: one "
                        "process per node, no hand-off between program and kernel; no other process can "
                        "attach)")
    p.set_defaults(func=lambda args: _run_bench(args, name))
    return p


def add_commands(sub, common) -> None:
    p = _bench_parser(sub, common, "pingpong", "DP ping-pong latency over two nodes (one-way = half the round trip)",
                      f"round trips per size (default: {DEFAULT_PINGPONG_ITERS}, as DP-A08)")
    p.add_argument("--raw", action="store_true",
                   help="tb2 only: the raw user-level FIFO ping-pong of the SP AM paper, no DP (SP-B03)")
    window_help = f"messages per window (default: {_bench.DEFAULT_WINDOW}, as osu_bw)"
    p = _bench_parser(sub, common, "bandwidth",
                      "DP bandwidth, OSU style: windows of messages, one ack per window; MB/s of delivered "
                      "payload (MB = 10^6 bytes), with the messages sent, delivered and dropped",
                      f"windows per size (default: {DEFAULT_WINDOWS}); --mode pingpong: round trips "
                      f"(default: {DEFAULT_PINGPONG_ITERS})")
    p.add_argument("--window", type=positive_int, default=None, help=window_help)
    p.add_argument("--mode", choices=("window", "pingpong"), default=None,
                   help="window: the OSU window benchmark (default); pingpong: size over half a round trip")
    p.add_argument("--pipeline", default=None, metavar="adaptive|fixed:N",
                   help="myrinet only: bulk transfers through the EPOS pipeline, packet size adaptive or fixed")
    p = _bench_parser(sub, common, "bibw", "DP bidirectional bandwidth, OSU style: both nodes send windows at "
                                           "once; MB/s of both directions' delivered payload",
                      f"windows per size and direction (default: {DEFAULT_WINDOWS})")
    p.add_argument("--window", type=positive_int, default=None, help=window_help)


# --------------------------------------------------------------------------- what a run is


class _Run:
    """What one bench command runs: the program, its arguments, the table it fills."""

    def __init__(self, program, kwargs, title, columns, *, real_ok=True, without_dp=False, mode=None):
        self.program, self.kwargs, self.title, self.columns = program, kwargs, title, columns
        self.real_ok, self.without_dp, self.mode = real_ok, without_dp, mode


def _refuse(cond, message):
    if cond:
        raise OSError(errno.EINVAL, message)


def _check_options(args, kind):
    """Options that do not apply to this run are refused, never ignored."""
    _refuse(args.transport is not None and not args.real,
            "--transport chooses the real transport: use it with --real")
    _refuse(args.cluster is not None and not args.real, "--cluster names a cluster of real nodes: use it with --real")
    _refuse(args.kernel is not None and not args.real, "--kernel chooses where a real node's kernel runs: use it "
                                                       "with --real")
    _refuse(args.kernel == "rank" and args.cluster is not None,
            "--kernel rank runs each node's kernel in its rank: it brings its own cluster up, not --cluster's")
    _refuse(args.cluster is not None and args.transport is not None,
            "--transport and --cluster: a running cluster's transport is its own")
    raw, pipeline = getattr(args, "raw", False), getattr(args, "pipeline", None)
    mode = getattr(args, "mode", None)
    _refuse(raw and args.nic != "tb2", "--raw is the TB2's user-level FIFO ping-pong: use it with --nic tb2")
    _refuse(pipeline and args.nic != "myrinet", "--pipeline is the EPOS bulk pipeline: use it with --nic myrinet")
    _refuse(pipeline and mode is not None, "--mode does not apply to --pipeline (the EPOS pipeline is a bulk "
                                           "ping-pong)")
    _refuse(getattr(args, "window", None) is not None and (pipeline or mode == "pingpong"),
            "--window applies to the window benchmark, not to --pipeline or --mode pingpong")
    _refuse(args.full and (raw or pipeline or kind == "bibw"),
            "--full is not available for --raw, --pipeline and bibw")
    _refuse(args.real and (raw or pipeline), f"{'--raw' if raw else '--pipeline'} runs in modeled time only")


def _plan(args, kind, max_message) -> _Run:
    sizes = args.sizes
    default = _bench.default_sizes(max_message)
    w = {} if args.warmup is None else {"warmup": args.warmup}
    lat = [Column("size", "Size"), Column("one_way_us", "Latency (us)", ".2f"), Column("rtt_us", "RTT (us)", ".2f")]
    spread = [Column("min_us", "Min (us)", ".2f", full=True), Column("max_us", "Max (us)", ".2f", full=True),
              Column("stddev_us", "Stddev (us)", ".2f", full=True)]
    if getattr(args, "raw", False):
        from libdp._tb2_raw import raw_pingpong_program
        args.iters = args.iters or DEFAULT_PINGPONG_ITERS
        return _Run(functools.partial(raw_pingpong_program, sizes=tuple(sizes or (0,)), iters=args.iters, **w),
                    {}, "raw TB2 FIFO pingpong", lat, without_dp=True)
    if getattr(args, "pipeline", None):
        from libdp._epos import BULK_SIZES, bulk_pingpong
        from nic_drivers.myrinet.pipeline import parse_pipeline
        parse_pipeline(args.pipeline)
        args.iters = args.iters or 10
        return _Run(functools.partial(bulk_pingpong, sizes=list(sizes or BULK_SIZES), iters=args.iters,
                                      pipeline=args.pipeline, **w),
                    {}, f"EPOS pipeline ({args.pipeline}) bandwidth",
                    [Column("size", "Size"), Column("mbytes_per_s", "Bandwidth (MB/s)", ".2f"),
                     Column("packet_bytes", "Packet (B)"), Column("one_way_us", "Latency (us)", ".2f")])
    if kind == "pingpong" or getattr(args, "mode", None) == "pingpong":
        args.iters = args.iters or DEFAULT_PINGPONG_ITERS
        cols = lat + spread
        title = "DP pingpong"
        if kind == "bandwidth":
            cols = [Column("size", "Size"), Column("mbytes_per_s", "Bandwidth (MB/s)", ".2f"), *lat[1:], *spread]
            title = "DP bandwidth (size over half a round trip)"
        return _Run(_bench.pingpong, {"sizes": list(sizes or default), "iters": args.iters, "full": args.full, **w},
                    title, cols, mode="pingpong" if kind == "bandwidth" else None)
    args.iters = args.iters or DEFAULT_WINDOWS
    window = args.window or _bench.DEFAULT_WINDOW
    cols = [Column("size", "Size"), Column("mbytes_per_s", "Bandwidth (MB/s)", ".2f"),
            Column("messages", "Sent"), Column("delivered", "Delivered"), Column("dropped", "Dropped"),
            Column("where", "Where dropped"),
            Column("min_mbytes_per_s", "Min (MB/s)", ".2f", full=True),
            Column("max_mbytes_per_s", "Max (MB/s)", ".2f", full=True),
            Column("stddev_mbytes_per_s", "Stddev (MB/s)", ".2f", full=True)]
    program = _bench.bibw if kind == "bibw" else _bench.bandwidth
    title = "DP bidirectional bandwidth" if kind == "bibw" else "DP bandwidth"
    return _Run(program, {"sizes": [n for n in (sizes or default) if n], "iters": args.iters, "window": window,
                          "full": args.full, **w}, title, cols, mode="window")


def _run_bench(args, kind):
    params = [tuple(x.split("=", 1)) if "=" in x else x for x in args.param]
    args.platform, args.nic = resolve_platform(args.platform, args.nic)
    profile = build_profile(args.platform, params)
    _check_options(args, kind)
    run = _plan(args, kind, profile.get("dp.max_message", _bench.DEFAULT_SIZES[-1]))
    sizes = run.kwargs.get("sizes") or getattr(run.program, "keywords", {}).get("sizes", ())
    stats = None
    with progress(args, len(sizes), f"{run.title}") as bar:
        def on_row(row):
            bar.advance(f"{row['size']} B")
        if args.real:
            _refuse(not run.real_ok, f"{run.title} runs in modeled time only")
            from libdp._realrun import run_real_spmd
            results, stats = run_real_spmd(functools.partial(run.program, **run.kwargs), platform=args.platform,
                                           nic=args.nic, params=params, load=args.load,
                                           transport=args.transport or "shm", seed=args.seed,
                                           cluster=args.cluster, kernel=args.kernel or "node")
        else:
            cluster = Cluster(nodes=2, platform=args.platform, nic=args.nic, params=params, seed=args.seed,
                              load=args.load)
            if run.without_dp:                   # the user FIFOs and DP cannot share the card (SP-A18)
                for node in cluster.nodes:
                    node.modules.rmmod("dp")
            kwargs = dict(run.kwargs, on_row=on_row) if run.kwargs else {}
            results = cluster.run_spmd(functools.partial(run.program, **kwargs))
            stats = cluster.stats
    lossy = bool(args.real or any(profile.get(k, 0.0) for k in _bench.FAULT_KEYS))
    if run.mode == "window":
        rows = _bench.merge_window_results(results, lossy)
    else:
        rows = results[0]
    if run.mode == "pingpong":
        for r in rows:
            r["mbytes_per_s"] = r["size"] / r["one_way_us"] if r["one_way_us"] else None
    doc = {"benchmark": kind, "time": "real" if args.real else "modeled", "platform": profile.name,
           "nic": args.nic, "iters": args.iters, "seed": args.seed, "params": profile.as_dict(),
           "overrides": dict(profile.overrides), "results": rows}
    if run.mode is not None and kind != "pingpong":
        doc["mode"] = run.mode
    if run.mode == "window":
        doc.update(window=run.kwargs["window"], warmup_windows=run.kwargs.get("warmup", 1))
    return emit(args, doc, stats, _table(args, kind, run, doc, rows, profile, lossy))


def _table(args, kind, run, doc, rows, profile, lossy) -> Table:
    mode = "real time (wall clock)" if args.real else "modeled time"
    unit = {"window": f"{doc.get('iters')} windows of {doc.get('window')} per size"}.get(run.mode, f"{args.iters} per size")
    title = f"{run.title}: {profile.name} + {args.nic}, {mode}, {unit}{overrides_note(profile.overrides)}"
    columns = list(run.columns)
    display = rows
    notes = []
    if run.mode == "window":
        display = [dict(r, where=_where(r, lossy)) for r in rows]
        notes.append("MB = 10^6 bytes of delivered payload. Where dropped, by the receiving node's counters: "
                     "tbp = Token Buffer Pool full, ring = NIC receive ring or FIFO full, corrupt = failed the "
                     "link check, " + ("medium = lost on the way (fault injection or the real transport)" if lossy
                                       else "other = not seen by any counter"))
    elif rows and "lost" in rows[0]:
        columns[3:3] = [Column("samples", "Samples"), Column("lost", "Lost")]
        notes.append("lossy medium: a ping whose echo did not come in time (4 x the slowest round trip, "
                     f"{_bench.PING_TIMEOUT_S * 1e3:g} to {_bench.PING_TIMEOUT_MAX_S * 1e3:g} ms) is a lost sample; "
                     "latency is the mean of the samples that came back")
    notes.extend(notes_for(doc))
    return Table(title=title, columns=columns, rows=display, notes=notes)


def _where(row, lossy) -> str:
    parts = [f"{name} {n}" for name, n in _bench.where_dropped(row, lossy).items() if n]
    return ", ".join(parts).replace("tbp_full", "tbp").replace("ring_full", "ring") or "-"


# --------------------------------------------------------------------------- the paper's figures


def _row(doc, size, key):
    for r in doc["results"]:
        if r.get("size") == size:
            return r[key]
    raise ValueError(f"no row of size {size} in the result")


register(Target(
    id="DP-B01", what="DP round trip, 1 byte, P-133 + DEC 21140", unit="us",
    argv=("pingpong", "--sizes", "1"), quick_argv=("pingpong", "--sizes", "1", "--iters", "100"),
    model=lambda doc: _row(doc, 1, "rtt_us"), published=46.6,
    benchmark="pingpong", platform="p133", nic="dec21140", size=1,
    points={"rtt_us": 46.6, "one_way_us": 46.6 / 2}))
register(Target(
    id="DP-B02", what="DP bandwidth, 1500-byte messages, P-133 + DEC 21140", unit="MB/s",
    argv=("bandwidth", "--sizes", "1500"), quick_argv=("bandwidth", "--sizes", "1500", "--iters", "4"),
    model=lambda doc: _row(doc, 1500, "mbytes_per_s"), published=12.2,
    benchmark="bandwidth", platform="p133", nic="dec21140", size=1500, points={"mbytes_per_s": 12.2}))
register(Target(
    id="DP-B04", what="DP one-way latency, 1 byte, P-133 + DEC 21140 (Fig. 5; see N4)", unit="us",
    argv=("pingpong", "--sizes", "1"), quick_argv=("pingpong", "--sizes", "1", "--iters", "100"),
    model=lambda doc: _row(doc, 1, "one_way_us"), published=24.80, checked=False,
    benchmark="pingpong", platform="p133", nic="dec21140", size=1, points={"one_way_us": 24.80}))
register(Target(
    id="SP-B03", what="raw TB2 FIFO round trip (no DP), SP thin node", unit="us",
    argv=("pingpong", "--nic", "tb2", "--raw"), quick_argv=("pingpong", "--nic", "tb2", "--raw", "--iters", "100"),
    model=lambda doc: _row(doc, 0, "rtt_us"), published=46.8, published_range=(46.6, 47.0),
    benchmark="pingpong", platform="sp_thin", nic="tb2", size=0,
    points={"rtt_us": 46.8, "one_way_us": 23.4}))
register(Target(
    id="EP-A18", what="EPOS adaptive pipeline: packet size chosen for 64 KB messages, Athlon 550 + LANai 4.1",
    unit="bytes", argv=("bandwidth", "--nic", "myrinet", "--platform", "athlon550_lanai4", "--pipeline", "adaptive",
                        "--sizes", "65536"),
    model=lambda doc: _row(doc, 65536, "packet_bytes"), published=4096,
    benchmark="bandwidth", platform="athlon550_lanai4", nic="myrinet", size=65536, points={}))

"""``dp am-pingpong``, ``dp am-bandwidth``, ``dp am-stress``: the SP AM paper's figures,
modeled or real, and AM's reliability under a faulty switch.

    dp am-pingpong  [--sizes 1,2,3,4] [--iters 1000] [--param KEY=VALUE ...] [--seed N] [--stats] [--json]
                    [--real [--transport shm|udp | --cluster FILE]]
    dp am-bandwidth [--op store|get] [--mode async|blocking] [--sizes 16,...,1048576] [--total 1048576]
                    [--iters MAX_TRANSFERS] [--param KEY=VALUE ...] [--seed N] [--stats] [--json]
    dp am-bandwidth --window W [--op store|get] [--sizes 16,...,65536] [--iters WINDOWS] [--warmup N] [--full]
    dp am-stress    [--nodes 4] [--messages 100000] [--max-store 102400] [--dist log|uniform]
                    [--max-bytes N] [--mutate P] [--checksum] [--param fault.loss=0.1 ...] [--seed N] [--json]

``--param`` overrides a platform-profile value (``--param pci.write_s=2e-6``) or, with
the ``am.`` prefix, a parameter of the am module (``--param am.keepalive_polls=100``);
``--load am:key=value,...`` does the latter too. ``--real`` runs the same program on real
nodes (`libdp._realrun`): a TB2 cluster with am loaded brought up for the run, or a
running one (``--cluster FILE``, after ``dp insmod am --node all``). ``am-stress`` is
`libdp._am_stress` (the reliability suite of issue 11 by default). `add_commands` adds the
subcommands to the ``dp`` parser.
"""
from __future__ import annotations

import argparse
import errno

from libdp._argtypes import int_list, positive_int
from libdp._report import emit, overrides_note

__all__ = ["add_commands"]


def add_commands(sub, common) -> None:
    """Add ``am-pingpong``, ``am-bandwidth`` and ``am-stress`` to the ``dp`` command's subparsers."""
    parents = [common["model"]]
    p = sub.add_parser("am-pingpong", help="SP AM round trip: am_request_M / am_reply_M (SP-B01)", parents=parents,
                       description="SP Active Messages ping-pong on two modeled SP thin nodes: rank 0's "
                                   "am_request_M runs a handler on rank 1 that answers with am_reply_M. "
                                   "--param am.KEY=VALUE sets a parameter of the am module.")
    p.add_argument("--sizes", "--words", dest="sizes", default=None,
                   type=lambda t: int_list(t, "argument word counts", 1, 4),
                   help="argument words per message, comma-separated (1..4; default 1,2,3,4)")
    p.add_argument("--iters", type=positive_int, default=None, help="round trips per word count (default 1000)")
    _real_options(p)
    p.set_defaults(func=_pingpong)
    p = sub.add_parser("am-bandwidth", help="SP AM bulk bandwidth, am_store/am_get (SP-B08)", parents=parents,
                       description="SP AM bandwidth as the paper measured it: N bytes moved as ceil(N/n) "
                                   "transfers of n bytes; prints r_inf and the half-power point n_1/2. "
                                   "MB = 10^6 bytes. --param am.KEY=VALUE sets a parameter of the am module.")
    p.add_argument("--op", choices=("store", "get"), default="store")
    p.add_argument("--mode", choices=("async", "blocking"), default=None,
                   help="async (default): am_store_async / am_get issued back to back; blocking: am_store, or "
                        "am_get waiting for its handler, one at a time")
    p.add_argument("--window", type=positive_int, default=None, metavar="W",
                   help="the OSU window benchmark instead of the paper's: W am_store_async (or am_get) per "
                        "window, one short request from the data's receiver closing each; --iters windows per "
                        "size (default 4), sizes 16..65536 by default")
    p.add_argument("--warmup", type=positive_int, default=None, help="with --window: untimed windows per size "
                                                                       "(default 1)")
    p.add_argument("--full", action="store_true", help="with --window: min/max/stddev of the per-window rates")
    p.add_argument("--sizes", default=None, type=lambda t: int_list(t, "transfer sizes", 1),
                   help="transfer sizes n in bytes (default: 16, 32, ..., 1048576)")
    p.add_argument("--total", type=positive_int, default=None, help="N: bytes moved per size (default 1048576)")
    p.add_argument("--iters", type=positive_int, default=None,
                   help="at most this many transfers per size (default: all ceil(N/n), as the paper); with "
                        "--window: windows per size")
    _real_options(p)
    p.set_defaults(func=_bandwidth)
    p = sub.add_parser("am-stress", help="SP AM reliability: messages under combined faults, exactly once and intact",
                       parents=parents,
                       description="N nodes each send to the next two a seeded mix of am_request_M, am_store_async "
                                   "and am_get over a switch that loses, corrupts, duplicates and reorders packets; "
                                   "every handler checks order, count and contents. Defaults: the reliability "
                                   "suite of issue 11 (100,000 messages, 4 nodes, fault.loss=0.1, fault.corrupt="
                                   "0.01, fault.duplicate=0.01, fault.reorder=0.01; --param fault.KEY=VALUE "
                                   "changes one). Exit status 1 unless every message arrived exactly once, intact.")
    p.add_argument("--nodes", type=positive_int, default=4, help="nodes around the ring, 2 or more (default 4)")
    p.add_argument("--messages", type=positive_int, default=100_000, help="messages in all (default 100000)")
    p.add_argument("--max-store", type=positive_int, default=102_400,
                   help="largest am_store_async in bytes (default 102400)")
    p.add_argument("--dist", choices=("log", "uniform"), default="log",
                   help="store sizes log-uniform (default) or uniform over 0..--max-store")
    p.add_argument("--max-bytes", type=positive_int, default=None, help="bound on the bytes stored in all")
    p.add_argument("--mutate", type=_probability, default=0.0, metavar="P",
                   help="also damage this fraction of packets past the link CRC: one byte changed, the CRC "
                        "valid (default 0); only --checksum catches it")
    p.add_argument("--checksum", action="store_true",
                   help="AM's end-to-end checksum on (am.checksum=1): damaged packets are dropped, counted "
                        "(checksum_errors) and resent")
    p.add_argument("--deadline", type=_positive_seconds, default=600.0,
                   help="modeled seconds after which an unfinished run is a livelock (default 600)")
    p.set_defaults(func=_stress)


def _real_options(p) -> None:
    p.add_argument("--real", action="store_true",
                   help="real time: one node process and one attached process per node, wall-clock figures")
    p.add_argument("--transport", choices=("shm", "udp"), default=None,
                   help="with --real: the real transport of the cluster brought up for the run (default: shm)")
    p.add_argument("--cluster", default=None, metavar="FILE",
                   help="with --real: run on this running TB2 cluster (dp cluster up --nic tb2; dp insmod am)")


def _run(args, program, *pargs):
    """(cluster or None, am parameters, rank 0's rows, statistics): modeled, or on real nodes."""
    from libdp._cluster import parse_load
    for cond, msg in ((args.transport is not None and not args.real, "--transport: use it with --real"),
                      (args.cluster is not None and not args.real, "--cluster: use it with --real"),
                      (args.cluster is not None and args.transport is not None,
                       "--transport and --cluster: a running cluster's transport is its own")):
        if cond:
            raise OSError(errno.EINVAL, msg)
    if not args.real:
        cluster, am_params = _cluster(args)
        return cluster, am_params, cluster.run_spmd(program, *pargs)[0], cluster.stats
    from libdp._realrun import run_real_spmd
    profile_params, am_params = _split_params(args.param)
    load = []
    for spec in args.load:
        name, mparams = parse_load(spec)
        if name == "am":
            am_params.update(mparams)
        else:
            load.append(spec)
    load.append("am" + (":" + ",".join(f"{k}={v}" for k, v in am_params.items()) if am_params else ""))
    results, stats = run_real_spmd(program, *pargs, nic="tb2", platform=args.platform,
                                   params=[f"{k}={v}" for k, v in profile_params], load=load,
                                   transport=args.transport or "shm", seed=args.seed, cluster=args.cluster)
    return None, am_params, results[0], stats


def _split_params(items):
    """Profile overrides, and am module parameters (``am.KEY=VALUE``)."""
    from kernelsim import parse_param
    profile, module = [], {}
    for item in items:
        key, value = parse_param(item)
        if key.startswith("am."):
            module[key[3:]] = value
        else:
            profile.append((key, value))
    return profile, module


def _cluster(args):
    from libdp._cluster import Cluster, parse_load
    profile_params, am_params = _split_params(args.param)
    load = []
    for spec in args.load:
        name, mparams = parse_load(spec)
        if name == "am":
            am_params.update(mparams)
        else:
            load.append((name, mparams))
    load.append(("am", am_params))
    cluster = Cluster(nodes=2, platform=args.platform, nic="tb2", params=profile_params, seed=args.seed, load=load)
    return cluster, am_params


def _header_doc(args, cluster, am_params, kind):
    if cluster is None:                 # real nodes: the profile the nodes were built with
        from libdp._cluster import build_profile
        from kernelsim import parse_param
        prof = build_profile(args.platform or "sp_thin",
                             [p for p in (parse_param(x) for x in args.param) if not p[0].startswith("am.")])
        am_now = dict(am_params)
    else:
        prof = cluster.profile
        am_now = cluster.nodes[0].modules.lsmod()[-1]["params"] if cluster.nodes else {}
    return {"benchmark": kind, "time": "real" if cluster is None else "modeled", "platform": prof.name, "nic": "tb2",
            "seed": args.seed, "params": prof.as_dict(), "overrides": dict(prof.overrides),
            "am_params": am_now, "am_overrides": dict(am_params),
            **({"transport": args.cluster or args.transport or "shm"} if cluster is None else {})}


def _overrides(doc) -> str:
    return overrides_note({**doc["overrides"], **{f"am.{k}": v for k, v in doc["am_overrides"].items()}})


def _pingpong(args) -> int:
    from libdp._am_bench import PAPER_RTT_US, am_pingpong_program
    words = args.sizes or [1, 2, 3, 4]
    iters = args.iters or 1000
    cluster, am_params, rows, stats = _run(args, am_pingpong_program, tuple(words), iters)
    if rows:
        rows[-1].pop("am_stats", None)
    doc = _header_doc(args, cluster, am_params, "am-pingpong")
    doc.update(iters=iters, results=rows, paper_rtt_us={"words": 1, "rtt_us": PAPER_RTT_US, "source": "SP-B01"})

    def table():
        print(f"# SP AM ping-pong (am_request_M / am_reply_M, polling): {doc['platform']} + tb2, {_mode(doc)}, "
              f"{iters} round trips per row{_overrides(doc)}")
        print(f"# paper (SP-B01): {PAPER_RTT_US} us one-word round trip")
        print(f"# {'Words':<8}{'One-way (us)':>14}{'RTT (us)':>12}")
        for r in rows:
            print(f"{r['words']:<10}{r['one_way_us']:>14.2f}{r['rtt_us']:>12.2f}")

    return emit(args, doc, stats, table)


def _mode(doc) -> str:
    return "modeled time" if doc["time"] == "modeled" else f"real time (wall clock, real nodes over {doc['transport']})"


def _bandwidth(args) -> int:
    from libdp._am_bench import (DEFAULT_BW_SIZES, DEFAULT_TOTAL, PAPER_R_INF, am_bandwidth_program,
                                    summarize)
    if args.window is not None:
        return _window(args)
    for opt, given in (("--warmup", args.warmup is not None), ("--full", args.full)):
        if given:
            raise OSError(errno.EINVAL, f"{opt}: use it with --window")
    args.mode = args.mode or "async"
    sizes = args.sizes or [n for n in DEFAULT_BW_SIZES]
    total = args.total or DEFAULT_TOTAL
    if max(sizes) > total:
        raise OSError(errno.EINVAL, f"a transfer size ({max(sizes)}) cannot exceed --total ({total})")
    from libdp._report import progress
    with progress(args, 0 if args.real else len(sizes), f"am-bandwidth {args.op} {args.mode}") as bar:
        cluster, am_params, rows, stats = _run(args, am_bandwidth_program, args.op, args.mode, tuple(sizes), total,
                                               args.iters, True,
                                               None if args.real else
                                               (lambda row: bar.advance(f"{row['size']} B: "
                                                                        f"{row['mbytes_per_s']:.2f} MB/s")))
    if rows:
        rows[-1].pop("am_stats", None)
    r_inf, n_half = summarize(rows)
    doc = _header_doc(args, cluster, am_params, "am-bandwidth")
    doc.update(op=args.op, mode=args.mode, total_bytes=total, max_transfers=args.iters, results=rows,
               r_inf_mbytes_per_s=r_inf, n_half_bytes=n_half,
               paper_r_inf_mbytes_per_s={"value": PAPER_R_INF, "source": "SP-B08"})
    call = {("store", "async"): "am_store_async, pipelined", ("store", "blocking"): "am_store, one at a time",
            ("get", "async"): "am_get, pipelined", ("get", "blocking"): "am_get, one at a time"}[(args.op, args.mode)]

    def table():
        cap = f", at most {args.iters} transfers per size" if args.iters else ""
        print(f"# SP AM bandwidth ({call}): {doc['platform']} + tb2, {_mode(doc)}, N = {total} bytes as "
              f"ceil(N/n) transfers of n bytes{cap}{_overrides(doc)}")
        print(f"# paper (SP-B08): r_inf = {PAPER_R_INF} MB/s (MB = 10^6 bytes)")
        print(f"# {'Size':<10}{'Bandwidth (MB/s)':>18}{'Transfers':>11}")
        for r in rows:
            print(f"{r['size']:<12}{r['mbytes_per_s']:>18.2f}{r['transfers']:>11}")
        nh = f"{n_half:.0f} bytes" if n_half is not None else "not reached"
        print(f"# r_inf = {r_inf:.2f} MB/s (largest transfer), n_1/2 = {nh}")

    return emit(args, doc, stats, table)


def _window(args) -> int:
    """``dp am-bandwidth --window W``: the OSU window benchmark over AM (`am_window_program`)."""
    from libdp._am_bench import DEFAULT_WINDOW_SIZES, PAPER_R_INF, am_window_program
    from libdp._report import Column, Table, progress
    if args.mode == "blocking":
        raise OSError(errno.EINVAL, "--window posts W transfers at a time: it is am_store_async or am_get, not "
                                    "--mode blocking")
    if args.total is not None:
        raise OSError(errno.EINVAL, "--total is the paper's mode (N bytes as ceil(N/n) transfers); --window moves "
                                    "W x --iters transfers per size")
    sizes = args.sizes or list(DEFAULT_WINDOW_SIZES)
    iters = args.iters or 4
    warmup = 1 if args.warmup is None else args.warmup
    with progress(args, 0 if args.real else len(sizes), f"am-bandwidth --window {args.window} {args.op}") as bar:
        cluster, am_params, rows, stats = _run(args, am_window_program, args.op, tuple(sizes), args.window, iters,
                                               warmup, args.full,
                                               None if args.real else
                                               (lambda row: bar.advance(f"{row['size']} B: "
                                                                        f"{row['mbytes_per_s']:.2f} MB/s")))
    if rows:
        rows[-1].pop("am_stats", None)
    doc = _header_doc(args, cluster, am_params, "am-bandwidth")
    doc.update(op=args.op, mode="window", window=args.window, iters=iters, warmup_windows=warmup, results=rows,
               paper_r_inf_mbytes_per_s={"value": PAPER_R_INF, "source": "SP-B08"})
    call = "am_store_async" if args.op == "store" else "am_get"
    closer = "the receiver's one short request" if args.op == "store" else "the initiator's one short request " \
                                                                             "once the data is in"
    table = Table(
        title=f"SP AM bandwidth, OSU window ({args.window} x {call}, closed by {closer}): {doc['platform']} + tb2, "
              f"{_mode(doc)}, {iters} windows per size{_overrides(doc)}",
        columns=[Column("size", "Size"), Column("mbytes_per_s", "Bandwidth (MB/s)", ".2f"),
                 Column("messages", "Sent"), Column("delivered", "Delivered"),
                 Column("min_mbytes_per_s", "Min (MB/s)", ".2f", full=True),
                 Column("max_mbytes_per_s", "Max (MB/s)", ".2f", full=True),
                 Column("stddev_mbytes_per_s", "Stddev (MB/s)", ".2f", full=True)],
        rows=rows,
        notes=["MB = 10^6 bytes of payload; AM is reliable: every transfer is delivered (no drops to report)",
               f"paper (SP-B08): r_inf = {PAPER_R_INF} MB/s, measured its own way (dp am-bandwidth without --window)"])
    return emit(args, doc, stats, table)


def _positive_seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"a positive number of seconds, not {text}")
    return v


def _probability(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a probability: {text!r}") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"a probability is between 0 and 1, not {text}")
    return v


def _stress(args) -> int:
    from libdp._am_stress import SUITE_FAULTS, run_stress
    from libdp._cluster import parse_load
    from libdp._report import progress
    if args.nodes < 2:
        raise OSError(errno.EINVAL, "--nodes: at least 2 (every node sends to the next two around a ring)")
    if args.plot:
        raise OSError(errno.EINVAL, "--plot: am-stress has no curve to draw (its result is one count)")
    profile_params, am_params = _split_params(args.param)
    for spec in args.load:
        name, mparams = parse_load(spec)
        if name != "am":
            raise OSError(errno.EINVAL, f"--load {spec}: am-stress loads am only (give its parameters as am:KEY=VALUE)")
        am_params.update(mparams)
    if args.checksum:
        am_params["checksum"] = "1"
    faults = dict(SUITE_FAULTS)
    faults.update((k, v) for k, v in profile_params if k.startswith("fault."))
    others = [(k, v) for k, v in profile_params if not k.startswith("fault.")]
    step = max(1, args.messages // 100)
    with progress(args, -(-args.messages // step), f"am-stress: {args.messages} messages") as bar:
        seen = [0]

        def arrived(n):
            seen[0] += n
            if seen[0] % step == 0:
                bar.advance(f"{seen[0]} arrived")

        out = run_stress(args.nodes, args.messages, args.max_store, args.seed, faults, others, args.max_bytes,
                         args.platform, am_params, args.deadline, args.dist, arrived, args.mutate)
    am = out["am"]
    row = {k: out[k] for k in ("nodes", "node_pairs", "messages", "arrived_once_intact", "bytes_stored",
                               "modeled_s")}
    row.update(not_once_intact=out["messages"] - out["arrived_once_intact"], errors=out["error_count"],
               **{k: am.get(k, 0) for k in ("packets_sent", "retransmitted_packets", "gobacks", "nacks_sent",
                                           "keepalives_sent", "duplicates", "out_of_order", "acks_sent",
                                           "checksum_errors")})
    doc = {"benchmark": "am-stress", "time": "modeled", "platform": args.platform or "sp_thin", "nic": "tb2",
           "seed": args.seed, "fault_rates": out["fault_rates"], "am_overrides": am_params,
           "mutate": args.mutate, "max_store": args.max_store, "dist": args.dist, "max_bytes": args.max_bytes, "results": [row],
           "faults_injected": out["faults"], "wall_s": out["wall_s"], "events": out["events"]}
    stats = {"am": am, "adapters": out["adapters"], "malformed": out["malformed"], "per_node": out["per_node"]}
    if not out["ok"]:
        first = (out["failure"] or (out["errors"][0] if out["errors"] else
                                    f"nothing from {out['missing'][0]}" if out["missing"] else ""))
        raise OSError(errno.EIO, f"{out['messages'] - out['arrived_once_intact']} of {out['messages']} messages did "
                                 f"not arrive exactly once intact ({first})")

    def table():
        rates = ", ".join(f"{k[6:]} {float(v):g}" for k, v in out["fault_rates"].items())
        if args.mutate:
            rates += f", mutate {args.mutate:g} (CRC valid)"
        rates += f"; checksum {'on' if am_params.get('checksum') in ('1', 'true', 'yes', 'on', True) else 'off'}"
        print(f"# SP AM stress: {args.nodes} nodes ({out['node_pairs']} pairs), {out['messages']} messages "
              f"(requests, stores of {args.dist} sizes up to {args.max_store} B, gets), modeled time; "
              f"faults: {rates}")
        print(f"# {out['arrived_once_intact']} of {out['messages']} arrived exactly once, in order, intact; "
              f"{out['bytes_stored']} bytes stored; modeled {out['modeled_s'] * 1e3:.1f} ms, "
              f"wall {out['wall_s']:.1f} s")
        print(f"# injected: {out['faults']}")
        for k in ("packets_sent", "retransmitted_packets", "gobacks", "nacks_sent", "keepalives_sent",
                  "duplicates", "out_of_order", "acks_sent", "checksum_errors"):
            print(f"{k:<24}{row[k]:>12}")

    return emit(args, doc, stats, table)

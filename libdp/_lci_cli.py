"""``dp lci-logp``, ``dp lci-pingpong``, ``dp lci-bandwidth``: the LCI paper's measurements, modeled.

    dp lci-logp      [--variant V|all] [--platform P|all] [--param KEY=VALUE ...] [--seed N] [--stats] [--json]
    dp lci-pingpong  [--variant V] [--sizes 0,16,...,65536] [--iters N] [...]
    dp lci-bandwidth [--variant V] [--sizes ...] [--total BYTES] [--copy] [...]
    dp lci-stress    [--variant I-nirx|I-hrx|...] [--nodes 4] [--packets 10000] [--param fault.loss=0.01 ...]

``--variant`` takes the paper's names (I-sdma, I-pio, I-rcpy, I-nirx, I-hrx, I-1k, I-4k)
and composites (I-pio-1k); ``all`` runs the paper's seven. ``--load lci:key=value,...``
gives the lci module further parameters (``window=``, ``reliability=``, ...);
``--param lci.KEY=VALUE`` overrides LCI's profile costs like any other profile value.
``lci-logp`` runs both platforms of the paper unless ``--platform`` names one, and
prints I-sdma's published values (LCI-T3) beside the model's.
"""
from __future__ import annotations

import errno

from libdp._argtypes import int_list, positive_int
from libdp._report import emit, overrides_note
from libdp.targets import Target, register

__all__ = ["add_commands"]

PLATFORMS = ("ppro200_lanai4", "p3_1000_lanai9")


def add_commands(sub, common) -> None:
    parents = [common["model"]]
    p = sub.add_parser("lci-logp", help="LCI LogP parameters (os, or, L, g, end-to-end) of 16-byte messages",
                       parents=parents,
                       description="LogP microbenchmarks of LCI on Myrinet (000 section 5.1.3): os and or as host "
                                   "time in the send call and the receive path, g as the steady-state time per "
                                   "message of a stream, end-to-end as half a round trip, L = end-to-end - os - "
                                   "or. Both platforms of the paper unless --platform names one (or 'all').")
    _variant_arg(p, allow_all=True)
    p.set_defaults(func=_logp)
    p = sub.add_parser("lci-pingpong", help="LCI ping-pong latency vs message size", parents=parents,
                       description="LCI ping-pong between two modeled nodes; messages beyond an MTU go as "
                                   "MTU-sized packets. One-way = half the round trip.")
    _variant_arg(p)
    p.add_argument("--sizes", type=lambda t: int_list(t, "sizes", 0, 1 << 20), default=None,
                   help="message sizes in bytes (default: 0,16,64,256,1024,...,65536)")
    p.add_argument("--iters", type=positive_int, default=None, help="round trips per size (default 100)")
    p.set_defaults(func=_pingpong)
    p = sub.add_parser("lci-bandwidth", help="LCI one-way streaming bandwidth vs message size", parents=parents,
                       description="LCI one-way streaming throughput, MB = 10^6 bytes; --copy: the receiver "
                                   "copies every packet into a user buffer the size of the message (LCI-C26).")
    _variant_arg(p)
    p.add_argument("--sizes", type=lambda t: int_list(t, "sizes", 1, 1 << 22), default=None,
                   help="message sizes in bytes (default: 16,64,...,1048576)")
    p.add_argument("--total", type=positive_int, default=None,
                   help="bytes streamed per size (default 1048576; at least 4 and at most 2000 messages)")
    p.add_argument("--copy", action="store_true", help="the receiver copies each packet into a user buffer")
    p.set_defaults(func=_bandwidth)
    p = sub.add_parser("lci-stress", help="LCI reliability: packets under combined faults, exactly once, in order",
                       parents=parents,
                       description="N nodes each send to the next two around a ring packets of seeded random sizes "
                                   "(header to an MTU) over switches that lose, corrupt, duplicate and reorder "
                                   "packets; every upcall checks sender, order and contents. Defaults: issue 9's "
                                   "fault test (I-nirx, 10,000 packets, 4 nodes, fault.loss=0.01, fault.corrupt="
                                   "0.01, fault.duplicate=0.01, fault.reorder=0.01; --param fault.KEY=VALUE "
                                   "changes one). Variants without retransmission stop with EIO naming the broken "
                                   "assumption (LCI-C03). Exit status 1 unless every packet arrived exactly once.")
    _variant_arg(p)
    p.add_argument("--nodes", type=positive_int, default=4, help="nodes around the ring, 2 or more (default 4)")
    p.add_argument("--packets", type=positive_int, default=10_000, help="packets in all (default 10000)")
    p.set_defaults(func=_stress)


def _variant_arg(p, allow_all=False) -> None:
    more = "; 'all': the paper's seven" if allow_all else ""
    p.add_argument("--variant", default=None,
                   help=f"LCI variant: I-sdma (default), I-pio, I-rcpy, I-nirx, I-hrx, I-1k, I-4k, I-pio-1k, ...{more}")


def _split(args):
    """Profile overrides, lci module parameters from --load, other modules to load."""
    from kernelsim import parse_param
    from libdp._cluster import parse_load
    profile = [parse_param(item) for item in args.param]
    lci_params, load = {}, []
    for spec in args.load:
        name, mparams = parse_load(spec)
        if name == "lci":
            lci_params.update(mparams)
        else:
            load.append((name, mparams))
    return profile, lci_params, load


def _variants(args, allow_all=False) -> list[str]:
    from protocols.lci import PAPER_VARIANTS, parse_variant
    if args.variant is None:
        return [None]
    if args.variant == "all":
        if not allow_all:
            raise OSError(errno.EINVAL, "--variant all is for lci-logp; name one variant here")
        return list(PAPER_VARIANTS)
    parse_variant(args.variant)                    # EINVAL naming what is wrong
    return [args.variant]


def _cluster(args, platform, variant):
    from libdp._cluster import Cluster
    profile, lci_params, load = _split(args)
    params = dict(lci_params)
    if variant is not None:
        params["variant"] = variant
    load = load + [("lci", params)]
    c = Cluster(nodes=2, platform=platform, nic="myrinet", params=profile, seed=args.seed, load=load)
    svc = c.nodes[0].services["lci"]
    return c, svc


def _header(kind, args, cluster, svc):
    prof = cluster.profile
    return {"benchmark": kind, "time": "modeled", "platform": prof.name, "nic": "myrinet", "seed": args.seed,
            "variant": svc.variant.name, "window": svc.window, "lci_params": _lci_lsmod(cluster),
            "overrides": dict(prof.overrides)}


def _lci_lsmod(cluster) -> dict:
    for m in cluster.nodes[0].modules.lsmod():
        if m["name"] == "lci":
            return m["params"]
    return {}


def _logp(args) -> int:
    from libdp._lci_bench import LOGP_KEYS, LOGP_SIZE, PAPER_LOGP, combine_logp, logp_program
    if args.platform in (None, "all"):
        platforms = list(PLATFORMS)
    else:
        platforms = [args.platform]
    variants = _variants(args, allow_all=True)
    rows, stats, paper = [], {}, []
    for platform in platforms:
        for v in variants:
            cluster, svc = _cluster(args, platform, v)
            res = cluster.run_spmd(logp_program)
            row = {"variant": svc.variant.name, "platform": cluster.profile.name, "size": LOGP_SIZE,
                   "window": svc.window, **combine_logp(res)}
            rows.append(row)
            if args.stats:
                stats[f"{row['platform']}/{row['variant']}"] = cluster.stats()
        if platform in PAPER_LOGP:
            pub = PAPER_LOGP[platform]
            model = next((r for r in rows if r["platform"] == platform and r["variant"] == "I-sdma"), None)
            entry = {"variant": "I-sdma", "platform": platform, "size": LOGP_SIZE, **pub,
                     "source": "LCI-T3 (LCI paper Table III)"}
            if model is not None:
                entry["model_error_pct"] = {k: (model[k] - pub[k]) / pub[k] * 100 for k in LOGP_KEYS}
            paper.append(entry)
    over = {k: v for k, v in _split(args)[0]}
    doc = {"benchmark": "lci-logp", "time": "modeled", "nic": "myrinet", "seed": args.seed, "size": LOGP_SIZE,
           "platforms": platforms, "variants": sorted({r["variant"] for r in rows}, key=[r["variant"] for r in
                                                                                        rows].index),
           "overrides": over, "lci_params": _split(args)[1], "results": rows, "paper": paper}

    def table():
        names = {"os_us": "os", "or_us": "or", "L_us": "L", "g_us": "g", "end_to_end_us": "end-to-end"}
        for platform in platforms:
            prow = [r for r in rows if r["platform"] == platform]
            pub = next((e for e in paper if e["platform"] == platform), None)
            print(f"# LCI LogP, {LOGP_SIZE}-byte messages: {platform} + myrinet, modeled time (us)"
                  f"{overrides_note(over)}")
            head = "".join(f"{r['variant']:>10}" for r in prow)
            extra = f"{'paper I-sdma':>14}{'error':>9}" if pub else ""
            print(f"# {'':<12}{head}{extra}")
            for k in LOGP_KEYS:
                vals = "".join(f"{r[k]:>10.2f}" for r in prow)
                e = ""
                if pub:
                    err = pub.get("model_error_pct", {}).get(k)
                    e = f"{pub[k]:>14.1f}" + (f"{err:>+8.1f}%" if err is not None else f"{'':>9}")
                print(f"{names[k]:<14}{vals}{e}")
            print(f"{'# window W':<14}" + "".join(f"{r['window']:>10}" for r in prow))

    return emit(args, doc, stats, table)


def _pingpong(args) -> int:
    from libdp._lci_bench import DEFAULT_PP_SIZES, pingpong_program
    variant = _variants(args)[0]
    cluster, svc = _cluster(args, args.platform, variant)
    sizes = args.sizes or list(DEFAULT_PP_SIZES)
    iters = args.iters or 100
    res = cluster.run_spmd(pingpong_program, tuple(sizes), iters)
    rows = res[0]["rows"]
    doc = _header("lci-pingpong", args, cluster, svc)
    doc.update(iters=iters, results=rows)

    def table():
        print(f"# LCI ping-pong ({doc['variant']}, polling): {doc['platform']} + myrinet, modeled time, {iters} "
              f"round trips per size{overrides_note(doc['overrides'])}")
        print(f"# {'Size':<10}{'One-way (us)':>14}{'RTT (us)':>12}")
        for r in rows:
            print(f"{r['size']:<12}{r['one_way_us']:>14.2f}{r['rtt_us']:>12.2f}")

    return emit(args, doc, cluster.stats, table)


def _bandwidth(args) -> int:
    from libdp._lci_bench import DEFAULT_BW_SIZES, bandwidth_program
    variant = _variants(args)[0]
    cluster, svc = _cluster(args, args.platform, variant)
    sizes = args.sizes or list(DEFAULT_BW_SIZES)
    total = args.total or (1 << 20)
    res = cluster.run_spmd(bandwidth_program, tuple(sizes), total, 2000, args.copy)
    rows = res[0]["rows"]
    doc = _header("lci-bandwidth", args, cluster, svc)
    doc.update(copy=args.copy, total_bytes=total, results=rows)

    def table():
        how = "receiver copies into a user buffer" if args.copy else "no receiver copy"
        print(f"# LCI bandwidth ({doc['variant']}, one-way stream, {how}): {doc['platform']} + myrinet, modeled "
              f"time, MB = 10^6 bytes{overrides_note(doc['overrides'])}")
        print(f"# {'Size':<10}{'Bandwidth (MB/s)':>18}{'Messages':>10}")
        for r in rows:
            print(f"{r['size']:<12}{r['mbytes_per_s']:>18.2f}{r['messages']:>10}")

    return emit(args, doc, cluster.stats, table)


def _stress(args) -> int:
    from libdp._lci_stress import SUITE_FAULTS, run_stress
    profile, lci_params, load = _split(args)
    if load:
        raise OSError(errno.EINVAL, "lci-stress loads lci only (give its parameters as --load lci:KEY=VALUE)")
    faults = dict(SUITE_FAULTS)
    faults.update((k, v) for k, v in profile if k.startswith("fault."))
    others = [(k, v) for k, v in profile if not k.startswith("fault.")]
    out = run_stress(args.variant or "I-nirx", args.nodes, args.packets, args.seed, faults, others,
                     args.platform or PLATFORMS[0], lci_params)
    # Where the protocol runs: the host's counters under I-hrx, the NI's under I-nirx.
    side = out["host"] if out["host"].get("retransmitted") else out["ni"]
    row = {"variant": out["variant"], "platform": out["platform"], "nodes": out["nodes"], "packets": out["packets"],
           "delivered": out["delivered"], "ok": out["ok"], "retransmitted": side.get("retransmitted", 0),
           "acks_sent": side.get("acks_sent", 0), "crc_drops": out["boards"]["crc_errors"],
           "duplicates_dropped": side.get("duplicates", 0), "out_of_order_dropped": side.get("out_of_order", 0),
           "outstanding_at_end": out["host"]["outstanding"], "modeled_s": out["modeled_s"]}
    doc = {"benchmark": "lci-stress", "time": "modeled", "platform": out["platform"], "nic": "myrinet",
           "variant": out["variant"], "seed": args.seed, "fault_rates": out["fault_rates"],
           "overrides": dict(others), "lci_params": lci_params, "results": [row],
           "faults_injected": out["faults"], "wall_s": out["wall_s"]}
    stats = {"ni": out["ni"], "host": out["host"], "boards": out["boards"]}
    if not out["ok"]:
        first = out["errors"][0] if out["errors"] else f"missing {out['missing']}"
        raise OSError(errno.EIO, f"{out['packets'] - out['delivered']} of {out['packets']} packets did not arrive "
                                 f"exactly once in order ({first})")

    def table():
        rates = ", ".join(f"{k[6:]} {v:g}" for k, v in out["fault_rates"].items())
        print(f"# LCI stress ({row['variant']}): {row['nodes']} {row['platform']} nodes, {row['packets']} packets, "
              f"modeled time; faults: {rates}")
        print(f"# {row['delivered']} of {row['packets']} arrived exactly once, in FIFO order, intact; modeled "
              f"{row['modeled_s'] * 1e3:.1f} ms, wall {out['wall_s']:.1f} s")
        print(f"# injected: {out['faults']}")
        for k in ("retransmitted", "acks_sent", "crc_drops", "duplicates_dropped", "out_of_order_dropped",
                  "outstanding_at_end"):
            print(f"{k:<24}{row[k]:>12}")

    return emit(args, doc, stats, table)


# --------------------------------------------------------------------------- the paper's figures

_T3_WHAT = {"os_us": "send overhead os", "or_us": "receive overhead or", "L_us": "latency L",
            "g_us": "gap g", "end_to_end_us": "end-to-end latency"}
_T3_PLATFORM = {"ppro200_lanai4": "PPro", "p3_1000_lanai9": "P3"}


def _logp_row(platform, key):
    def read(doc):
        for r in doc["results"]:
            if r["platform"] == platform and r["variant"] == "I-sdma":
                return r[key]
        raise ValueError(f"no I-sdma row for {platform} in the lci-logp result")
    return read


def _register_table3() -> None:
    """LCI-T3: I-sdma's LogP values, five per platform, each its own target (one lci-logp
    run per platform measures all five)."""
    from libdp._lci_bench import PAPER_LOGP
    for platform, short in _T3_PLATFORM.items():
        argv = ("lci-logp", "--variant", "I-sdma", "--platform", platform)
        for key, what in _T3_WHAT.items():
            published = PAPER_LOGP[platform][key]
            register(Target(
                id=f"LCI-T3/{short}/{key.removesuffix('_us')}",
                what=f"LCI I-sdma {what}, 16-byte messages, {short} (LCI-T3)", unit="us",
                argv=argv, model=_logp_row(platform, key), published=published,
                benchmark="lci-logp", platform=platform, nic="myrinet", size=16, points={key: published}))


_register_table3()

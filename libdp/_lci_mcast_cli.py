"""``dp lci-bcast`` and ``dp lci-fa``: LCI multicast and fetch-and-add on 2 to 1024 modeled nodes.

    dp lci-bcast [--nodes N] [--tree binary|binomial|k=F] [--variant V|all] [--sizes 16,...]
                 [--iters N] [--total BYTES] [--platform P] [--param K=V] [--seed N] [--stats] [--json]
    dp lci-fa    [--nodes N] [--variant V|all] [--target NODE] [...]

``lci-bcast``, for each message size (MTU-sized packets beyond an MTU): the *latency*
from the root's first send until the last receiver has the whole message in a user
buffer (the mean over ``--iters`` broadcasts after a first one, each started once
every receiver has reported the previous one -- up the same tree, each node once it
and its subtree have it, so that the reports never converge on the root while the
message is still going down), and the *throughput* of a stream of
messages, as the root's outgoing data rate: bytes broadcast over the time until the
last receiver has the last of them, the receivers copying every packet into a user
buffer (MB = 10^6 bytes). Variants: the module's (I-sdma, I-pio, I-nirx: NI
forwarding; I-sdma-hmc, I-hrx: host forwarding) and I-sdma-mpimc, MPICH's
message-forwarding broadcast over I-sdma unicast (``libdp.lci_mcast``; binomial
unless --tree says binary). ``all`` runs those six into one table.

``lci-fa``: every node in turn does fetch-and-adds on one node's NI (``--target``,
default 0) while the others are idle; the latency of one, averaged, per node and
overall.
"""
from __future__ import annotations

import errno
import gc

from libdp._argtypes import int_list, positive_int
from libdp._report import emit, overrides_note, progress

__all__ = ["add_commands", "bcast_program", "fa_program", "BCAST_VARIANTS"]

BCAST_VARIANTS = ("I-sdma", "I-pio", "I-nirx", "I-sdma-hmc", "I-hrx", "I-sdma-mpimc")
FA_VARIANTS = ("I-sdma", "I-pio", "I-nirx", "I-hrx")
DEFAULT_SIZES = (16, 256, 1024, 4096, 16384, 65536)
MAX_NODES = 1024


def add_commands(sub, common) -> None:
    parents = [common["model"]]
    p = sub.add_parser("lci-bcast", help="LCI multicast latency and throughput vs message size, 2..1024 nodes",
                       parents=parents, description=__doc__.split("``lci-fa``")[0].split("\n\n", 2)[2])
    _nodes_arg(p)
    p.add_argument("--tree", default=None, help="spanning tree: binary, binomial or k=F (default binary; "
                                                "binomial for I-sdma-mpimc, as MPICH)")
    p.add_argument("--variant", default=None, help=f"{', '.join(BCAST_VARIANTS)}, or all (default I-sdma)")
    p.add_argument("--sizes", type=lambda t: int_list(t, "sizes", 0, 1 << 20), default=None,
                   help="message sizes in bytes (default 16,256,1024,4096,16384,65536)")
    p.add_argument("--iters", type=positive_int, default=None, help="timed broadcasts per size (default 3)")
    p.add_argument("--total", type=positive_int, default=None,
                   help="bytes streamed per size for the throughput (default 262144; 4..200 messages)")
    p.add_argument("--no-throughput", action="store_true", help="latency only")
    p.set_defaults(func=_bcast)
    p = sub.add_parser("lci-fa", help="LCI fetch-and-add latency from every node to one NI", parents=parents,
                       description="Fetch-and-add on one node's NI (LCI-C11; its host with I-hrx), from every "
                                   "other node in turn; modeled time.")
    _nodes_arg(p)
    p.add_argument("--variant", default=None, help=f"{', '.join(FA_VARIANTS)}, or all (default I-sdma)")
    p.add_argument("--target", type=int, default=0, help="the node whose variable is used (default 0)")
    p.add_argument("--iters", type=positive_int, default=None, help="fetch-and-adds per node (default 5)")
    p.set_defaults(func=_fa)


def _nodes_arg(p) -> None:
    p.add_argument("--nodes", type=lambda t: int_list(t, "nodes", 2, MAX_NODES)[0], default=64,
                   help="modeled nodes (default 64, the paper's clusters; up to 1024)")


def _cluster(args, variant: str, tree: str | None = None):
    from libdp._cluster import Cluster
    from libdp._lci_cli import _split
    profile, lci_params, load = _split(args)
    params = dict(lci_params)
    params["variant"] = "I-sdma" if variant == "I-sdma-mpimc" else variant
    if tree is not None and variant != "I-sdma-mpimc":
        params["tree"] = tree
    c = Cluster(nodes=args.nodes, platform=args.platform or "p3_1000_lanai9", nic="myrinet", params=profile,
                seed=args.seed, load=load + [("lci", params)])
    return c


def _variants(args, allowed) -> list[str]:
    from protocols.lci import parse_variant
    if args.variant in (None, ""):
        return ["I-sdma"]
    if args.variant == "all":
        return list(allowed)
    if args.variant != "I-sdma-mpimc":
        parse_variant(args.variant)
    return [args.variant]


# -- the programs ------------------------------------------------------------------------------------


async def bcast_program(dp, rank, size, sizes, iters, total, mpich_tree, do_tput, advance):
    """Rank 0 broadcasts; every receiver copies into a user buffer and reports each message.

    Reports go up the broadcast's tree: a node reports to its parent once it has the
    message and every child has reported. (Reports straight to the root from every node
    converged on the root's link while the message was still going down: an interior
    NI's report, stuck in that hot spot, held its one send engine and the forward to
    its next child behind it -- a figure of the measurement, not of the broadcast.)"""
    from libdp.lci import LCI
    from libdp.lci_mcast import Inbox, mpich_bcast, packets
    from protocols.lci.trees import Group, parse_tree
    root = 0
    lci = await LCI.open(dp)
    mtu = lci.mtu
    st = {"n": 0, "want": 0, "per": 1, "buf": None, "dones": 0, "dwant": 0}
    inbox = None
    group = lci.group
    tree = Group(group["members"], parse_tree(mpich_tree or group["tree"]))
    kids = set(tree.children(rank, root))
    parent = tree.parent(rank, root)

    def upcall(pkt):
        if pkt.src in kids and pkt.length == 1:
            st["dones"] += 1                          # a child's subtree has the message
            return False
        if inbox is not None:
            inbox(pkt)
        elif st["buf"] is not None and pkt.length:
            i = st["n"] % st["per"]
            pkt.copy_to(st["buf"], min(i * mtu, st["buf"].size - pkt.length))
        st["n"] += 1
        return False

    lci.set_upcall(upcall)
    out = {"t0": [], "arrive": [], "tput_t0": [], "tput_end": [], "stats": None}

    async def report():
        """This node and its subtree have the message: tell the parent."""
        st["dwant"] += len(kids)
        if st["dones"] < st["dwant"]:
            await lci.poll_until(lambda: st["dones"] >= st["dwant"])
        if parent >= 0:
            await lci.send(parent, b"d")

    async def one_message(data, n):
        if mpich_tree is not None:
            await mpich_bcast(lci, inbox, root, data if rank == root else None, n, tree=mpich_tree,
                              members=group["members"])
        elif rank == root:
            if not data:
                await lci.bcast(b"")
            for off in range(0, len(data), mtu):
                await lci.bcast(data[off:off + mtu])
        else:
            st["want"] += packets(n, mtu)             # counted from the start: a poll may take several
            await lci.poll_until(lambda: st["n"] >= st["want"])

    try:
        for n in sizes:
            k = packets(n, mtu)
            if rank != root:
                if st["buf"] is not None:
                    lci.free(st["buf"])
                st["buf"] = lci.alloc(max(n, 4))
                st["per"] = k
                if mpich_tree is not None:
                    inbox = Inbox(st["buf"], mtu)
            data = bytes(n) if rank == root else None
            arrive, t0s = [], []
            for it in range(iters + 1):
                if rank == root:
                    t0s.append(dp.now())
                    await one_message(data, n)
                else:
                    await one_message(None, n)
                    arrive.append(dp.now())
                await report()
            out["t0"].append(t0s[1:])
            out["arrive"].append(arrive[1:])
            if do_tput:
                count = max(4, min(200, total // max(n, 1)))
                if rank == root:
                    t0 = dp.now()
                    for _ in range(count):
                        await one_message(data, n)
                    out["tput_t0"].append(t0)
                    out["tput_count"] = out.get("tput_count", []) + [count]
                else:
                    for _ in range(count):
                        await one_message(None, n)
                    out["tput_end"].append(dp.now())
                await report()
            if rank == root and advance is not None:
                advance(f"{n} B")
        out["stats"] = lci.stats() if rank in (root, 1) else None
    finally:
        await lci.close()
    return out


def combine_bcast(results, sizes, variant, tree, nodes, do_tput) -> list:
    rows = []
    r0 = results[0]
    for i, n in enumerate(sizes):
        lat = []
        for j, t0 in enumerate(r0["t0"][i]):
            last = max(r["arrive"][i][j] for r in results[1:])
            lat.append(last - t0)
        row = {"variant": variant, "tree": tree, "nodes": nodes, "size": n,
               "latency_us": sum(lat) / len(lat) * 1e6}
        if do_tput:
            end = max(r["tput_end"][i] for r in results[1:])
            count = r0["tput_count"][i]
            row["mbytes_per_s"] = n * count / (end - r0["tput_t0"][i]) / 1e6
            row["messages"] = count
        else:
            row["mbytes_per_s"] = None
        rows.append(row)
    return rows


async def fa_program(dp, rank, size, target, iters):
    """Each node in turn (a token passed by F&A on the target's value) times `iters` F&As."""
    from libdp.lci import LCI
    lci = await LCI.open(dp)
    got = []
    lci.set_upcall(lambda pkt: got.append(pkt.src) or False)
    out = {"lat": None, "values": []}
    try:
        order = [r for r in range(size) if r != target]
        if rank == target:
            # The target only serves (its NI does; with I-hrx its host, which polls).
            await lci.poll_until(lambda: len(got) >= len(order))
        else:
            i = order.index(rank)
            if i > 0:
                await lci.poll_until(lambda: bool(got))
            t0 = dp.now()
            for _ in range(iters):
                out["values"].append(await lci.fetch_add(target, 1))
            out["lat"] = (dp.now() - t0) / iters
            if i + 1 < len(order):
                await lci.send(order[i + 1], b"go")
            await lci.send(target, b"done")
    finally:
        await lci.close()
    return out


# -- the commands ------------------------------------------------------------------------------------


def _bcast(args) -> int:
    from protocols.lci.trees import parse_tree
    tree = parse_tree(args.tree or "binary").name          # EINVAL before any cluster is built
    variants = _variants(args, BCAST_VARIANTS)
    sizes = args.sizes or list(DEFAULT_SIZES)
    iters = args.iters or 3
    total = args.total or (256 << 10)
    do_tput = not args.no_throughput
    rows, stats = [], {}
    with progress(args, len(variants) * len(sizes), f"lci-bcast, {args.nodes} nodes") as bar:
        for v in variants:
            cluster = _cluster(args, v, tree)
            mpich = (args.tree or "binomial") if v == "I-sdma-mpimc" else None
            res = cluster.run_spmd(bcast_program, tuple(sizes), iters, total, mpich, do_tput, bar.advance)
            t = parse_tree(mpich).name if mpich else tree
            rows += combine_bcast(res, sizes, v, t, args.nodes, do_tput)
            if args.stats:
                stats[v] = {"root": res[0]["stats"], "node1": res[1]["stats"],
                            "ni": {i: cluster.nodes[i].services["lci"].fw.stats() for i in (0, 1)}}
            platform = cluster.profile.name
            over = dict(cluster.profile.overrides)
            del cluster, res
            gc.collect()                # a 64-node cluster's cycles go before the next is built
    doc = {"benchmark": "lci-bcast", "time": "modeled", "platform": platform, "nic": "myrinet", "seed": args.seed,
           "nodes": args.nodes, "tree": tree, "iters": iters, "total_bytes": total, "overrides": over,
           "results": rows}

    def table():
        print(f"# LCI broadcast from node 0 to {args.nodes - 1} nodes ({tree} tree; I-sdma-mpimc: "
              f"{rows[-1]['tree'] if variants[-1] == 'I-sdma-mpimc' else 'binomial'}): {platform} + myrinet, "
              f"modeled time; latency until the last receiver has the message, throughput = root's data rate, "
              f"receivers copying, MB = 10^6 B{overrides_note(over)}")
        print(f"# {'variant':<14}{'size':>8}{'latency (us)':>15}{'MB/s':>10}")
        for r in rows:
            bw = f"{r['mbytes_per_s']:>10.2f}" if r["mbytes_per_s"] is not None else f"{'-':>10}"
            print(f"{r['variant']:<16}{r['size']:>8}{r['latency_us']:>15.2f}{bw}")

    return emit(args, doc, stats, table)


def _fa(args) -> int:
    variants = _variants(args, FA_VARIANTS)
    if not 0 <= args.target < args.nodes:
        raise OSError(errno.EINVAL, f"--target must be a node 0..{args.nodes - 1}, not {args.target}")
    iters = args.iters or 5
    rows, stats = [], {}
    with progress(args, len(variants), f"lci-fa, {args.nodes} nodes") as bar:
        for v in variants:
            if v == "I-sdma-mpimc":
                raise OSError(errno.EINVAL, "I-sdma-mpimc is a broadcast, it has no fetch-and-add")
            cluster = _cluster(args, v)
            res = cluster.run_spmd(fa_program, args.target, iters)
            lats = [r["lat"] for r in res if r["lat"] is not None]
            values = sorted(x for r in res for x in r["values"])
            if values != list(range(len(values))):
                raise OSError(errno.EIO, f"{v}: fetch-and-add returned {values[:8]}...: not each value once")
            rows.append({"variant": v, "nodes": args.nodes, "latency_us": sum(lats) / len(lats) * 1e6,
                         "min_us": min(lats) * 1e6, "max_us": max(lats) * 1e6})
            if args.stats:
                stats[v] = cluster.nodes[args.target].services["lci"].fw.stats()
            bar.advance(v)
            platform = cluster.profile.name
            over = dict(cluster.profile.overrides)
    doc = {"benchmark": "lci-fa", "time": "modeled", "platform": platform, "nic": "myrinet", "seed": args.seed,
           "nodes": args.nodes, "target": args.target, "iters": iters, "overrides": over, "results": rows}

    def table():
        print(f"# LCI fetch-and-add on node {args.target}'s NI from each of {args.nodes - 1} nodes in turn: "
              f"{platform} + myrinet, modeled time (us){overrides_note(over)}")
        print(f"# {'variant':<12}{'latency':>10}{'min':>10}{'max':>10}")
        for r in rows:
            print(f"{r['variant']:<14}{r['latency_us']:>10.2f}{r['min_us']:>10.2f}{r['max_us']:>10.2f}")

    return emit(args, doc, stats, table)

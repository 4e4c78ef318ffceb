"""LCI over a faulty Myrinet: every packet arrives exactly once, in FIFO order, intact.

``dp lci-stress`` runs it (see `libdp._lci_cli`); its defaults are the fault test of
issue 9: 10,000 packets among 4 nodes over switches that lose, corrupt, duplicate and
reorder 1% of the packets each.

Every node sends to the next two around a ring (several node pairs, every node both a
sender and a receiver) `packets` packets in all, of seeded random sizes from 0 bytes to
an MTU, over switches that lose, corrupt (the NI's hardware CRC drops those), duplicate
and reorder packets. Each packet carries its sender, its number and a CRC-32 of its
bytes; the receiving upcall checks, as it runs, that it is the next one expected from
that sender (FIFO, exactly once) and intact. The run must end with every packet
delivered and every send completed; the statistics show what it took (retransmissions,
acknowledgements, drops).

With a variant that does not retransmit (I-sdma and the other reliability=none ones)
the run stops with the EIO that names the broken assumption (LCI-C03).
"""
from __future__ import annotations

import errno
import random
import struct
import time
import zlib

from libdp.lci import LCI

__all__ = ["plan", "run_stress", "SUITE_FAULTS"]

# The fault test of issue 9: 1% loss, corruption, duplication and reordering.
SUITE_FAULTS = {"fault.loss": 0.01, "fault.corrupt": 0.01, "fault.duplicate": 0.01, "fault.reorder": 0.01}

_HDR = struct.Struct(">HII")          # sender, packet number, CRC-32 of the rest


def plan(nodes: int, packets: int, mtu: int, seed: int) -> dict:
    """{(src, dst): [size, ...]}: the packets of each ordered pair, in sending order."""
    rng = random.Random(seed * 9_901 + nodes)
    pairs = sorted({(s, (s + k) % nodes) for s in range(nodes) for k in (1, 2) if (s + k) % nodes != s})
    out = {p: [] for p in pairs}
    for i in range(packets):
        out[pairs[i % len(pairs)]].append(rng.randint(_HDR.size, mtu))
    return out


def _payload(src: int, idx: int, n: int) -> bytes:
    body = bytes(((src * 131 + idx * 7 + i) & 0xFF) for i in range(n - _HDR.size))
    return _HDR.pack(src, idx, zlib.crc32(body)) + body


class _Shared:
    """The harness's side channel (not LCI's): who is done, so that no rank leaves while
    another still needs its acknowledgements."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.done = 0
        self.libs = []

    def finished(self):
        self.done += 1
        for lib in self.libs:
            lib.events.wake()


async def stress_program(dp, rank, size, shared, the_plan):
    lci = await LCI.open(dp)
    shared.libs.append(lci.lib)
    by_dst = {dst: list(sizes) for (src, dst), sizes in the_plan.items() if src == rank}
    order = []                                    # round-robin over this node's destinations
    while any(by_dst.values()):
        for dst in sorted(by_dst):
            if by_dst[dst]:
                order.append((dst, by_dst[dst].pop(0)))
    expect = {src: len(sizes) for (src, dst), sizes in the_plan.items() if dst == rank}
    nxt = {src: 0 for src in expect}
    errors = []
    got = [0]

    def upcall(pkt):
        data = pkt.data
        if len(data) < _HDR.size:
            errors.append(f"node {rank}: a {len(data)}-byte packet from {pkt.src}")
            return False
        src, idx, crc = _HDR.unpack_from(data)
        if src != pkt.src or src not in nxt:
            errors.append(f"node {rank}: packet claims sender {src}, came from {pkt.src}")
        elif idx != nxt[src]:
            errors.append(f"node {rank}: from {src} packet {idx} where {nxt[src]} was next "
                          f"({'a duplicate' if idx < nxt[src] else 'one missing'})")
        elif zlib.crc32(data[_HDR.size:]) != crc:
            errors.append(f"node {rank}: packet {idx} from {src} damaged")
        else:
            nxt[src] += 1
        got[0] += 1
        return False

    lci.set_upcall(upcall)
    counters = {dst: 0 for dst in by_dst}
    try:
        for dst, n in order:
            await lci.send(dst, _payload(rank, counters[dst], n))
            counters[dst] += 1
        complete = lambda: all(nxt[s] >= expect[s] for s in expect)          # noqa: E731
        await lci.poll_until(lambda: complete() or errors)
        await lci.flush()                         # every send completed (acknowledged under I-hrx)
        shared.finished()
        await lci.poll_until(lambda: shared.done >= shared.nodes or errors)
        stats = lci.stats()
    finally:
        await lci.close()
    return {"errors": errors, "received": got[0], "sent": sum(counters.values()),
            "missing": {s: expect[s] - nxt[s] for s in expect if nxt[s] < expect[s]}, "stats": stats}


def run_stress(variant="I-nirx", nodes=4, packets=10_000, seed=1, faults=None, params=(),
               platform="ppro200_lanai4", lci_params=None):
    """Run the stress test; a summary with per-node results, fault counts and totals.
    `faults`: the fault.* rates (default SUITE_FAULTS); `params`: other profile overrides."""
    from libdp import Cluster
    if nodes < 2:
        raise OSError(errno.EINVAL, "lci-stress: at least 2 nodes (every node sends to the next two around a ring)")
    rates = dict(SUITE_FAULTS if faults is None else faults)
    t0 = time.perf_counter()
    cluster = Cluster(nodes=nodes, platform=platform, nic="myrinet", params=list(rates.items()) + list(params),
                      seed=seed, load=[("lci", {**(lci_params or {}), "variant": variant})])
    mtu = cluster.nodes[0].services["lci"].variant.mtu
    the_plan = plan(nodes, packets, mtu, seed)
    shared = _Shared(nodes)
    results = cluster.run_spmd(stress_program, shared, the_plan)
    totals: dict = {}
    fw_totals: dict = {}
    boards = {"crc_errors": 0, "no_buffer": 0}
    for n in cluster.nodes:
        svc = n.services["lci"]
        for k, v in svc.lib.stats().items():
            if isinstance(v, int):
                totals[k] = totals.get(k, 0) + v
        for k, v in svc.fw.stats().items():
            if isinstance(v, int) and not isinstance(v, bool):
                fw_totals[k] = fw_totals.get(k, 0) + v
        rd = n.pci_devices[0].stats()["recv_dma"]
        boards["crc_errors"] += rd["crc_errors"]
        boards["no_buffer"] += rd["no_buffer"]
    errors = [e for r in results for e in r["errors"]]
    missing = {i: r["missing"] for i, r in enumerate(results) if r["missing"]}
    return {"variant": cluster.nodes[0].services["lci"].variant.name, "platform": cluster.profile.name,
            "nodes": nodes, "packets": sum(r["sent"] for r in results),
            "delivered": sum(r["received"] for r in results), "ok": not errors and not missing,
            "errors": errors[:20], "missing": missing, "faults": cluster.medium.faults.stats(),
            "host": totals, "ni": fw_totals, "boards": boards, "modeled_s": cluster.engine.now,
            "fault_rates": rates, "wall_s": time.perf_counter() - t0}

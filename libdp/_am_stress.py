"""SP AM under a faulty switch: everything arrives exactly once, in order, intact.

``dp am-stress`` runs it (see `libdp._am_cli`); its defaults are the reliability suite of
issue 11: 100,000 messages across 4 nodes (8 node pairs) over a switch that loses 10% of
the packets, corrupts 1% (the adapter's CRC drops those), duplicates 1% and reorders 1%.

Every node sends to the next two around a ring (several node pairs, every node both a
sender and a receiver), a seeded mix of ``am_request_M`` (whose handler replies to
every third), ``am_store_async`` of 0 bytes to `max_store` bytes, and a few
``am_get`` -- `messages` in all. Each handler checks, as it runs, that it is the next
one expected from that sender (order, exactly once) and that the bytes it sees are the
bytes sent (intact), and counts it; the run must end (no livelock) with every message
delivered, and the counters show the retransmissions and NACKs it took.

The plan of every sender is a pure function of the seed, so every receiver knows what
to expect. Store sizes are log-uniform by default (``dist="uniform"``: uniform over
0..max_store, 50 KB on average), and `max_bytes` bounds the bytes stored in all.
"""
from __future__ import annotations

import errno
import random
import time

from libdp.am import AM

__all__ = ["plan", "stress_program", "run_stress", "SUITE_FAULTS"]

# The switch of the reliability suite (issue 11): 10% loss, 1% corruption, duplication, reordering.
SUITE_FAULTS = {"fault.loss": 0.10, "fault.corrupt": 0.01, "fault.duplicate": 0.01, "fault.reorder": 0.01}

H_REQ, H_REP, H_STORE, H_GOT, H_DONE = 10, 11, 12, 13, 14
GET_REGION = 8192


def _chk(src: int, dst: int, idx: int) -> int:
    return (src * 1_000_003 + dst * 10_007 + idx * 7919 + 12345) & 0xFFFFFFFF


def _words(src: int, dst: int, idx: int, m: int) -> tuple:
    """The M argument words of request `idx`: its number, a check word, filler."""
    return ((idx, _chk(src, dst, idx)) + (idx ^ 0x5A5A, (idx * 3) & 0xFFFFFFFF))[:m]


def _payload(src: int, idx: int, n: int) -> bytes:
    base = bytes(((src * 31 + idx * 17 + i) & 0xFF) for i in range(251))
    return (base * (n // 251 + 1))[:n]


def _get_pattern(node: int) -> bytes:
    return bytes(((node * 97 + i * 5) & 0xFF) for i in range(GET_REGION))


def plan(nodes: int, messages: int, max_store: int, seed: int, max_bytes: int | None = None,
         store_fraction: float = 0.4, get_fraction: float = 0.05, dist: str = "log"):
    """{(src, dst): [op, ...]} with op = ("req", words) | ("store", nbytes) | ("get", off, nbytes).

    Store sizes are log-uniform (`dist` "log") or uniform ("uniform") between 1 byte and
    `max_store`, and sometimes 0; `max_bytes`, if given, bounds the total bytes stored
    (sizes are scaled down)."""
    if dist not in ("log", "uniform"):
        raise ValueError("dist is 'log' or 'uniform'")
    rng = random.Random(seed * 7_777 + nodes)
    pairs = sorted({(s, (s + k) % nodes) for s in range(nodes) for k in (1, 2) if (s + k) % nodes != s})
    ops = {p: [] for p in pairs}
    sizes = []
    for i in range(messages):
        pair = pairs[i % len(pairs)]
        u = rng.random()
        if u < store_fraction:
            r = rng.random()
            n = 0 if rng.random() < 0.03 else int(round(max_store ** r if dist == "log" else max_store * r))
            ops[pair].append(["store", min(n, max_store)])
            sizes.append(ops[pair][-1])
        elif u < store_fraction + get_fraction:
            n = rng.randrange(0, GET_REGION + 1)
            ops[pair].append(["get", rng.randrange(0, GET_REGION - n + 1), n])
        else:
            ops[pair].append(["req", rng.randint(1, 4)])
    total = sum(op[1] for op in sizes)
    if max_bytes is not None and total > max_bytes:
        scale = max_bytes / total
        for op in sizes:
            op[1] = int(op[1] * scale)
    return {p: [tuple(op) for op in lst] for p, lst in ops.items()}


async def stress_program(dp, rank, size, the_plan, max_store, arrived=None, errors=None):
    """One node's part; `arrived(n)` is told of every message that arrived intact, in order;
    `errors` (a list) collects what the handlers found wrong as they found it, so a run
    that ends early still says what it saw.

    The handlers take any arguments and never raise: damage the link CRC cannot see
    (`SilentMutation`, with AM's checksum off) may hand one the wrong handler's words."""
    am = await AM.open(dp)
    srcs = sorted(s for (s, d) in the_plan if d == rank)
    dsts = sorted(d for (s, d) in the_plan if s == rank)
    slot = max(1, max_store)
    inbox = am.segment(slot * max(1, len(srcs)))          # one store slot per sender
    getsrc = am.segment(GET_REGION)
    getsrc.write(0, _get_pattern(rank))
    getdst = am.segment(GET_REGION * max(1, len(dsts)))     # one get region per target
    errors = [] if errors is None else errors
    intact = [0]                                            # arrived once, in order, with the right contents

    def good():
        intact[0] += 1
        if arrived is not None:
            arrived(1)
    # What each sender's request-channel messages (requests and stores) must look like, in order.
    expect = {s: [op for op in the_plan[(s, rank)] if op[0] != "get"] for s in srcs}
    got = {s: 0 for s in srcs}
    replies_due = {d: [i for i, op in enumerate([o for o in the_plan[(rank, d)] if o[0] != "get"])
                       if op[0] == "req" and i % 3 == 0] for d in dsts}
    replies = {d: 0 for d in dsts}
    gets_due = {d: [op for op in the_plan[(rank, d)] if op[0] == "get"] for d in dsts}
    gets = {d: 0 for d in dsts}
    stores_done = [0]
    dones = [0]
    addrs = {}

    def next_of(src, kind):
        if src not in got:
            errors.append(f"node {rank}: a {kind} from node {src}, which sends it nothing")
            return None
        i = got[src]
        lst = expect[src]
        if i >= len(lst):
            errors.append(f"node {rank}: an extra {kind} from node {src} (message {i})")
            return None
        if lst[i][0] != kind:
            errors.append(f"node {rank}: message {i} from node {src} is a {kind}, expected a {lst[i][0]}")
        got[src] = i + 1
        return i, lst[i]

    def tolerant(name, nargs):
        """A handler that records a call with the wrong argument count, or one whose own
        reply is refused, instead of raising out of am_poll."""
        def deco(fn):
            def handler(tok, *args):
                if tok.src not in got and tok.src not in replies:
                    errors.append(f"node {rank}: a {name} from node {tok.src}, which sends it nothing")
                elif len(args) != nargs:
                    errors.append(f"node {rank}: a {name} from node {tok.src} with {len(args)} words")
                else:
                    try:
                        fn(tok, *args)
                    except Exception as e:            # a damaged address or size: recorded, not raised
                        errors.append(f"node {rank}: a {name} from node {tok.src}: {e}")
            return handler
        return deco

    def on_req(tok, *args):
        r = next_of(tok.src, "req")
        if r is None:
            return
        i, op = r
        want = _words(tok.src, rank, i, op[1])
        if args != want:
            errors.append(f"node {rank}: request {i} from {tok.src} arrived as {args}, not {want}")
        elif op[0] == "req":
            good()
        if i % 3 == 0:
            try:
                tok.reply(H_REP, i, _chk(rank, tok.src, i))
            except OSError as e:
                errors.append(f"node {rank}: request {i} from {tok.src}: {e}")

    @tolerant("reply", 2)
    def on_rep(tok, idx, chk):
        d = tok.src
        k = replies.get(d, 0)
        if d not in replies_due or k >= len(replies_due[d]) or replies_due[d][k] != idx or chk != _chk(d, rank, idx):
            errors.append(f"node {rank}: unexpected reply {idx} from node {d}")
        replies[d] = k + 1

    @tolerant("store", 3)
    def on_store(tok, addr, nbytes, idx):
        r = next_of(tok.src, "store")
        if r is None:
            return
        i, op = r
        base = inbox.addr + srcs.index(tok.src) * slot
        if idx != i or nbytes != op[1] or addr != base:
            errors.append(f"node {rank}: store {i} from {tok.src} arrived as #{idx}, {nbytes} B at {addr:#x}")
        elif am.ep.mem.read(addr, nbytes) != _payload(tok.src, i, nbytes):
            errors.append(f"node {rank}: store {i} from {tok.src}: the data differ")
        elif op[0] == "store":
            good()

    @tolerant("get reply", 3)
    def on_got(tok, addr, nbytes, k):
        d = tok.src
        j = gets[d]
        op = gets_due[d][j] if j < len(gets_due[d]) else None
        want = _get_pattern(d)[op[1]:op[1] + op[2]] if op is not None else None
        if op is None or k != j or nbytes != op[2] or am.ep.mem.read(addr, nbytes) != want:
            errors.append(f"node {rank}: get {k} from node {d} wrong or out of order")
        else:
            good()
        gets[d] = j + 1

    def on_done(tok, kind=0, a1=0, a2=0, *_rest):
        if kind == 1:
            addrs[tok.src] = (a1, a2)
        else:
            dones[0] += 1

    def stored(_arg):
        stores_done[0] += 1

    am.set_handler(H_REQ, on_req)
    am.set_handler(H_REP, on_rep)
    am.set_handler(H_STORE, on_store)
    am.set_handler(H_GOT, on_got)
    am.set_handler(H_DONE, on_done)
    # Tell the senders where my inbox slot for each of them and my get region are.
    for s in srcs:
        await am.am_request_3(s, H_DONE, 1, inbox.addr + srcs.index(s) * slot, getsrc.addr)
    await am.poll_until(lambda: len(addrs) == len(dsts))
    # Send: the pairs' plans interleaved.
    queues = {d: list(the_plan[(rank, d)]) for d in dsts}
    counters = {d: 0 for d in dsts}
    get_no = {d: 0 for d in dsts}
    stores = 0
    while any(queues.values()):
        for d in dsts:
            if not queues[d]:
                continue
            op = queues[d].pop(0)
            inbox_addr, get_addr = addrs[d]
            if op[0] == "get":
                local = getdst.addr + dsts.index(d) * GET_REGION + op[1]
                await am.am_get(d, get_addr + op[1], local, op[2], H_GOT, get_no[d])
                get_no[d] += 1
                continue
            i = counters[d]
            counters[d] = i + 1
            if op[0] == "req":
                await am.am_request(d, H_REQ, *_words(rank, d, i, op[1]))
            else:
                stores += 1
                await am.am_store_async(d, _payload(rank, i, op[1]), inbox_addr, op[1], H_STORE, i, stored)
    # Wait for everything to and from me, then a barrier so no one leaves while others need it.
    total_in = sum(len(v) for v in expect.values())
    await am.poll_until(lambda: sum(got.values()) >= total_in and stores_done[0] >= stores
                        and all(replies[d] >= len(replies_due[d]) for d in dsts)
                        and all(gets[d] >= len(gets_due[d]) for d in dsts))
    for other in range(size):
        if other != rank and (other in srcs or other in dsts):
            await am.am_request_1(other, H_DONE, 2)
    peers = {o for o in range(size) if o != rank and (o in srcs or o in dsts)}
    await am.poll_until(lambda: dones[0] >= len(peers))
    stats = am.stats()
    await am.close()
    return {"errors": errors, "intact": intact[0], "received": dict(got), "expected": {s: len(v) for s, v in expect.items()},
            "replies": dict(replies), "gets": dict(gets), "stores_done": stores_done[0], "stats": stats}


class SilentMutation:
    """The switch's fault injector, then damage the link CRC cannot see: with probability
    `rate` one byte of a delivered packet -- anywhere in it, TB2 header included -- is
    replaced by another value and the packet arrives with a valid CRC (a bad switch
    buffer, an adapter's DMA error). Only AM's end-to-end checksum can catch it
    (``am.checksum=1``)."""

    __slots__ = ("inner", "rate", "rng", "mutated", "active")

    def __init__(self, inner, rate: float, rng: random.Random):
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"the mutation rate is a probability, not {rate}")
        self.inner = inner
        self.rate = rate
        self.rng = rng
        self.mutated = 0
        self.active = inner.active or rate > 0

    def apply(self, frame: bytes) -> list:
        out = self.inner.apply(frame) if self.inner.active else [(frame, 0.0, True)]
        if not self.rate:
            return out
        rng = self.rng
        res = []
        for data, delay, ok in out:
            if ok and data and rng.random() < self.rate:
                i = rng.randrange(len(data))
                data = data[:i] + bytes([(data[i] + rng.randrange(1, 256)) & 0xFF]) + data[i + 1:]
                self.mutated += 1
            res.append((data, delay, ok))
        return res

    def stats(self) -> dict:
        out = self.inner.stats()
        out["mutated"] = self.mutated
        return out


def run_stress(nodes=4, messages=10_000, max_store=102_400, seed=1, faults=None, params=(), max_bytes=None,
               platform=None, am_params=None, deadline_s=60.0, dist="log", arrived=None, mutate=0.0):
    """Build the faulty cluster, run the workload; a summary dict (``ok`` says it all).

    `faults`: the switch's fault.* rates (default `SUITE_FAULTS`); `params`: other
    profile overrides, (key, value) pairs. `deadline_s` of modeled time: a run still
    going then is a livelock (ETIMEDOUT). `arrived(n)`: told of messages as they arrive."""
    from libdp import Cluster
    the_plan = plan(nodes, messages, max_store, seed, max_bytes, dist=dist)
    rates = dict(SUITE_FAULTS if faults is None else faults)
    cluster = Cluster(nodes=nodes, nic="tb2", platform=platform, params=[*rates.items(), *params], seed=seed,
                      load=[("am", dict(am_params or {}))])
    switch = cluster.medium
    switch.faults = SilentMutation(switch.faults, mutate, random.Random(seed * 1_000_003 + 17))

    def expired(_arg):
        raise OSError(errno.ETIMEDOUT, f"SP AM stress not finished after {deadline_s} s of modeled time (livelock)")

    watchdog = cluster.engine.after(deadline_s, expired, None)
    errors: list[str] = []
    seen = [0]

    def count(n):
        seen[0] += n
        if arrived is not None:
            arrived(n)

    t0 = time.perf_counter()
    failure = None
    try:
        results = cluster.run_spmd(stress_program, the_plan, max_store, count, errors)
    except OSError as e:                 # a call failed, or the run livelocked: report what was seen
        results, failure = None, f"{e.strerror or e}"
    cluster.engine.cancel(watchdog)
    wall = time.perf_counter() - t0
    if results is not None:
        missing = [(rank, s) for rank, r in enumerate(results) for s, n in r["expected"].items()
                   if r["received"].get(s, 0) != n]
        node_stats = [r["stats"] for r in results]
    else:
        missing = []
        node_stats = [_endpoint_stats(n) for n in cluster.nodes]
    totals = {}
    malformed = {}
    for st in node_stats:
        for k, v in st.items():
            if isinstance(v, int):
                totals[k] = totals.get(k, 0) + v
        for k, v in st.get("malformed", {}).items():
            malformed[k] = malformed.get(k, 0) + v
    adapters = {}
    for n in cluster.nodes:
        for k, v in n.pci_devices[0].stats().items():
            if k.startswith("rx_") or k.startswith("tx_err"):
                adapters[k] = adapters.get(k, 0) + v
    n_msgs = sum(len(v) for v in the_plan.values())
    stored = sum(op[1] for v in the_plan.values() for op in v if op[0] == "store")
    intact = seen[0]
    return {"ok": failure is None and not errors and not missing and intact == n_msgs, "messages": n_msgs,
            "arrived_once_intact": intact, "failure": failure, "errors": errors[:20], "error_count": len(errors),
            "missing": missing,
            "bytes_stored": stored, "nodes": nodes, "node_pairs": len(the_plan), "fault_rates": rates,
            "modeled_s": cluster.engine.now, "wall_s": wall, "events": cluster.engine.stats()["events_run"],
            "faults": cluster.medium.stats()["faults"], "am": totals, "adapters": adapters, "malformed": malformed,
            "per_node": [{k: r[k] for k in ("intact", "received", "replies", "gets", "stores_done")}
                         for r in results or ()]}


def _endpoint_stats(node) -> dict:
    """A node's AM counters after a run that ended early: its open endpoint's, or the last one's."""
    svc = node.services.get("am")
    if svc is None:
        return {}
    st = svc.stats()
    return st.get("endpoint") or st.get("last_endpoint") or {}

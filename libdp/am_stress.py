"""SP AM under a faulty switch: everything arrives exactly once, in order, intact.

    python -m libdp.am_stress [--nodes 4] [--messages 10000] [--max-store 102400] [--dist uniform]
                                  [--loss 0.01] [--corrupt 0.01] [--duplicate 0.01] [--reorder 0.01]
                                  [--max-bytes N] [--seed 1] [--json]

Every node sends to the next two around a ring (several node pairs, every node both a
sender and a receiver), a seeded mix of ``am_request_M`` (whose handler replies to
every third), ``am_store_async`` of 0 bytes to `max_store` bytes, and a few
``am_get`` -- `messages` in all, over a switch that loses, corrupts (the adapter's
CRC drops those), duplicates and reorders packets. Each handler checks, as it runs,
that it is the next one expected from that sender (order, exactly once) and that the
bytes it sees are the bytes sent (intact); the run must end (no livelock) with every
message delivered, and the counters show the retransmissions and NACKs it took.

The plan of every sender is a pure function of the seed, so every receiver knows what
to expect. The full-size run (10,000 messages, store sizes uniform over 0..100 KB) is
this script's default; the tests run the same code with log-uniform sizes and a bound
on the bytes.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time

from libdp.am import AM

__all__ = ["plan", "stress_program", "run_stress", "main", "Livelock"]

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


async def stress_program(dp, rank, size, the_plan, max_store):
    am = await AM.open(dp)
    srcs = sorted(s for (s, d) in the_plan if d == rank)
    dsts = sorted(d for (s, d) in the_plan if s == rank)
    slot = max(1, max_store)
    inbox = am.segment(slot * max(1, len(srcs)))          # one store slot per sender
    getsrc = am.segment(GET_REGION)
    getsrc.write(0, _get_pattern(rank))
    getdst = am.segment(GET_REGION * max(1, len(dsts)))     # one get region per target
    errors: list[str] = []
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
        i = got[src]
        lst = expect[src]
        if i >= len(lst):
            errors.append(f"node {rank}: an extra {kind} from node {src} (message {i})")
            return None
        if lst[i][0] != kind:
            errors.append(f"node {rank}: message {i} from node {src} is a {kind}, expected a {lst[i][0]}")
        got[src] = i + 1
        return i, lst[i]

    def on_req(tok, idx, *rest):
        r = next_of(tok.src, "req")
        if r is None:
            return
        i, op = r
        want = _words(tok.src, rank, i, op[1])
        if (idx,) + rest != want:
            errors.append(f"node {rank}: request {i} from {tok.src} arrived as {(idx,) + rest}, not {want}")
        if i % 3 == 0:
            tok.reply(H_REP, i, _chk(rank, tok.src, i))

    def on_rep(tok, idx, chk):
        d = tok.src
        k = replies[d]
        if k >= len(replies_due[d]) or replies_due[d][k] != idx or chk != _chk(d, rank, idx):
            errors.append(f"node {rank}: unexpected reply {idx} from node {d}")
        replies[d] = k + 1

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

    def on_got(tok, addr, nbytes, k):
        d = tok.src
        j = gets[d]
        op = gets_due[d][j] if j < len(gets_due[d]) else None
        want = _get_pattern(d)[op[1]:op[1] + op[2]] if op is not None else None
        if op is None or k != j or nbytes != op[2] or am.ep.mem.read(addr, nbytes) != want:
            errors.append(f"node {rank}: get {k} from node {d} wrong or out of order")
        gets[d] = j + 1

    def stored(_arg):
        stores_done[0] += 1

    am.set_handler(H_REQ, on_req)
    am.set_handler(H_REP, on_rep)
    am.set_handler(H_STORE, on_store)
    am.set_handler(H_GOT, on_got)
    am.set_handler(H_DONE, lambda tok, kind, a1=0, a2=0: (
        addrs.__setitem__(tok.src, (a1, a2)) if kind == 1 else dones.__setitem__(0, dones[0] + 1)))
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
    return {"errors": errors, "received": dict(got), "expected": {s: len(v) for s, v in expect.items()},
            "replies": dict(replies), "gets": dict(gets), "stores_done": stores_done[0], "stats": stats}


class Livelock(RuntimeError):
    """The workload had not finished by its modeled deadline."""


def run_stress(nodes=4, messages=10_000, max_store=102_400, seed=1, loss=0.01, corrupt=0.01, duplicate=0.01,
               reorder=0.01, max_bytes=None, am_params=None, deadline_s=60.0, dist="log"):
    """Build the faulty cluster, run the workload; a summary dict (``ok`` says it all).

    `deadline_s` of modeled time: a run still going then is a livelock (Livelock)."""
    from libdp import Cluster
    the_plan = plan(nodes, messages, max_store, seed, max_bytes, dist=dist)
    params = [("fault.loss", loss), ("fault.corrupt", corrupt), ("fault.duplicate", duplicate),
              ("fault.reorder", reorder)]
    cluster = Cluster(nodes=nodes, nic="tb2", params=params, seed=seed, load=[("am", dict(am_params or {}))])
    def expired(_arg):
        raise Livelock(f"SP AM stress not finished after {deadline_s} s of modeled time")

    watchdog = cluster.engine.after(deadline_s, expired, None)
    t0 = time.perf_counter()
    results = cluster.run_spmd(stress_program, the_plan, max_store)
    cluster.engine.cancel(watchdog)
    wall = time.perf_counter() - t0
    errors = [e for r in results for e in r["errors"]]
    missing = [(rank, s) for rank, r in enumerate(results) for s, n in r["expected"].items()
               if r["received"].get(s, 0) != n]
    totals = {}
    for r in results:
        for k, v in r["stats"].items():
            if isinstance(v, int):
                totals[k] = totals.get(k, 0) + v
    faults = cluster.medium.stats()["faults"]
    adapters = {}
    for n in cluster.nodes:
        for k, v in n.pci_devices[0].stats().items():
            if k.startswith("rx_") or k.startswith("tx_err"):
                adapters[k] = adapters.get(k, 0) + v
    malformed = {}
    for r in results:
        for k, v in r["stats"]["malformed"].items():
            malformed[k] = malformed.get(k, 0) + v
    n_msgs = sum(len(v) for v in the_plan.values())
    stored = sum(op[1] for v in the_plan.values() for op in v if op[0] == "store")
    return {"ok": not errors and not missing, "errors": errors[:20], "missing": missing, "messages": n_msgs,
            "bytes_stored": stored, "modeled_s": cluster.engine.now, "wall_s": wall, "faults": faults,
            "am": totals, "adapters": adapters, "malformed": malformed,
            "per_node": [{k: r[k] for k in ("received", "replies", "gets", "stores_done")} for r in results]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m libdp.am_stress", description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--max-store", type=int, default=102_400)
    ap.add_argument("--max-bytes", type=int, default=None, help="bound on the total bytes stored")
    ap.add_argument("--loss", type=float, default=0.01)
    ap.add_argument("--corrupt", type=float, default=0.01)
    ap.add_argument("--duplicate", type=float, default=0.01)
    ap.add_argument("--reorder", type=float, default=0.01)
    ap.add_argument("--dist", choices=("log", "uniform"), default="uniform",
                    help="store sizes: uniform (the full-size run) or log-uniform over 0..max-store")
    ap.add_argument("--deadline", type=float, default=600.0, help="modeled seconds before it counts as a livelock")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = run_stress(args.nodes, args.messages, args.max_store, args.seed, args.loss, args.corrupt,
                     args.duplicate, args.reorder, args.max_bytes, deadline_s=args.deadline, dist=args.dist)
    if args.json:
        json.dump(out, sys.stdout, indent=1)
        print()
    else:
        am = out["am"]
        print(f"# SP AM stress: {args.nodes} nodes, {out['messages']} messages, {out['bytes_stored']} bytes stored "
              f"({args.dist} sizes up to {args.max_store}), "
              f"faults {out['faults']}")
        print(f"# {'ok' if out['ok'] else 'FAILED'}: modeled {out['modeled_s'] * 1e3:.1f} ms, "
              f"wall {out['wall_s']:.1f} s")
        for k in ("packets_sent", "retransmitted_packets", "gobacks", "nacks_sent", "nacks_received",
                  "keepalives_sent", "duplicates", "out_of_order", "acks_sent", "handlers_run"):
            print(f"{k:<24}{am.get(k, 0)}")
        print("adapters", out["adapters"])
        print("malformed", out["malformed"])
        for e in out["errors"]:
            print("error:", e)
        if out["missing"]:
            print("missing:", out["missing"])
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

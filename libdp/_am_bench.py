"""The SP AM paper's measurements, as SPMD programs over `libdp.am`, in modeled time.

* `am_pingpong_program`: one-word (and 2-, 3-, 4-word) round trips -- rank 0's
  ``am_request_M`` runs a handler on rank 1 that answers with ``am_reply_M``; rank 0
  polls for the reply (SP-B01: 51.0 µs for one word).
* `am_bandwidth_program`: the paper's bandwidth curves (SP-B08): N bytes (1 MByte)
  moved as ⌈N/n⌉ transfers of n bytes, pipelined (``am_store_async``, or ``am_get``
  issued back to back) or one after the other (``am_store``; ``am_get`` then a poll
  for its handler); bandwidth = bytes / time from the first call to the last
  completion, MB = 10^6 bytes. `summarize` gives r∞ and the half-power point n½.

`am_pingpong(cluster, ...)` and `am_bandwidth(cluster, ...)` run them on ranks 0 and 1
of a cluster whose nodes carry the am module.
"""
from __future__ import annotations

import math

from libdp.am import AM

__all__ = ["am_pingpong", "am_pingpong_program", "am_bandwidth", "am_bandwidth_program", "summarize",
           "PAPER_RTT_US", "PAPER_R_INF", "DEFAULT_TOTAL", "DEFAULT_BW_SIZES", "OPS", "MODES"]

PAPER_RTT_US = 51.0             # SP-B01
PAPER_R_INF = 34.3              # SP-B08, MBytes/s
DEFAULT_TOTAL = 1 << 20         # N = 1 MByte (SP-B08)
DEFAULT_BW_SIZES = tuple(1 << k for k in range(4, 21))      # 16 B .. 1 MB
OPS = ("store", "get")
MODES = ("async", "blocking")

H_PING, H_PONG, H_ADDR, H_DONE, H_DATA = 1, 2, 3, 4, 5


async def am_pingpong_program(dp, rank, size, words=(1, 2, 3, 4), iters=1000, warmup=10):
    """Round trips between ranks 0 and 1 for each argument count in `words`."""
    if rank > 1:
        return None
    got = [0]
    am = await AM.open(dp)

    def ping(tok, *args):
        tok.reply(H_PONG, *args)

    def pong(tok, *args):
        got[0] += 1

    am.set_handler(H_PING, ping)
    am.set_handler(H_PONG, pong)
    rows = []
    peer = 1 - rank
    try:
        for m in words:
            total = warmup + iters
            if rank == 0:
                args = tuple(range(1, m + 1))
                got[0] = 0
                t0 = dp.now()
                for i in range(total):
                    if i == warmup:
                        t0 = dp.now()
                    await am.am_request(peer, H_PING, *args)
                    await am.poll_until(lambda i=i: got[0] > i)
                rtt = (dp.now() - t0) / iters
                rows.append({"words": m, "rtt_us": rtt * 1e6, "one_way_us": rtt * 1e6 / 2})
            else:
                start = am.ep.stats_c["handlers_run"]
                await am.poll_until(lambda: am.ep.stats_c["handlers_run"] - start >= total)
        stats = am.stats()
    finally:
        await am.close()
    if rank == 0 and rows:
        rows[-1]["am_stats"] = stats
    return rows


async def am_bandwidth_program(dp, rank, size, op="store", mode="async", sizes=DEFAULT_BW_SIZES,
                               total=DEFAULT_TOTAL, max_transfers=None, check=True, progress=None):
    """Rank 0 moves `total` bytes per size to (store) or from (get) rank 1; `progress(row)`
    is called with each row as it is measured."""
    if rank > 1:
        return None
    if op not in OPS or mode not in MODES:
        raise ValueError(f"op must be one of {OPS} and mode one of {MODES}")
    am = await AM.open(dp)
    seg = am.segment(total)
    peer = 1 - rank
    state = {"remote": None, "done": 0, "finished": 0, "arrived": 0, "bytes": 0}
    am.set_handler(H_ADDR, lambda tok, addr: state.__setitem__("remote", addr))
    am.set_handler(H_DONE, lambda tok, k: state.__setitem__("finished", k))

    def data(tok, addr, nbytes, arg):             # store handler (rank 1) / get handler (rank 0)
        state["arrived"] += 1
        state["bytes"] += nbytes

    am.set_handler(H_DATA, data)
    rows = []
    try:
        # Rank 1 tells rank 0 where its segment is (an AM request, as a program would).
        seg.write(0, _pattern(rank, total))
        if rank == 1:
            await am.am_request_1(peer, H_ADDR, seg.addr)
        else:
            await am.poll_until(lambda: state["remote"] is not None)
        for k, n in enumerate(sizes):
            if n < 1 or n > total:
                raise ValueError(f"transfer size {n} must be 1..{total}")
            count = -(-total // n)
            if max_transfers:
                count = min(count, max_transfers)
            if rank == 0:
                rows.append(await _bw_size(am, state, op, mode, n, count, seg, total))
                if progress is not None:
                    progress(rows[-1])
                await am.am_request_1(peer, H_DONE, k + 1)
            else:
                await am.poll_until(lambda k=k: state["finished"] > k)
        if check:
            _check_data(seg, op, rank, total, sizes, max_transfers)
        stats = am.stats()
    finally:
        await am.close()
    if rank == 0 and rows:
        rows[-1]["am_stats"] = stats
    return rows


async def _bw_size(am, state, op, mode, n, count, seg, total):
    dp = am.dp
    remote = state["remote"]
    state["done"] = state["arrived"] = 0

    def completed(_arg):
        state["done"] += 1

    def span(i):
        off = (i * n) % total
        return off, min(n, total - off)

    t0 = dp.now()
    if op == "store":
        for i in range(count):
            off, m = span(i)
            if mode == "async":
                await am.am_store_async(1 - am.nid, seg.addr + off, remote + off, m, H_DATA, i, completed)
            else:
                await am.am_store(1 - am.nid, seg.addr + off, remote + off, m, H_DATA, i)
                state["done"] += 1
        await am.poll_until(lambda: state["done"] >= count)
    else:
        for i in range(count):
            off, m = span(i)
            await am.am_get(1 - am.nid, remote + off, seg.addr + off, m, H_DATA, i)
            if mode == "blocking":
                await am.poll_until(lambda i=i: state["arrived"] > i)
        await am.poll_until(lambda: state["arrived"] >= count)
    elapsed = dp.now() - t0
    moved = sum(span(i)[1] for i in range(count))
    return {"size": n, "mbytes_per_s": moved / elapsed / 1e6, "transfers": count, "bytes": moved,
            "time_us": elapsed * 1e6}


def _pattern(rank: int, n: int) -> bytes:
    """What rank `rank` writes into its segment before the run."""
    a, b = (13, 5) if rank == 0 else (7, 3)
    return (bytes((i * a + b) & 0xFF for i in range(256)) * (n // 256 + 1))[:n]


def _covered(total, sizes, max_transfers) -> int:
    """Bytes from the segment's start that some size moved completely."""
    best = 0
    for n in sizes:
        count = -(-total // n)
        if max_transfers:
            count = min(count, max_transfers)
        best = max(best, min(total, count * n))
    return best


def _check_data(seg, op, rank, total, sizes, max_transfers) -> None:
    """The bytes that arrived are the bytes that were sent."""
    covered = _covered(total, sizes, max_transfers)
    receiver = 0 if op == "get" else 1
    if rank == receiver and seg.read(0, covered) != _pattern(1 - rank, covered):
        raise AssertionError(f"am_{op} delivered bytes that differ from the source's")


def summarize(rows) -> tuple[float, float | None]:
    """r∞: the bandwidth of the largest transfers (the curve's asymptote, SP-B08);
    n½: the transfer size at which the curve reaches r∞/2, interpolated on log(n)."""
    if not rows:
        return 0.0, None
    rows = sorted(rows, key=lambda r: r["size"])
    r_inf = rows[-1]["mbytes_per_s"]
    half = r_inf / 2
    prev = None
    for r in rows:
        if r["mbytes_per_s"] >= half:
            if prev is None:
                return r_inf, float(r["size"])
            x0, y0 = math.log(prev["size"]), prev["mbytes_per_s"]
            x1, y1 = math.log(r["size"]), r["mbytes_per_s"]
            x = x0 + (half - y0) * (x1 - x0) / (y1 - y0) if y1 != y0 else x1
            return r_inf, math.exp(x)
        prev = r
    return r_inf, None


def _rank0(results):
    rows = results[0]
    stats = None
    if rows and "am_stats" in rows[-1]:
        stats = rows[-1].pop("am_stats")
    return rows, stats


def am_pingpong(cluster, words=(1, 2, 3, 4), iters=1000, warmup=10):
    """Rank 0's rows of the AM ping-pong on `cluster` (its nodes must carry am)."""
    return _rank0(cluster.run_spmd(am_pingpong_program, tuple(words), iters, warmup))[0]


def am_bandwidth(cluster, op="store", mode="async", sizes=DEFAULT_BW_SIZES, total=DEFAULT_TOTAL,
                 max_transfers=None):
    """Rank 0's rows of one bandwidth curve, with (r∞, n½)."""
    rows = _rank0(cluster.run_spmd(am_bandwidth_program, op, mode, tuple(sizes), total, max_transfers))[0]
    return rows, summarize(rows)

"""The SP AM paper's measurements, as SPMD programs over `libdp.am`, in modeled time.

* `am_pingpong_program`: one-word (and 2-, 3-, 4-word) round trips -- rank 0's
  ``am_request_M`` runs a handler on rank 1 that answers with ``am_reply_M``; rank 0
  polls for the reply (SP-B01: 51.0 µs for one word).
* `am_bandwidth_program`: the paper's bandwidth curves (SP-B08): N bytes (1 MByte)
  moved as ⌈N/n⌉ transfers of n bytes, pipelined (``am_store_async``, or ``am_get``
  issued back to back) or one after the other (``am_store``; ``am_get`` then a poll
  for its handler); bandwidth = bytes / time from the first call to the last
  completion, MB = 10^6 bytes. `summarize` gives r∞ and the half-power point n½.
* `am_window_program`: the OSU window benchmark (osu_bw) over AM, ``dp am-bandwidth
  --window W``: rank 0 posts W transfers of n bytes (``am_store_async``, or ``am_get``),
  and each window ends with one short request from the data's receiver -- rank 1 answers
  when W stores have landed; for gets the data lands at rank 0 itself, which then
  tells rank 1 with one short request. `iters` windows per size after `warmup` untimed
  ones; MB/s of payload over the time from the first measured post to the last window's
  end, MB = 10^6 bytes. AM is reliable: every message is delivered, none to report.

`am_pingpong(cluster, ...)` and `am_bandwidth(cluster, ...)` run them on ranks 0 and 1
of a cluster whose nodes carry the am module.
"""
from __future__ import annotations

import math

from libdp import _am_call
from libdp.am import AM

__all__ = ["am_pingpong", "am_pingpong_program", "am_bandwidth", "am_bandwidth_program", "am_window_program",
           "summarize", "DEFAULT_WINDOW_SIZES",
           "PAPER_RTT_US", "PAPER_R_INF", "DEFAULT_TOTAL", "DEFAULT_BW_SIZES", "OPS", "MODES"]

PAPER_RTT_US = 51.0             # SP-B01
PAPER_R_INF = 34.3              # SP-B08, MBytes/s
DEFAULT_TOTAL = 1 << 20         # N = 1 MByte (SP-B08)
DEFAULT_BW_SIZES = tuple(1 << k for k in range(4, 21))      # 16 B .. 1 MB
DEFAULT_WINDOW_SIZES = tuple(1 << k for k in range(4, 17))  # 16 B .. 64 KB: a window of 64 is 4 MB
H_WINDOW = 6
OPS = ("store", "get")
MODES = ("async", "blocking")

H_PING, H_PONG, H_ADDR, H_DONE, H_DATA = 1, 2, 3, 4, 5


async def am_pingpong_program(dp, rank, size, words=(1, 2, 3, 4), iters=1000, warmup=10):
    """Round trips between ranks 0 and 1 for each argument count in `words`."""
    if rank > 1:
        return None
    got = [0]
    am = await AM.open(dp)
    # ping replies with the words it got; pong counts replies in got[0] (compiled, as are
    # the loops: `libdp._am_call.request_rounds`, `serve_rounds`)
    ping, pong = _am_call.pingpong_handlers(H_PONG, got)
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
                t0 = await _am_call.request_rounds(am, dp, peer, H_PING, args, warmup, total, got)
                rtt = (dp.now() - t0) / iters
                rows.append({"words": m, "rtt_us": rtt * 1e6, "one_way_us": rtt * 1e6 / 2})
            else:
                await _am_call.serve_rounds(am, total)
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
    state = {"remote": None, "done": 0, "finished": 0, "arrived": 0}
    am.set_handler(H_ADDR, lambda tok, addr: state.__setitem__("remote", addr))
    am.set_handler(H_DONE, lambda tok, k: state.__setitem__("finished", k))

    # the store handler (rank 1) / get handler (rank 0) counts state["arrived"]; a store's
    # completion counts state["done"] (compiled: `libdp._am_call.bw_handlers`)
    data, completed = _am_call.bw_handlers(state)
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
                rows.append(await _bw_size(am, state, op, mode, n, count, seg, total, completed))
                if progress is not None:
                    progress(rows[-1])
                await am.am_request_1(peer, H_DONE, k + 1)
            else:
                await am.poll_until(_am_call.at_least(state, "finished", k + 1))
        if check:
            _check_data(seg, op, rank, total, sizes, max_transfers)
        stats = am.stats()
    finally:
        await am.close()
    if rank == 0 and rows:
        rows[-1]["am_stats"] = stats
    return rows


async def _bw_size(am, state, op, mode, n, count, seg, total, completed):
    dp = am.dp
    remote = state["remote"]
    state["done"] = state["arrived"] = 0
    # The loop's invariants are read once (no modeled time either way: the host program's
    # own work is not modeled, only its calls).
    dest, base = 1 - am.nid, seg.addr
    store_async, store, get, poll_until = am.am_store_async, am.am_store, am.am_get, am.poll_until
    t0 = dp.now()
    if op == "store":
        # count stores of n bytes from base + i * n to remote + i * n (compiled)
        await _am_call.store_rounds(store_async, store, dest, base, remote, n, count, total, mode == "async",
                                    H_DATA, completed, state)
        await poll_until(_am_call.at_least(state, "done", count))
    else:
        for i in range(count):
            off = (i * n) % total
            m = min(n, total - off)
            await get(dest, remote + off, base + off, m, H_DATA, i)
            if mode == "blocking":
                await poll_until(_am_call.at_least(state, "arrived", i + 1))
        await poll_until(_am_call.at_least(state, "arrived", count))
    elapsed = dp.now() - t0
    # Transfer i moves min(n, total - off) bytes from off = (i * n) % total: with count at most
    # ceil(total / n) (the caller's bound) off is i * n, every transfer but a last partial one
    # is whole, and together they move count * n bytes, or total if that is less.
    moved = min(count * n, total)
    return {"size": n, "mbytes_per_s": moved / elapsed / 1e6, "transfers": count, "bytes": moved,
            "time_us": elapsed * 1e6}


async def am_window_program(dp, rank, size, op="store", sizes=DEFAULT_WINDOW_SIZES, window=64, iters=4, warmup=1,
                            full=False, progress=None):
    """OSU-style window bandwidth from rank 1's memory to rank 0's (get) or rank 0's to
    rank 1's (store); rank 0 returns one row per size (the `libdp._bench.bandwidth` row:
    ``size``, ``mbytes_per_s``, ``messages``, ``delivered``, ``dropped`` -- always 0 --,
    ``windows``, ``messages_per_window``; with `full` the spread of the per-window rates)."""
    from libdp._bench import _spread
    if rank > 1:
        return None
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}")
    am = await AM.open(dp)
    seg = am.segment(max(sizes))
    peer = 1 - rank
    state = {"remote": None, "landed": 0, "windows": 0}
    am.set_handler(H_ADDR, lambda tok, addr: state.__setitem__("remote", addr))
    am.set_handler(H_WINDOW, lambda tok, w: state.__setitem__("windows", state["windows"] + 1))

    def landed(tok, addr, nbytes, arg):            # a store at rank 1, a get's data at rank 0
        state["landed"] += 1

    am.set_handler(H_DATA, landed)
    rows = []
    try:
        if rank == 1:
            await am.am_request_1(peer, H_ADDR, seg.addr)
        else:
            await am.poll_until(lambda: state["remote"] is not None)
        g = 0                                      # windows so far, all sizes (both ranks count alike)
        for n in sizes:
            if n < 1:
                raise ValueError(f"transfer size {n} must be at least 1")
            if rank == 1:
                for _ in range(warmup + iters):
                    if op == "store":              # the receiver answers each window with one short request
                        await am.poll_until(lambda g=g: state["landed"] >= window * (g + 1))
                        await am.am_request_1(peer, H_WINDOW, g)
                    else:                          # serve the gets until rank 0 says the window is in
                        await am.poll_until(lambda g=g: state["windows"] > g)
                    g += 1
                continue
            remote = state["remote"]
            marks = []
            t0 = dp.now()
            for w in range(warmup + iters):
                if w == warmup:
                    t0 = dp.now()
                for _ in range(window):
                    if op == "store":
                        await am.am_store_async(peer, seg.addr, remote, n, H_DATA, 0)
                    else:
                        await am.am_get(peer, remote, seg.addr, n, H_DATA, 0)
                if op == "store":
                    await am.poll_until(lambda g=g: state["windows"] > g)
                else:
                    await am.poll_until(lambda g=g: state["landed"] >= window * (g + 1))
                    await am.am_request_1(peer, H_WINDOW, g)
                g += 1
                if w >= warmup:
                    marks.append(dp.now())
            elapsed = marks[-1] - t0
            sent = window * iters
            row = {"size": n, "mbytes_per_s": sent * n / elapsed / 1e6, "messages": sent, "delivered": sent,
                   "dropped": 0, "windows": iters, "messages_per_window": window, "time_us": elapsed * 1e6}
            if full:
                starts = [t0] + marks[:-1]
                row.update(_spread([window * n / (b - a) for a, b in zip(starts, marks)], "mbytes_per_s", 1e-6))
            rows.append(row)
            if progress is not None:
                progress(row)
        stats = am.stats()
    finally:
        await am.close()
    if rank == 0 and rows:
        rows[-1]["am_stats"] = stats
    return rows


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

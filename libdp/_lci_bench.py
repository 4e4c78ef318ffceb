"""The LCI paper's measurements, as SPMD programs over `libdp.lci`, in modeled time.

* `logp_program` -- the LogP microbenchmarks of 000 §5.1.3 for 16-byte messages, the
  way LogP parameters are measured (Culler et al.; LCI-T3 gives I-sdma's):
    os  host time in the send call, sends spaced out so that nothing waits;
    or  host time of the poll that finds a message already in host memory and runs its
        upcall (the receiver sleeps until it is surely there, then polls);
    g   the steady-state time per message of a long one-way stream, at the receiver;
    end-to-end  half the round trip of a ping-pong;
    L = end-to-end - os - or.
* `pingpong_program` -- latency vs size (0 B .. 64 KB): a message of more than an MTU
  is sent as MTU-sized packets and the answer goes back once all have arrived.
* `bandwidth_program` -- one-way streaming throughput vs size, optionally with the
  receiver copying every packet into a user buffer the size of the message (the copy
  that leaves the L2 cache for large messages: LCI-A46, C26). MB = 10^6 bytes.

`PAPER_LOGP` holds I-sdma's published values (LCI-T3), printed beside the model's.
"""
from __future__ import annotations

import trio

from libdp.lci import LCI

__all__ = ["logp_program", "pingpong_program", "bandwidth_program", "PAPER_LOGP", "LOGP_KEYS",
           "DEFAULT_PP_SIZES", "DEFAULT_BW_SIZES", "LOGP_SIZE"]

# LCI-T3 (LCI paper Table III): I-sdma, µs, small messages.
PAPER_LOGP = {
    "ppro200_lanai4": {"os_us": 1.8, "or_us": 2.6, "L_us": 10.7, "g_us": 11.1, "end_to_end_us": 15.1},
    "p3_1000_lanai9": {"os_us": 0.5, "or_us": 0.5, "L_us": 7.8, "g_us": 4.5, "end_to_end_us": 8.8},
}
LOGP_KEYS = ("os_us", "or_us", "L_us", "g_us", "end_to_end_us")
LOGP_SIZE = 16
DEFAULT_PP_SIZES = (0, 16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
DEFAULT_BW_SIZES = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 65536, 262144, 1048576)

GAP_S = 200e-6             # spacing of the os and or probes: the NI and the wire are idle again


BARRIER = b"barrier"


class _Count:
    """The upcall of the measuring programs: counts packets (and barrier packets apart),
    time-stamps arrivals, and keeps nothing."""

    def __init__(self, dp):
        self.dp = dp
        self.n = 0
        self.bars = 0
        self.stamps = []
        self.barriers_passed = 0

    def __call__(self, pkt):
        if pkt.length == len(BARRIER) and pkt.data == BARRIER:
            self.bars += 1
        else:
            self.n += 1
            self.stamps.append(self.dp.now())
        return False


async def _poll_for(lci, seconds: float) -> None:
    """Poll (handling what comes: acknowledgements, for I-hrx) for `seconds`."""
    with trio.move_on_after(seconds):
        await lci.poll_until(lambda: False)


async def _barrier(lci, rank, count: _Count):
    """Rank 1 says it is ready, rank 0 answers: both are past every earlier packet."""
    peer = 1 - rank
    count.barriers_passed += 1
    k = count.barriers_passed
    if rank == 1:
        await lci.send(peer, BARRIER)
        await lci.poll_until(lambda: count.bars >= k)
    else:
        await lci.poll_until(lambda: count.bars >= k)
        await lci.send(peer, BARRIER)


async def logp_program(dp, rank, size, n_os=40, n_or=40, n_g=400, n_rtt=200, warm=None):
    """The LogP parameters for 16-byte messages between ranks 0 and 1 (µs)."""
    if rank > 1:
        return None
    lci = await LCI.open(dp)
    got = _Count(dp)
    lci.set_upcall(got)
    peer = 1 - rank
    msg = bytes(LOGP_SIZE)
    out = {}
    try:
        # os: sends spaced out, each timed alone -- after a warm-up that has used every NI
        # send buffer once (RCPY's TLBs then hold the message buffers' pages).
        warm_sends = lci.lib.fw.nsend
        if rank == 0:
            for _ in range(warm_sends):
                await lci.send(peer, msg)
        else:
            await lci.poll_until(lambda: got.n >= warm_sends)
        await _barrier(lci, rank, got)
        if rank == 0:
            total = 0.0
            for _ in range(n_os):
                t0 = dp.now()
                await lci.send(peer, msg)
                total += dp.now() - t0
                await _poll_for(lci, GAP_S)      # an idle LCI program polls
            out["os_us"] = total / n_os * 1e6
        else:
            start = got.n
            await lci.poll_until(lambda: got.n >= start + n_os)
        # or: the receiver polls once the message is surely in its memory, then answers.
        await _barrier(lci, rank, got)
        if rank == 0:
            for _ in range(n_or):
                start = got.n
                await lci.send(peer, msg)
                await lci.poll_until(lambda: got.n > start)
        else:
            total = 0.0
            for _ in range(n_or):
                start = got.n
                await trio.sleep(GAP_S)
                t0 = dp.now()
                n = await lci.poll()
                total += dp.now() - t0
                if n != 1 or got.n != start + 1:
                    raise RuntimeError(f"or probe: {n} packets where one was expected")
                await lci.send(peer, msg)
            out["or_us"] = total / n_or * 1e6
        # g: a one-way stream; the receiver times arrivals in the steady state.
        await _barrier(lci, rank, got)
        skip = n_g // 4 if warm is None else warm
        if rank == 0:
            for _ in range(n_g):
                await lci.send(peer, msg)
        else:
            start = got.n
            first = len(got.stamps)
            await lci.poll_until(lambda: got.n >= start + n_g)
            st = got.stamps[first:]
            out["g_us"] = (st[n_g - 1] - st[skip]) / (n_g - 1 - skip) * 1e6
        # end-to-end: half a round trip.
        await _barrier(lci, rank, got)
        if rank == 0:
            t0 = None
            for i in range(n_rtt + 10):
                if i == 10:
                    t0 = dp.now()
                start = got.n
                await lci.send(peer, msg)
                await lci.poll_until(lambda: got.n > start)
            out["end_to_end_us"] = (dp.now() - t0) / n_rtt / 2 * 1e6
        else:
            for _ in range(n_rtt + 10):
                start = got.n
                await lci.poll_until(lambda: got.n > start)
                await lci.send(peer, msg)
        stats = lci.stats()
    finally:
        await lci.close()
    out["stats"] = stats
    return out


def combine_logp(results) -> dict:
    """The row of `logp_program`'s two ranks: os and end-to-end from rank 0, or and g from
    rank 1, L = end-to-end - os - or."""
    r0, r1 = results[0], results[1]
    row = {"os_us": r0["os_us"], "or_us": r1["or_us"], "g_us": r1["g_us"], "end_to_end_us": r0["end_to_end_us"]}
    row["L_us"] = row["end_to_end_us"] - row["os_us"] - row["or_us"]
    return row


async def _send_message(lci, peer, data: bytes, mtu: int) -> None:
    if not data:
        await lci.send(peer, b"")
        return
    for off in range(0, len(data), mtu):
        await lci.send(peer, data[off:off + mtu])


def _packets(nbytes: int, mtu: int) -> int:
    return max(1, -(-nbytes // mtu))


async def pingpong_program(dp, rank, size, sizes=DEFAULT_PP_SIZES, iters=100, warmup=5):
    """Round trips of messages of each size; one-way = half the round trip."""
    if rank > 1:
        return None
    lci = await LCI.open(dp)
    got = _Count(dp)
    lci.set_upcall(got)
    peer = 1 - rank
    mtu = lci.mtu
    rows = []
    try:
        for n in sizes:
            data = bytes(n)
            k = _packets(n, mtu)
            total = warmup + iters
            await _barrier(lci, rank, got)
            if rank == 0:
                t0 = dp.now()
                for i in range(total):
                    if i == warmup:
                        t0 = dp.now()
                    start = got.n
                    await _send_message(lci, peer, data, mtu)
                    await lci.poll_until(lambda: got.n >= start + k)
                rtt = (dp.now() - t0) / iters
                rows.append({"size": n, "one_way_us": rtt / 2 * 1e6, "rtt_us": rtt * 1e6})
            else:
                for _ in range(total):
                    start = got.n
                    await lci.poll_until(lambda: got.n >= start + k)
                    await _send_message(lci, peer, data, mtu)
        stats = lci.stats()
    finally:
        await lci.close()
    return {"rows": rows, "stats": stats}


async def bandwidth_program(dp, rank, size, sizes=DEFAULT_BW_SIZES, total=1 << 20, max_messages=2000,
                            copy=False):
    """One-way streaming: rank 0 sends messages of each size, rank 1 answers the last."""
    if rank > 1:
        return None
    lci = await LCI.open(dp)
    mtu = lci.mtu
    got = _Count(dp)
    state = {"buf": None, "per_msg": 1, "seen": 0}

    def upcall(pkt):
        got(pkt)
        if rank == 1 and copy and state["buf"] is not None and pkt.length and pkt.data != BARRIER:
            i = state["seen"] % state["per_msg"]
            pkt.copy_to(state["buf"], min(i * mtu, state["buf"].size - pkt.length))
            state["seen"] += 1
        return False

    lci.set_upcall(upcall)
    peer = 1 - rank
    rows = []
    try:
        for n in sizes:
            count = max(4, min(max_messages, total // n))
            k = _packets(n, mtu)
            data = bytes(n)
            if rank == 1 and copy:
                if state["buf"] is not None:
                    lci.free(state["buf"])
                state["buf"] = lci.alloc(max(n, 4))
                state["per_msg"] = k
                state["seen"] = 0
            await _barrier(lci, rank, got)
            if rank == 0:
                start = got.n
                t0 = dp.now()
                for _ in range(count):
                    await _send_message(lci, peer, data, mtu)
                await lci.poll_until(lambda: got.n > start)
                dt = dp.now() - t0
                rows.append({"size": n, "mbytes_per_s": n * count / dt / 1e6, "messages": count})
            else:
                start = got.n
                await lci.poll_until(lambda: got.n >= start + count * k)
                await lci.send(peer, b"done")
        stats = lci.stats()
    finally:
        await lci.close()
    return {"rows": rows, "stats": stats}

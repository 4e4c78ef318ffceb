"""The measurements `dp` runs: SPMD programs over DP endpoints.

Each is an ordinary DP program -- ``async def program(dp, rank, size, ...)`` -- so the
same code runs in modeled time (all ranks in one trio run on the engine's clock) and
in real time (one OS process per rank, frames on a real transport).
"""
from __future__ import annotations

import trio

__all__ = ["pingpong", "bandwidth", "DEFAULT_SIZES"]

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 1500)
PINGPONG_EP = 0x5050
BANDWIDTH_EP = 0x4200
HANDSHAKE_TIMEOUT_S = 0.05
END_MARK_RETRY_S = 200e-6      # a lost end mark costs at most this much of the measured time
PING_RETRY_S = 0.01            # lossy media: a ping whose echo has not come by then is sent again
END_MARK = b"\x01"             # data messages are zeros; hellos of the handshake are empty
ECHO_IDLE_S = 0.2              # the echo side stops after this long without a ping
FAULT_KEYS = ("fault.loss", "fault.corrupt", "fault.duplicate", "fault.reorder")


def _lossy(dp) -> bool:
    """Can a message vanish on the way? (Real transports, or fault injection.)"""
    p = dp.node.profile
    return not dp.node.modeled or any(p.get(k, 0.0) for k in FAULT_KEYS)


async def _handshake(dp, fd, rank):
    """Make sure the peer's endpoint is open before measuring (DP itself is unreliable).

    Rank 0 sends empty "hello" messages until rank 1 answers; rank 1 lets stray hellos
    land, drains them, then answers once.
    """
    if rank == 0:
        while True:
            await dp.dp_write(fd, b"")
            with trio.move_on_after(HANDSHAKE_TIMEOUT_S) as scope:
                await dp.dp_read(fd, 16)
            if not scope.cancelled_caught:
                return
    else:
        await dp.dp_read(fd, 16)
        await trio.sleep(HANDSHAKE_TIMEOUT_S / 10)
        dp.set_blocking(fd, False)
        try:
            while True:
                await dp.dp_read(fd, 16)
        except BlockingIOError:
            pass
        dp.set_blocking(fd, True)
        await dp.dp_write(fd, b"")


async def pingpong(dp, rank, size, sizes=DEFAULT_SIZES, iters=1000, warmup=10, peer=None):
    """Round trips between ranks 0 and 1: write, then read the echo (DP-A07, DP-A08).

    `peer` is the other side's node id when it is not ``1 - rank`` (two nodes of a
    larger cluster: rank 0 pings, rank 1 echoes).

    Rank 1 echoes whatever arrives until the pings stop. Where a message can be lost,
    rank 0 drops stale echoes before each ping and sends a ping again if its echo has
    not come within PING_RETRY_S; the rows count those retries (each one's wait is part
    of the measured time).
    """
    if rank > 1:
        return None
    fd = await dp.dp_open(PINGPONG_EP)
    await dp.dp_target(fd, 1 - rank if peer is None else peer, PINGPONG_EP)
    await _handshake(dp, fd, rank)
    lossy = _lossy(dp)
    if rank == 1:
        # Nothing lost: exactly one ping per iteration. Lossy: echo until pings stop.
        echoed = await _echo(dp, fd, None if lossy else len(sizes) * (warmup + iters))
        await dp.close(fd)
        return {"echoed": echoed}
    rows = []
    for n in sizes:
        msg = bytes(n)
        retries = 0
        t0 = dp.now()
        for i in range(warmup + iters):
            if i == warmup:
                t0 = dp.now()
            if not lossy:
                await dp.dp_write(fd, msg)
                await dp.dp_read(fd, n)
                continue
            await _drain(dp, fd)                # late or duplicated echoes of earlier pings
            await dp.dp_write(fd, msg)
            while True:
                with trio.move_on_after(PING_RETRY_S) as scope:
                    await dp.dp_read(fd, n)
                if not scope.cancelled_caught:
                    break
                retries += 1
                await dp.dp_write(fd, msg)
        rtt = (dp.now() - t0) / iters
        row = {"size": n, "rtt_us": rtt * 1e6, "one_way_us": rtt * 1e6 / 2}
        if lossy:
            row["retries"] = retries
        rows.append(row)
    await dp.close(fd)
    return rows


async def _drain(dp, fd) -> None:
    dp.set_blocking(fd, False)
    try:
        while True:
            await dp.dp_read(fd, 65536)
    except BlockingIOError:
        pass
    finally:
        dp.set_blocking(fd, True)


async def _echo(dp, fd, count) -> int:
    """Send back `count` messages, or (None) every message until none has come for ECHO_IDLE_S."""
    echoed = 0
    while count is None or echoed < count:
        if count is None:
            with trio.move_on_after(ECHO_IDLE_S) as scope:
                m = await dp.dp_read(fd, 65536)
            if scope.cancelled_caught:
                return echoed
        else:
            m = await dp.dp_read(fd, 65536)
        await dp.dp_write(fd, m)
        echoed += 1
    return echoed


async def bandwidth(dp, rank, size, sizes=DEFAULT_SIZES, iters=1000, warmup=0):
    """One-way streaming: `iters` messages per size, then an end mark until acknowledged.

    The receiver counts what arrived (DP may drop when a pool is full) until the end
    mark and returns the byte count in its acknowledgement; bandwidth is delivered bytes over the time from
    the first write to the acknowledgement, MB = 10^6 bytes.
    """
    if rank > 1:
        return None
    rows = []
    for k, n in enumerate(sizes):
        if n == 0:
            continue
        ep = BANDWIDTH_EP + k
        fd = await dp.dp_open(ep)
        await dp.dp_target(fd, 1 - rank, ep)
        await _handshake(dp, fd, rank)
        msg = bytes(n)
        if rank == 0:
            t0 = dp.now()
            for _ in range(iters):
                await dp.dp_write(fd, msg)
            while True:
                await dp.dp_write(fd, END_MARK)
                with trio.move_on_after(END_MARK_RETRY_S) as scope:
                    ack = await dp.dp_read(fd, 16)
                if not scope.cancelled_caught:
                    break
            elapsed = dp.now() - t0
            got = int.from_bytes(ack[:8], "big")
            rows.append({"size": n, "mbytes_per_s": got / elapsed / 1e6, "messages": iters,
                         "delivered": got // n})
        else:
            got = 0
            while True:
                m = await dp.dp_read(fd, n)
                if m == END_MARK:
                    break
                got += len(m)                               # a late empty hello adds nothing
            while True:                                     # acknowledge every end mark seen
                await dp.dp_write(fd, got.to_bytes(8, "big"))
                with trio.move_on_after(HANDSHAKE_TIMEOUT_S * 2) as scope:
                    await dp.dp_read(fd, 16)
                if scope.cancelled_caught:
                    break
        await dp.close(fd)
    return rows

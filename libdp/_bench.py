"""The measurements `dp` runs: SPMD programs over DP endpoints.

Each is an ordinary DP program -- ``async def program(dp, rank, size, ...)`` -- so the
same code runs in modeled time (all ranks in one trio run on the engine's clock) and
in real time (one OS process per rank, frames on a real transport).

DP is unreliable and has no flow control (DP-C02: a full Token Buffer Pool drops), so
every wait here is bounded and every loss is counted, never retried forever:

- `pingpong`: where a message can be lost, a ping whose echo has not come within
  PING_TIMEOUT_S is a *lost sample*: counted in the row, not resent.
- `bandwidth` and `bibw`: the OSU window benchmark (osu_bw, osu_bibw). The sender
  posts a window of W messages; the receiver answers each window with one short
  acknowledgement carrying how many messages it has read so far. Where a message of the
  window was lost the acknowledgement does not come: after a wait scaled to the window
  the sender asks with a small *mark*, which the receiver answers at once; a mark is sent
  a bounded number of times, and a window whose acknowledgement never comes is counted,
  not hung on. The rows
  say how many messages were sent, delivered and dropped, and where the receiving node's
  own counters saw them dropped (`DROP_COUNTERS`).
- `_handshake`: a bounded number of hellos; then OSError(ETIMEDOUT) saying how many
  were lost.

Message kinds on a benchmark endpoint: data are zero bytes; a hello is empty; marks,
acknowledgements and the end mark start with a byte 1, 2 or 3 (never zero).
"""
from __future__ import annotations

import errno
import math

import trio

from kernelsim import checkpoint

from libdp._calls import echo_rounds, pingpong_rounds

__all__ = ["pingpong", "bandwidth", "bibw", "DEFAULT_SIZES", "DEFAULT_WINDOW", "default_sizes",
           "drop_counters"]

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 1500)
DEFAULT_WINDOW = 64             # osu_bw's window
PINGPONG_EP = 0x5050
BANDWIDTH_EP = 0x4200
BIBW_EP = 0x4400
HANDSHAKE_TIMEOUT_S = 0.05      # one hello's wait for an answer
HANDSHAKE_TIMEOUT_REAL_S = 0.2  # the same in real time: the peer is a process that may still be
                                # starting (importing, attaching) -- seconds on a loaded host
HANDSHAKE_ATTEMPTS = 100        # then the peer is unreachable: ETIMEDOUT
PING_TIMEOUT_S = 0.1            # lossy media: a ping whose echo has not come by then is a lost sample...
PING_TIMEOUT_MAX_S = 1.0        # ... or 4 times the slowest round trip seen at this size, up to this
FIRST_PING_TIMEOUT_S = 1.0      # the first ping of a size, before any round trip is known
LINGER_S = 0.05                 # after the end mark, a receiver lets late frames land this long
ECHO_IDLE_S = 3.0               # the echo side stops after this long without a ping (or at the end mark)
ACK_TIMEOUT_MIN_S = 0.0005      # a window mark's wait for its ack, at least; see _ack_timeout
ACK_TIMEOUT_MIN_REAL_S = 0.05   # the same in real time, where a window crosses four processes
                                # that the OS schedules in slices of milliseconds
ACK_ATTEMPTS = 8                # marks sent per window before the window counts as unacknowledged
RECV_IDLE_S = 1.0               # a receiver that hears nothing for this long ends the size
RECV_BATCH = 64                 # real nodes: messages a receiver takes between checkpoints (a window)
FAULT_KEYS = ("fault.loss", "fault.corrupt", "fault.duplicate", "fault.reorder")

MARK, ACK, END = 1, 2, 3
END_MARK = bytes([END])


def default_sizes(max_message: int) -> list[int]:
    """DEFAULT_SIZES cut to a NIC's largest DP message (which is added if it was cut off)."""
    sizes = [n for n in DEFAULT_SIZES if n <= max_message]
    if max_message not in sizes and max_message < DEFAULT_SIZES[-1]:
        sizes.append(max_message)
    return sizes


def _lossy(dp) -> bool:
    """Can a message vanish on the way? (Real transports, or fault injection.)"""
    p = dp.node.profile
    return not dp.node.modeled or any(p.get(k, 0.0) for k in FAULT_KEYS)


async def _read_within(dp, fd, timeout: float, nbytes: int = 65536):
    """The next message, or None if none came within `timeout` seconds."""
    return await _read_until(dp, fd, trio.current_time() + timeout, nbytes)


async def _read_until(dp, fd, deadline: float, nbytes: int):
    """The next message, or None if none came by trio's time `deadline`."""
    polled = _nowait(dp, "dp_read_polled")
    if polled is not None:
        # A real node's message that comes while this process polls needs no cancel scope
        # (entering and leaving one costs a trio program more than a round trip).
        m = polled(fd, nbytes)
        if m is not None:
            await checkpoint()
            return m
    return await _read_scoped(dp, fd, deadline, nbytes)


async def _read_scoped(dp, fd, deadline: float, nbytes: int):
    """`_read_until` after its poll: a read in a cancel scope."""
    with trio.move_on_at(deadline):
        return await dp.dp_read(fd, nbytes)
    return None


def _nowait(dp, name: str):
    """A real node's no-wait call (``dp_write_nowait`` / ``dp_read_nowait`` / ``dp_read_polled``: only `libdp.attach`
    has them), or None: modeled DP keeps its calls as they are (every one a modeled kernel entry)."""
    return getattr(dp, name, None)


async def _handshake(dp, fd, rank, peer):
    """Make sure the peer's endpoint is open before measuring (DP itself is unreliable).

    The initiator (lower rank) sends empty hellos until an answer comes, at most
    HANDSHAKE_ATTEMPTS; the other side lets stray hellos land, drains them, answers
    once (a benchmark's receive loop answers any later hello again).
    """
    wait = HANDSHAKE_TIMEOUT_S if dp.node.modeled else HANDSHAKE_TIMEOUT_REAL_S
    if rank < peer:
        for _ in range(HANDSHAKE_ATTEMPTS):
            await dp.dp_write(fd, b"")
            if await _read_within(dp, fd, wait, 16) is not None:
                return
        raise OSError(errno.ETIMEDOUT, f"handshake with node {peer} failed: {HANDSHAKE_ATTEMPTS} hellos sent, "
                                       f"no answer within {wait * 1e3:g} ms of any (all lost, or node {peer} "
                                       f"is not there)")
    if await _read_within(dp, fd, wait * (HANDSHAKE_ATTEMPTS + 2), 16) is None:
        raise OSError(errno.ETIMEDOUT, f"handshake with node {peer} failed: none of its "
                                       f"{HANDSHAKE_ATTEMPTS} hellos arrived")
    await trio.sleep(wait / 10)
    await _drain(dp, fd)
    await dp.dp_write(fd, b"")


async def _drain(dp, fd) -> None:
    """Read and forget whatever is queued on `fd` (late or duplicated messages)."""
    read_nowait = _nowait(dp, "dp_read_nowait")
    if read_nowait is not None:         # a real node's: no fd flags to flip, no EAGAIN raised per ping
        while read_nowait(fd) is not None:
            pass
        return
    dp.set_blocking(fd, False)
    try:
        while True:
            await dp.dp_read(fd, 65536)
    except BlockingIOError:
        pass
    finally:
        dp.set_blocking(fd, True)


# --------------------------------------------------------------------------- where drops happen

# Counters the kernel, the drivers and the device models already keep on the receiving
# node, by what their leaf name says: a Token Buffer Pool with no free slot (DP-C02),
# a receive ring or FIFO with no free entry, a frame that failed its link check (CRC,
# HEC, malformed header -- what corruption becomes).
DROP_COUNTERS = {
    "tbp_full": ("dropped_full",),
    "ring_full": ("rx_missed", "rx_overflow", "rx_fifo_overflow", "supply_overflow", "halted_drops"),
    "corrupt": ("rx_crc_errors", "crc_errors", "hec_errors", "rx_malformed", "protocol_errors"),
}


def drop_counters(stats: dict) -> dict[str, int]:
    """Sum a node's statistics tree into the DROP_COUNTERS categories."""
    out = dict.fromkeys(DROP_COUNTERS, 0)
    leaf_to = {leaf: cat for cat, leaves in DROP_COUNTERS.items() for leaf in leaves}

    def walk(t):
        for k, v in t.items():
            if isinstance(v, dict):
                walk(v)
            elif k in leaf_to and isinstance(v, int) and not isinstance(v, bool):
                out[leaf_to[k]] += v
    walk(stats)
    return out


def _drops_since(dp, before: dict) -> dict[str, int]:
    after = drop_counters(dp.node.stats())
    return {k: after[k] - before[k] for k in after}


def where_dropped(row: dict, lossy_medium: bool) -> dict[str, int]:
    """Split a row's dropped messages by the receiver's counters; the rest were lost on the way."""
    seen = {k: row.get(f"dropped_{k}", 0) for k in DROP_COUNTERS}
    rest = max(0, row.get("dropped", 0) - sum(seen.values()))
    return {**seen, ("medium" if lossy_medium else "other"): rest}


# --------------------------------------------------------------------------- ping-pong


async def pingpong(dp, rank, size, sizes=DEFAULT_SIZES, iters=1000, warmup=10, full=False, on_row=None,
                   peer=None):
    """Round trips between ranks 0 and 1: write, then read the echo (DP-A07, DP-A08).

    `peer` is the other side's node id when it is not ``1 - rank``: two nodes of a larger
    cluster, rank 0 pinging and rank 1 echoing (the lower node id starts the handshake).

    Rank 1 echoes whatever arrives. Rows: ``size``, ``rtt_us``, ``one_way_us`` (the mean
    over `iters` round trips after `warmup`); with `full`, ``min_us``, ``max_us`` and
    ``stddev_us`` of the one-way latency. Where a message can be lost, each ping waits
    a bounded time for its echo (PING_TIMEOUT_S, or four times the slowest round trip
    seen at that size, at most PING_TIMEOUT_MAX_S; pings of 4 bytes or more carry a
    sequence number so that a late echo is not taken for the next one): rows then also
    count ``samples`` and ``lost``
    (the mean is over the samples that came back; None if none did).
    """
    if rank > 1:
        return None
    fd = await dp.dp_open(PINGPONG_EP)
    if peer is None:
        await dp.dp_target(fd, 1 - rank, PINGPONG_EP)
        await _handshake(dp, fd, rank, 1 - rank)
    else:
        await dp.dp_target(fd, peer, PINGPONG_EP)
        await _handshake(dp, fd, dp.node.nid, peer)
    lossy = _lossy(dp)
    if rank == 1:
        # Nothing lost: exactly one ping per iteration. Lossy: echo until the end mark or silence.
        echoed = await _echo(dp, fd, None if lossy else len(sizes) * (warmup + iters))
        await dp.close(fd)
        return {"echoed": echoed}
    rows = []
    seq = 0
    for n in sizes:
        msg = bytes(n)
        samples: list[float] = []
        lost = 0
        timeout, slowest = FIRST_PING_TIMEOUT_S, 0.0
        if not lossy:
            # Write, then read the echo: `pingpong_rounds` is this loop, compiled.
            t0 = await pingpong_rounds(dp, fd, msg, n, warmup, iters, samples if full else None)
        else:
            # On a real node the ping is written and its echo polled for by C calls, one
            # straight after the other, and the checkpoint comes after: Python run between
            # them delays the node that shares this process's core, which needs it as soon
            # as the ping is on its way (docs/real-nodes.md, "A script's work between its
            # calls"). The echo side writes the echo back before its checkpoint.
            write_nowait, polled = _nowait(dp, "dp_write_nowait"), _nowait(dp, "dp_read_polled")
            nb = max(n, 16)
            for i in range(warmup + iters):
                await _drain(dp, fd)                # late or duplicated echoes of earlier pings
                seq += 1
                tag = seq.to_bytes(4, "big") if n >= 4 else b""     # a late echo cannot pass for this one
                ping = tag + msg[len(tag):]
                ts = dp.now()
                if write_nowait is None or not write_nowait(fd, ping):
                    await dp.dp_write(fd, ping)
                m = polled(fd, nb) if polled is not None else None
                if m is not None and len(m) == n and m[:len(tag)] == tag:
                    rtt = dp.now() - ts
                    await checkpoint()
                elif await _await_echo(dp, fd, tag, n, timeout, polled_out=m is None and polled is not None):
                    rtt = dp.now() - ts
                else:
                    lost += i >= warmup
                    continue
                slowest = max(slowest, rtt)
                timeout = min(PING_TIMEOUT_MAX_S, max(PING_TIMEOUT_S, 4 * slowest))
                if i >= warmup:
                    samples.append(rtt)
        if lossy:
            rtt = sum(samples) / len(samples) if samples else None
        else:
            rtt = (dp.now() - t0) / iters
        row = {"size": n, "rtt_us": _us(rtt), "one_way_us": _us(rtt, 0.5)}
        if lossy:
            row.update(samples=len(samples), lost=lost)
        if full:
            row.update(_spread([s / 2 for s in samples]))
        rows.append(row)
        if on_row is not None:
            on_row(row)
    if lossy:
        # One end mark: the echo side stops at it, or when idle if it was lost (nothing may
        # follow it, or frames would reach a node that has stopped counting).
        await dp.dp_write(fd, END_MARK)
        while await _read_within(dp, fd, LINGER_S) is not None:    # late echoes land and are counted
            pass
    await dp.close(fd)
    return rows


async def _await_echo(dp, fd, tag: bytes, n: int, timeout: float, polled_out: bool = False) -> bool:
    """Did the echo of the ping tagged `tag` come within `timeout` (others are skipped)?
    `polled_out`: the caller has just polled for it in vain, so the first read waits in its
    cancel scope at once."""
    deadline = trio.current_time() + timeout
    if polled_out:
        m = await _read_scoped(dp, fd, deadline, max(n, 16))
        if m is None:
            return False
        if len(m) == n and m[:len(tag)] == tag:
            return True
    while (m := await _read_until(dp, fd, deadline, max(n, 16))) is not None:
        if len(m) == n and m[:len(tag)] == tag:
            return True
    return False


def _us(seconds, factor=1.0):
    return None if seconds is None else seconds * 1e6 * factor


def _spread(values: list[float], key="us", scale=1e6) -> dict:
    """min / max / stddev of per-sample figures (None without samples)."""
    if not values:
        return {f"min_{key}": None, f"max_{key}": None, f"stddev_{key}": None}
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    return {f"min_{key}": min(values) * scale, f"max_{key}": max(values) * scale, f"stddev_{key}": sd * scale}


async def _echo(dp, fd, count) -> int:
    """Send back `count` messages, or (None) every message until the end mark or ECHO_IDLE_S of silence."""
    if count is not None:
        return await echo_rounds(dp, fd, count)        # read, write back: compiled
    echoed = 0
    write_nowait, polled = _nowait(dp, "dp_write_nowait"), _nowait(dp, "dp_read_polled")
    while True:
        m = polled(fd, 65536) if polled is not None else None
        took_polled = m is not None
        if not took_polled:
            m = await _read_scoped(dp, fd, trio.current_time() + ECHO_IDLE_S, 65536)
        if m is None:
            return echoed
        if m == END_MARK:
            # Frames held back on the way (reordering) may still come: let them land and be
            # counted by this node before it stops.
            while await _read_within(dp, fd, LINGER_S) is not None:
                pass
            return echoed
        if write_nowait is None or not write_nowait(fd, m):
            await dp.dp_write(fd, m)
        elif took_polled:
            await checkpoint()      # the message's checkpoint, once its echo is on its way
        echoed += 1


# --------------------------------------------------------------------------- window bandwidth


async def bandwidth(dp, rank, size, sizes=DEFAULT_SIZES, iters=16, window=DEFAULT_WINDOW, warmup=1, full=False,
                    on_row=None):
    """OSU-style bandwidth from rank 0 to rank 1: `iters` windows of `window` messages per size.

    Rank 0 returns one row per size: ``size``, ``mbytes_per_s`` (delivered payload over
    the time from the first measured message to the last window's acknowledgement, MB =
    10^6 bytes), ``messages`` sent, ``delivered``, ``dropped``, ``windows``,
    ``unacked_windows``; with `full`, the min/max/stddev of the per-window bandwidth
    (``min_mbytes_per_s`` ...). Rank 1 returns its drop counters per size
    (``{"size", "tbp_full", "ring_full", "corrupt"}``); `merge_window_results` joins the two.
    ``iters=1, window=N`` is a plain stream of N messages closed by one acknowledgement.
    """
    if rank > 1:
        return None
    out = {"sent": [], "received": []}
    for k, n in enumerate(sizes):
        if n == 0:
            continue
        await _window_size(dp, rank, 1 - rank, BANDWIDTH_EP + k, n, iters, window, warmup, full, rank == 0, out)
        if rank == 0 and on_row is not None:
            on_row(out["sent"][-1])
    return out["sent"] if rank == 0 else out["received"]


async def bibw(dp, rank, size, sizes=DEFAULT_SIZES, iters=16, window=DEFAULT_WINDOW, warmup=1, full=False,
               on_row=None):
    """OSU-style bidirectional bandwidth: ranks 0 and 1 each send windows to the other at once.

    Each rank returns ``{"sent": rows, "received": drop counters}`` of its own direction as
    `bandwidth` does; `merge_window_results` sums both directions per size.
    """
    if rank > 1:
        return None
    out = {"sent": [], "received": []}
    for k, n in enumerate(sizes):
        if n == 0:
            continue
        async with trio.open_nursery() as nursery:
            # Endpoint BIBW_EP + 2k carries rank 0's windows, + 2k + 1 rank 1's.
            for sender in (0, 1):
                nursery.start_soon(_window_size, dp, rank, 1 - rank, BIBW_EP + 2 * k + sender, n, iters, window,
                                   warmup, full, rank == sender, out)
        if rank == 0 and on_row is not None:
            on_row(out["sent"][-1])
    return out


def _ack_timeout(dp, post_s: float) -> float:
    """How long a mark waits for its ack: the window drains about as fast as it was posted
    (the transmit ring throttles the writer), so twice the posting time, and at least
    ACK_TIMEOUT_MIN_S -- slow links (``--param link.rate_bps=1e6``) get longer. Not so
    on real nodes: the call gate posts a window into a shared-memory ring far faster than
    the node processes carry it to the reader, and a mark sent while the window is still
    on its way lands in a full pool; there the floor is ACK_TIMEOUT_MIN_REAL_S."""
    return max(ACK_TIMEOUT_MIN_S if dp.node.modeled else ACK_TIMEOUT_MIN_REAL_S, 2 * post_s)


async def _window_size(dp, rank, peer, ep, n, iters, window, warmup, full, sending, out):
    """One size of the window benchmark, on one endpoint, as its sender or its receiver."""
    before = drop_counters(dp.node.stats())
    fd = await dp.dp_open(ep)
    await dp.dp_target(fd, peer, ep)
    await _handshake(dp, fd, rank, peer)
    if sending:
        row = await _send_windows(dp, fd, n, iters, window, warmup, full)
        row["messages_per_window"] = window
        out["sent"].append(row)
        await dp.close(fd)
    else:
        await _receive_windows(dp, fd, n, window)
        await dp.close(fd)
        out["received"].append({"size": n, **_drops_since(dp, before)})


async def _send_windows(dp, fd, n, iters, window, warmup, full) -> dict:
    msg = bytes(n)
    put = _nowait(dp, "dp_write_nowait")
    acks: list[tuple[float, int]] = []        # (time the ack came, messages read so far) per acked window
    base = (dp.now(), 0)                      # where the measured windows start
    first = 0                                 # index in acks of the first measured window's ack
    unacked = 0
    for w in range(warmup + iters):
        if w == warmup:
            base, first = (dp.now(), acks[-1][1] if acks else 0), len(acks)
        tw = dp.now()
        if put is None:
            for _ in range(window):
                await dp.dp_write(fd, msg)
        else:
            # Real nodes: the window goes into the call gate's ring without a checkpoint per
            # message; a full ring is waited for the ordinary way. The window's checkpoint
            # is the ack's read in _close_window (one trio scheduler pass less per window).
            for _ in range(window):
                if not put(fd, msg):
                    await dp.dp_write(fd, msg)
        got = await _close_window(dp, fd, w, _ack_timeout(dp, dp.now() - tw))
        if got is None:
            unacked += w >= warmup
        else:
            acks.append((dp.now(), got))
    await dp.dp_write(fd, END_MARK)           # the receiver may stop now (it also stops when idle)
    measured = acks[first:]
    last_t, last_count = measured[-1] if measured else base
    delivered = max(0, last_count - base[1])
    elapsed = last_t - base[0]
    sent = window * iters
    row = {"size": n, "mbytes_per_s": delivered * n / elapsed / 1e6 if elapsed > 0 else 0.0,
           "messages": sent, "delivered": delivered, "dropped": sent - delivered,
           "windows": iters, "unacked_windows": unacked}
    if full:
        rates, prev = [], base
        for t, c in measured:
            rates.append((c - prev[1]) * n / (t - prev[0]))
            prev = (t, c)
        row.update(_spread(rates, "mbytes_per_s", 1e-6))
    return row


async def _close_window(dp, fd, w: int, timeout: float):
    """Wait for window `w`'s ack; when it does not come within `timeout`, send the window's
    mark (at most ACK_ATTEMPTS times) to ask for it. The count read so far, or None.

    Each mark waits twice as long as the one before (as TCP backs off its retransmission
    timer): a window that is only slow -- four processes between writer and reader on
    real nodes drain it far slower than the call gate posts it -- is waited for instead
    of being given up while its messages are still on their way, which would let the next
    window overrun the receiver's pool."""
    mark = bytes([MARK]) + w.to_bytes(4, "big")
    for attempt in range(ACK_ATTEMPTS + 1):
        if attempt:
            await dp.dp_write(fd, mark)
        deadline = trio.current_time() + timeout * (1 << max(0, attempt - 1))
        while True:
            with trio.move_on_at(deadline):
                m = await dp.dp_read(fd, 16)
                if len(m) == 9 and m[0] == ACK and int.from_bytes(m[1:5], "big") == w:
                    return int.from_bytes(m[5:9], "big")
                continue                      # a stale ack, a late hello answer: keep waiting
            break
    return None


async def _receive_windows(dp, fd, n, window) -> None:
    """Count data messages and acknowledge each window, with (window, count so far): when
    `window` messages of it have come (as osu_bw), or when its mark asks (some were lost).
    Stop at the end mark or after RECV_IDLE_S of silence."""
    count = in_window = w = 0                 # count: data messages before this window
    nbytes = max(n, 16)
    take = _nowait(dp, "dp_read_nowait")
    taken = 0                                 # messages taken since this task's last checkpoint
    while True:
        m = take(fd, nbytes) if take is not None else None
        if m and m[0] == 0:
            # Data (the sender's bytes(n)) that had arrived: real nodes' common case, in the
            # fewest steps -- no cancel scope, no checkpoint but one per RECV_BATCH.
            in_window += 1
            taken += 1
            if in_window < window:
                if taken >= RECV_BATCH:
                    await trio.lowlevel.checkpoint()
                    taken = 0
                continue
        else:
            if m is None:                     # nothing waiting (or a modeled DP): wait, within the idle limit
                m = await _read_within(dp, fd, RECV_IDLE_S, nbytes)
                taken = 0
            if m is None or m == END_MARK:
                return
            if not m:                         # a hello whose answer was lost: answer again
                await dp.dp_write(fd, b"")
                continue
            if m[0] == MARK and len(m) == 5:
                marked = int.from_bytes(m[1:5], "big")
                if marked < w:                # acknowledged already (that ack is lost or on its
                    await dp.dp_write(fd, bytes([ACK]) + m[1:5] + (count + in_window).to_bytes(4, "big"))
                    continue                  # way): say so again, keep counting this window
                w = marked
            else:
                in_window += 1
                if in_window < window:
                    continue
        count += in_window
        await dp.dp_write(fd, bytes([ACK]) + w.to_bytes(4, "big") + count.to_bytes(4, "big"))
        w, in_window, taken = w + 1, 0, 0     # the ack's write was a checkpoint


def merge_window_results(results: list, lossy_medium: bool) -> list[dict]:
    """The rows of `bandwidth` or `bibw` from every rank's result: the senders' rows per
    size (both directions summed for bibw) with the receivers' drop counters, and the
    dropped messages no counter saw as ``dropped_medium`` (lossy) or ``dropped_other``."""
    sent: dict[int, list[dict]] = {}
    drops: dict[int, dict[str, int]] = {}
    for res in results:
        if not res:
            continue
        parts = (res["sent"] + res["received"]) if isinstance(res, dict) else res
        for row in parts:
            if "messages" in row:
                sent.setdefault(row["size"], []).append(row)
            else:
                acc = drops.setdefault(row["size"], dict.fromkeys(DROP_COUNTERS, 0))
                for k in DROP_COUNTERS:
                    acc[k] += row.get(k, 0)
    rows = []
    for n, parts in sent.items():
        row = dict(parts[0])
        if len(parts) > 1:                    # bibw: both directions
            for key in ("mbytes_per_s", "messages", "delivered", "dropped", "windows", "unacked_windows"):
                row[key] = sum(p[key] for p in parts)
        for cat, v in drops.get(n, dict.fromkeys(DROP_COUNTERS, 0)).items():
            row[f"dropped_{cat}"] = v
        rest = "medium" if lossy_medium else "other"
        row[f"dropped_{rest}"] = where_dropped(row, lossy_medium)[rest]
        rows.append(row)
    return rows

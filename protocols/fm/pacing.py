"""PIO pacing (FM-C13, FM-A15..A17): the pacer, and the start-up micro-benchmark that sizes it.

On the LPR's 440BX, PIO throughput collapses once a write overflows the host bridge's
posted-write queue (FM-A15, FM-B21); HPVM's fix is to PIO a long message in chunks no
longer than the queue -- 160 bytes there, FM-A16 -- so that it never overflows. The
chunk is chosen at start-up by a micro-benchmark of PIO throughput (FM-A17).

`Pacer` does the pacing: a write longer than the chunk goes out in chunks, and no
piece -- a chunk, a packet's header, the doorbell -- is posted while it would make
more than a chunk's worth of lines wait in the bridge's queue; short messages, whose
writes fit the queue, go at once. The pacer cannot see the queue: it reckons with the
drain times the micro-benchmark measured (`measure`), as a real one would time itself
with the cycle counter -- so a bus busier than at start-up can still overflow it.

`choose` is the micro-benchmark: on an idle copy of the node's own modeled bus it
measures how long writes of 1, 2, ... lines take to drain (a PIO write, then a read
of a LANai register, which completes only once every posted write has), then runs the
pacer itself over a packet's worth of PIO for every chunk size, and keeps the size
with the best throughput -- none, when not pacing is as good.
"""
from __future__ import annotations

import math

__all__ = ["Pacer", "measure", "choose", "PROBE_ADDR"]

PROBE_ADDR = 0x40000            # where the benchmark writes (any SRAM address: the bus only counts lines)


class Pacer:
    """PIO writes through `bus`, paced in `chunk`-byte pieces (0: not paced).

    The pacer keeps its own reckoning of the bridge's queue -- when what it has posted
    will have drained (`free`), at the line rate the micro-benchmark measured -- and
    posts a piece of L lines only once at most chunk - L lines are still in it.
    """

    def __init__(self, bus, chunk: int = 0, periods=None):
        self.bus = bus
        self.chunk = chunk
        self.periods = periods or [0.0]
        self.lines = chunk // bus.line_bytes if chunk else 0
        top = min(self.lines, len(self.periods) - 1)
        # Once a burst runs, each further line drains this fast (the first one costs more).
        self.per_line = (self.periods[top] - self.periods[1]) / (top - 1) if top > 1 else self.periods[top]
        self.margin = bus.clk
        self.free = 0.0                 # when the pacer reckons all it posted has drained
        self.paced = 0                  # pieces that waited
        self.wait_s = 0.0

    def _lines(self, off: int, n: int) -> int:
        lb = self.bus.line_bytes
        return (off + n - 1) // lb - off // lb + 1

    def post(self, now: float, off: int, n: int) -> float:
        """PIO `n` bytes at `off` from `now`: when the CPU is done posting them."""
        bus = self.bus
        if not self.chunk:
            return bus.post(now, off, n)
        t = now
        pos = 0
        top = len(self.periods) - 1
        while pos < n:
            # Pieces end on line boundaries, so a piece never spans one line more than it holds.
            m = min(self.chunk - (off + pos) % bus.line_bytes, n - pos)
            lines = self._lines(off + pos, m)
            start = t
            if self.free > t:
                room_at = self.free - (self.lines - lines) * self.per_line + self.margin
                if room_at > t:
                    start = room_at
                    self.paced += 1
                    self.wait_s += start - t
            t = bus.post(start, off + pos, m)
            drained = start + self.periods[min(lines, top)]
            chained = self.free + lines * self.per_line
            self.free = drained if drained > chained else chained
            pos += m
        return t


def measure(bus, max_lines: int) -> list[float]:
    """Drain time of a PIO write of 1..max_lines lines on the idle bus: write, then a
    flushing read, less the read's own time. periods[L] for L lines (periods[0] = 0)."""
    lb = bus.line_bytes
    alone = bus.idle_copy().read(0.0)
    periods = [0.0]
    for lines in range(1, max_lines + 1):
        b = bus.idle_copy()
        posted = b.post(0.0, PROBE_ADDR, lines * lb)
        periods.append(max(0.0, b.read(posted) - alone))
    return periods


def choose(bus, block: int) -> dict:
    """The start-up micro-benchmark: the chunk that PIOs a `block`-byte packet fastest."""
    lb = bus.line_bytes
    max_lines = math.ceil(block / lb)
    periods = measure(bus, max_lines)
    alone = bus.idle_copy().read(0.0)

    def throughput(chunk):
        b = bus.idle_copy()
        pacer = Pacer(b, chunk, periods)
        posted = pacer.post(0.0, PROBE_ADDR, block)
        return block / (b.read(posted) - alone) / 1e6

    unpaced = throughput(0)
    table = [(lines * lb, throughput(lines * lb)) for lines in range(1, max_lines)]
    best_chunk, best = 0, unpaced
    for chunk, mbps in table:
        if mbps > best * (1 + 1e-9):
            best_chunk, best = chunk, mbps
    return {"chunk_bytes": best_chunk, "mbytes_per_s": best, "unpaced_mbytes_per_s": unpaced,
            "periods": periods, "table": table, "block_bytes": block}

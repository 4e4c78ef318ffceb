# cython: language_level=3, boundscheck=False, wraparound=False
"""DMA to Host and Host Recv Queue Mgmt (LCI-C04, C08).

The host hands the NI free receive buffers by writing their addresses into a ring in
SRAM (LCI-C08's "Recv Completions" queue); the NI takes them in order, so the host
always knows which buffer comes next and polls one word: the last of that buffer.
Each packet goes up in one DMA -- header and payload placed so that they end just
before a length word with a full flag, which the same DMA writes (FM-C07's trick,
used by DP's control program too). Only then is its NI receive buffer released.

With no free host buffer -- the client keeps packets, or does not poll -- packets
wait here in arrival order, holding their NI buffers, until the host gives one back;
so the credits of the base protocol stop the senders, end to end.

A cdef class (its counters C fields, its per-packet helpers C calls): it runs on every
packet, and at 1024 busy nodes the per-node state must stay small (docs/lci.md "Scale").
"""
from collections import deque

from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L

__all__ = ["ToHost"]


cdef class ToHost:
    def __init__(self, fw):
        self.fw = fw
        self.pending = deque()
        self.delivered = 0

    def start(self):
        fw = self.fw
        self.cons = 0
        self.pending = deque()
        self.delivered = 0
        base = fw.lay["free_base"]
        for i in range(fw.nfree):
            fw.ni.watch(base + 4 * i, self.on_free)

    cdef long _take(self):
        """The next free host buffer from the ring, or -1."""
        fw = self.fw
        e = fw.lay["free_base"] + 4 * (self.cons % fw.nfree)
        w = fw.ni.rd32(e)
        if not w & L.FREE_VALID:
            return -1
        fw.ni.wr32(e, 0)
        self.cons += 1
        return w & ~L.FREE_VALID

    cpdef deliver(self, peer, long long buf, long n):
        """Put the packet of `n` bytes at SRAM `buf` (Myrinet type first) into host memory."""
        cdef long long addr = -1 if self.pending else self._take()
        if addr < 0:
            self.fw.counters["held_for_host_buffer"] += 1
            self.pending.append((peer, buf, n))
            return
        self._dma(peer, buf, n, addr)

    cdef _dma(self, peer, long long buf, long n, long long addr):
        fw = self.fw
        cdef long body = n - W.TYPE_BYTES
        end = addr + fw.host_slot
        fw.ni.wr32(buf + n, L.RX_FULL | body)
        fw.ni.host_dma(True, end - 4 - body, buf + W.TYPE_BYTES, body + 4, self.on_delivered, (peer, buf))

    def on_free(self, _off):
        """The host wrote a free-ring entry: take it if packets are waiting."""
        if not self.pending:
            return
        yield self.fw.c.ni_poll
        cdef long long addr
        while self.pending:
            addr = self._take()
            if addr < 0:
                return
            peer, buf, n = self.pending.popleft()
            self._dma(peer, buf, n, addr)

    def on_delivered(self, item):
        peer, buf = item
        fw = self.fw
        yield fw.c.ni_rxdone
        self.delivered += 1
        fw.counters["delivered"] += 1
        slot = fw.multicast.holds.get(buf)
        if slot is not None:
            yield from fw.multicast.unref(slot)     # the buffer waits for its forwards too (LCI-C10)
        else:
            yield from fw.recvq.release(buf)
            yield from fw.flow.released(peer)
        fw.timers.delivered()

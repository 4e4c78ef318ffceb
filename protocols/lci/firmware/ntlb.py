"""The NI half of RCPY (LCI-C16..C19): the NI TLB and the RCPY receive path.

The NTLB is direct-mapped with 1024 entries (LCI-A45), in SRAM: an entry holds a
virtual page's tag with valid and locked bits, and the physical page. Valid entries
always map pinned pages correctly; the host is the master and changes entries through
its command ring (LCI-C17) -- except in two cases the NI handles itself:

* a send descriptor with a miss notice carries the new mapping of its source page; by
  the time the NI reads it every earlier hit on the old mapping has been processed, so
  it installs it (LCI-C18);
* an RCPY packet whose destination page has no valid entry goes to an *anonymous
  page* from the set the host reserved; the entry is invalidated and locked, and the
  packet's header goes up the receive queue as the notification that the host must
  copy the data to its real place and fix both TLBs (LCI-C19). Further packets for a
  locked entry miss the same way until the host's update unlocks it.

A hit DMAs the payload straight to the destination's physical address: no host
buffer, no notification, no host work (LCI-C16).
"""
from __future__ import annotations

from collections import deque

from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L

__all__ = ["Ntlb"]


class Ntlb:
    def __init__(self, fw):
        self.fw = fw
        self.pending = deque()

    def start(self) -> None:
        fw = self.fw
        ni = fw.ni
        self.base = fw.lay["ntlb_base"]
        ni.write(self.base, bytes(L.NTLB_ENTRIES * L.NTLB_BYTES))
        self.cmd_seen = 0
        self.anon_cons = 0
        self.pending = deque()
        for i in range(L.NTLB_CMDS):
            ni.watch(fw.lay["cmd_base"] + i * L.NTLB_CMD_BYTES, self.on_cmd)
        for i in range(fw.nanon):
            ni.watch(fw.lay["anon_base"] + 4 * i, self.on_anon)

    def _entry(self, vpage: int) -> int:
        return self.base + (vpage % L.NTLB_ENTRIES) * L.NTLB_BYTES

    def translate(self, vaddr: int, length: int) -> int:
        """Physical address of [vaddr, vaddr+length) within one page, or -1 (a miss)."""
        vpage = vaddr // L.PAGE
        if (vaddr + max(length, 1) - 1) // L.PAGE != vpage:
            return -1
        e = self._entry(vpage)
        ni = self.fw.ni
        w0 = ni.rd32(e)
        if not w0 & L.NTLB_VALID or w0 & L.NTLB_LOCKED or w0 >> 2 != vpage:
            return -1
        return ni.rd32(e + 4) + vaddr % L.PAGE

    def install(self, vpage: int, paddr: int) -> None:
        e = self._entry(vpage)
        ni = self.fw.ni
        ni.wr32(e + 4, paddr)
        ni.wr32(e, (vpage << 2) | L.NTLB_VALID)
        self.fw.counters["ntlb_updates"] += 1

    def on_cmd(self, _off):
        """The host's TLB commands, in order."""
        fw = self.fw
        ni = fw.ni
        while True:
            c = fw.lay["cmd_base"] + (self.cmd_seen % L.NTLB_CMDS) * L.NTLB_CMD_BYTES
            w0 = ni.rd32(c)
            if not w0 & L.SD_VALID:
                return
            yield fw.c.ni_poll + fw.c.ni_ntlb
            ni.wr32(c, 0)
            self.cmd_seen += 1
            if w0 & 0xFF == L.NTLB_CMD_UPDATE:
                self.install(ni.rd32(c + 4), ni.rd32(c + 8))
            yield from self._retry()

    # -- the RCPY receive path ---------------------------------------------------------------

    def on_rcpy(self, peer, buf, n, hdr):
        fw = self.fw
        yield fw.c.ni_ntlb
        body = n - W.TYPE_BYTES - W.HDR_BYTES
        vaddr = hdr.aux
        phys = self.translate(vaddr, body)
        if phys >= 0 and not self.pending:
            fw.counters["rcpy_hits"] += 1
            fw.ni.host_dma(True, phys, buf + W.TYPE_BYTES + W.HDR_BYTES, body, self.on_placed, (peer, buf))
            return
        self.pending.append((peer, buf, n, vaddr, body))
        yield from self._retry()

    def _retry(self):
        """Place waiting packets in order: hits directly, misses through anonymous pages."""
        fw = self.fw
        ni = fw.ni
        while self.pending:
            peer, buf, n, vaddr, body = self.pending[0]
            phys = self.translate(vaddr, body)
            if phys >= 0:
                self.pending.popleft()
                fw.counters["rcpy_hits"] += 1
                ni.host_dma(True, phys, buf + W.TYPE_BYTES + W.HDR_BYTES, body, self.on_placed, (peer, buf))
                continue
            anon = self._take_anon()
            if anon < 0:
                return                      # the host has not given pages back yet: wait
            self.pending.popleft()
            fw.counters["rcpy_misses"] += 1
            vpage = vaddr // L.PAGE
            e = self._entry(vpage)
            ni.wr32(e, (vpage << 2) | L.NTLB_LOCKED)          # invalid and locked
            ni.host_dma(True, anon, buf + W.TYPE_BYTES + W.HDR_BYTES, body)
            h = buf + W.TYPE_BYTES
            ni.sram_view[h + 1] = ni.sram_view[h + 1] | W.F_MISS
            yield fw.c.ni_rxdone
            fw.tohost.deliver(peer, buf, W.TYPE_BYTES + W.HDR_BYTES)   # the notification

    def _take_anon(self) -> int:
        fw = self.fw
        if not fw.nanon:
            return -1
        e = fw.lay["anon_base"] + 4 * (self.anon_cons % fw.nanon)
        w = fw.ni.rd32(e)
        if not w & L.FREE_VALID:
            return -1
        fw.ni.wr32(e, 0)
        self.anon_cons += 1
        return w & ~L.FREE_VALID

    def on_anon(self, _off):
        if not self.pending:
            return
        yield self.fw.c.ni_poll
        yield from self._retry()

    def on_placed(self, item):
        peer, buf = item
        fw = self.fw
        yield fw.c.ni_rxdone
        yield from fw.recvq.release(buf)
        yield from fw.flow.released(peer)

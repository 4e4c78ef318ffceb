"""FM's LANai control program (the "LCP", FM-C01..C07), for the firmware slot.

What it does, per packet, on the NI processor (each step's NI cycles are module
parameters, see ``protocols.fm``):

* **Send** (FM-C01). Each context has a send ring of packet slots in SRAM, mapped into
  its process (FM-C05): the host writes a packet -- 32-byte header, then data -- into
  the next slot by PIO (FM-A02) and bumps the context's producer word, which the LCP
  watches. The LCP reads the header, looks the destination host up in the route table
  the mapper wrote into the NI, puts the route bytes in front of the header and starts
  the send DMA engine. When the packet has left, the slot is free; the count of freed
  slots goes to a word in host memory by DMA now and then -- at once when the host says
  it is waiting for a slot.
* **Receive** (FM-C03, FM-C05, FM-C07). The receive DMA engine is kept armed with a
  free SRAM buffer. A packet is checked (type, lengths, offsets: a malformed one is
  dropped and counted), demultiplexed on the program ID and instance in its header
  (an unknown one is dropped and counted), and DMA'd into the *next slot* of that
  context's pinned host region, wrapping at the end: the LCP knows nothing of credits.
  It appends the packet's length and a full flag and places the packet so that this
  word is the last of the slot: one DMA brings data and flag, and the host polls the
  same word of every slot whatever the packet's size (FM-C07).
* **Credit refills** (FM-C03) are packets of their own kind: the LCP DMAs the refill
  count straight into the sending context's credit word for that peer in host memory
  -- polled there like everything else -- and the packet never occupies a slot.
* **Notification.** ``notify=memory`` (FM-C06): the host polls the flag word in its own
  memory; nothing more to do. ``notify=pci``: the LCP also counts the packets it has
  delivered to each context in a word of its SRAM, and the host polls that word across
  the PCI bus (as FM did before HPVM 1.9).
"""
from __future__ import annotations

import errno

from nic_drivers.myrinet._model import ROUTE_BIT
from nic_drivers.myrinet.firmware import Firmware
from protocols.fm import _wire

__all__ = ["FmLcp", "CTX_BASE", "CTX_BYTES", "MAX_CONTEXTS", "SLOT_BYTES", "ROUTE_AREA", "TRAILER_FULL",
           "CB_TX_WAIT", "CB_NOTIFY", "CB_HOST", "CX_SEND_PROD", "CX_ACTIVE", "CX_PROGRAM", "CX_INSTANCE",
           "CX_RING", "CX_SLOTS", "CX_SLOT_BYTES", "CX_DELIVERED", "CX_TXDONE_ADDR", "CX_TX_DONE",
           "CX_CREDIT_ADDR", "CX_SEND_BASE", "CX_SEND_SLOTS", "CX_CREDIT_HOSTS", "MAX_INSTANCES"]

MASK32 = 0xFFFFFFFF
TRAILER_FULL = 1 << 31
ROUTE_AREA = 16                 # route bytes go right-aligned in front of the header
SLOT_BYTES = 2112               # a send slot or receive buffer: route area, header, 2048 data, length word
MAX_CONTEXTS = 16
MAX_INSTANCES = 16              # contexts of one program on one host

# Control block words (SRAM offsets)
CB_TX_WAIT = 0x00               # host: a bit per context waiting for a send slot       [watched]
CB_NOTIFY = 0x04                # 0: memory-based notification, 1: the host polls CX_DELIVERED
CB_HOST = 0x08                  # this host's node id
CTX_BASE = 0x40                 # the context table
CTX_BYTES = 64
CX_SEND_PROD = 0x00             # host: packets posted on the context's send ring       [watched]
CX_ACTIVE = 0x04
CX_PROGRAM = 0x08
CX_INSTANCE = 0x0C
CX_RING = 0x10                  # host address of the pinned receive region
CX_SLOTS = 0x14
CX_SLOT_BYTES = 0x18
CX_DELIVERED = 0x1C             # LCP: packets delivered into the region (notify=pci polls this)
CX_TXDONE_ADDR = 0x20           # host address of the send-done word
CX_TX_DONE = 0x24               # LCP: packets sent from the ring
CX_CREDIT_ADDR = 0x28           # host address of the credit words (one per source host and instance)
CX_SEND_BASE = 0x2C             # SRAM offset of the context's send ring
CX_SEND_SLOTS = 0x30
CX_CREDIT_HOSTS = 0x34          # hosts the credit words cover (the region's max_hosts)


class _Ctx:
    """The LCP's view of one context (read from its table entry when the host activates it)."""

    __slots__ = ("index", "entry", "active", "program", "instance", "ring", "slots", "slot_bytes", "prod", "seen",
                 "done", "reported", "send_base", "send_slots", "txdone_addr", "credit_addr", "credit_hosts",
                 "delivered")

    def __init__(self, index):
        self.index = index
        self.entry = CTX_BASE + index * CTX_BYTES
        self.active = False
        self.program = self.instance = -1


class FmLcp(Firmware):
    """FM's control program (see the module essay)."""

    name = "fm"

    def __init__(self, costs: dict, contexts: int, send_slots: int):
        if not 1 <= contexts <= MAX_CONTEXTS:
            raise OSError(errno.EINVAL, f"fm: 1..{MAX_CONTEXTS} contexts per node")
        self.c_poll = costs["lcp_poll_cycles"]
        self.c_send = costs["lcp_send_cycles"]
        self.c_txdone = costs["lcp_txdone_cycles"]
        self.c_recv = costs["lcp_recv_cycles"]
        self.c_rxdone = costs["lcp_rxdone_cycles"]
        self.ncontexts = contexts
        self.send_slots = send_slots
        self.ni = None
        self.hdr = _wire.Header()
        self.counters = dict.fromkeys(("sent", "received", "delivered", "credits", "no_route", "no_context",
                                       "misdelivered", "bad_source", "reports") + _wire.MALFORMED[1:], 0)

    # -- layout ----------------------------------------------------------------------------

    def attach(self, ni) -> None:
        if CTX_BASE + self.ncontexts * CTX_BYTES > ni.firmware_bytes:
            raise OSError(errno.ENOMEM, "fm: the context table does not fit the control area")
        first = ni.firmware_bytes
        rings = self.ncontexts * self.send_slots * SLOT_BYTES
        nrx = (ni.sram_bytes - first - rings) // SLOT_BYTES
        if nrx < 2:
            raise OSError(errno.ENOMEM, f"fm: {ni.sram_bytes} bytes of SRAM hold no {self.ncontexts} send rings of "
                                        f"{self.send_slots} packets and two receive buffers")
        self.ni = ni
        self.send_ring = [first + k * self.send_slots * SLOT_BYTES for k in range(self.ncontexts)]
        self.rx_buffers = [first + rings + i * SLOT_BYTES for i in range(nrx)]
        self._reset_state()

    def _reset_state(self):
        self.ctx = [_Ctx(k) for k in range(self.ncontexts)]
        self.by_id: dict = {}
        self.free_rx = list(reversed(self.rx_buffers))

    def start(self, ni):
        self._reset_state()
        self.host = ni.rd32(CB_HOST)
        self.notify_pci = ni.rd32(CB_NOTIFY) == 1
        for c in self.ctx:
            ni.watch(c.entry + CX_SEND_PROD, self.on_host_send)
        ni.watch(CB_TX_WAIT, self.on_tx_wait)
        self._arm()

    def activate(self, k: int) -> None:
        """The host filled context `k`'s table entry (at fm_open): take it in.

        A real LCP notices the entry on its next pass; the kernel calls this after
        writing the entry, with the control program running.
        """
        ni, c = self.ni, self.ctx[k]
        e = c.entry
        rd = ni.rd32
        c.program = rd(e + CX_PROGRAM)
        c.instance = rd(e + CX_INSTANCE)
        c.ring = rd(e + CX_RING)
        c.slots = rd(e + CX_SLOTS)
        c.slot_bytes = rd(e + CX_SLOT_BYTES)
        c.txdone_addr = rd(e + CX_TXDONE_ADDR)
        c.credit_addr = rd(e + CX_CREDIT_ADDR)
        c.send_base = rd(e + CX_SEND_BASE)
        c.send_slots = rd(e + CX_SEND_SLOTS)
        c.credit_hosts = rd(e + CX_CREDIT_HOSTS)
        c.seen = c.done = c.reported = rd(e + CX_SEND_PROD)
        c.prod = 0
        c.delivered = 0
        ni.wr32(e + CX_DELIVERED, 0)
        ni.wr32(e + CX_TX_DONE, c.done)
        c.active = True
        self.by_id[(c.program, c.instance)] = c

    def deactivate(self, k: int) -> None:
        """The host closed context `k`: packets for it are dropped from now on."""
        c = self.ctx[k]
        if c.active:
            c.active = False
            self.by_id.pop((c.program, c.instance), None)

    def send_slot(self, k: int, i: int) -> int:
        """SRAM offset of send slot `i` of context `k` (its route area; the header follows)."""
        return self.send_ring[k] + (i % self.send_slots) * SLOT_BYTES

    # -- send side -------------------------------------------------------------------------

    def on_host_send(self, off):
        k = (off - CTX_BASE) // CTX_BYTES
        c = self.ctx[k]
        ni = self.ni
        cost = self.c_poll
        while c.active:
            prod = ni.rd32(c.entry + CX_SEND_PROD)
            if prod == c.seen or ((c.seen - c.done) & MASK32) >= c.send_slots:
                return
            yield cost + self.c_send
            cost = 0
            slot = self.send_slot(k, c.seen)
            c.seen = (c.seen + 1) & MASK32
            hdr_at = slot + ROUTE_AREA
            dst = ni.rd16be(hdr_at + 6)
            plen = ni.rd16be(hdr_at + 14)
            route = ni.route_table.get(dst)
            if route is None or not 0 < len(route) <= ROUTE_AREA or plen > _wire.DATA_BYTES:
                self.counters["no_route"] += 1
                self._sent_one(c)
                continue
            ni.write(hdr_at - len(route), route)
            ni.net_send(hdr_at - len(route), len(route) + _wire.HDR_BYTES + plen, self.on_sent, c)

    def on_sent(self, c):
        yield self.c_txdone
        self.counters["sent"] += 1
        self._sent_one(c)
        if ((c.seen - c.done) & MASK32) == c.send_slots - 1 and self.ni.rd32(c.entry + CX_SEND_PROD) != c.seen:
            self.ni.post(self.on_host_send, c.entry + CX_SEND_PROD)       # the host is ahead of a full ring

    def _sent_one(self, c):
        ni = self.ni
        c.done = (c.done + 1) & MASK32
        ni.wr32(c.entry + CX_TX_DONE, c.done)
        waiting = ni.rd32(CB_TX_WAIT) & (1 << c.index)
        if waiting or ((c.done - c.reported) & MASK32) >= max(1, c.send_slots // 2):
            self._report(c)

    def _report(self, c):
        c.reported = c.done
        self.counters["reports"] += 1
        self.ni.host_dma(True, c.txdone_addr, c.entry + CX_TX_DONE, 4)

    def on_tx_wait(self, _off):
        yield self.c_poll
        wait = self.ni.rd32(CB_TX_WAIT)
        for c in self.ctx:
            if wait & (1 << c.index) and c.reported != c.done:
                self._report(c)

    # -- receive side ----------------------------------------------------------------------

    def _arm(self):
        ni = self.ni
        if not ni.rx_armed and self.free_rx:
            ni.rx_arm(self.free_rx.pop(), SLOT_BYTES - 4)

    def _free(self, buf):
        self.free_rx.append(buf)
        self._arm()

    def on_packet(self, pkt):
        buf, n = pkt
        ni = self.ni
        self._arm()
        yield self.c_recv
        self.counters["received"] += 1
        h = self.hdr
        rc = h.parse(ni.sram_view, buf, n)
        if rc:
            self.counters[_wire.MALFORMED[rc]] += 1
            self._free(buf)
            return
        if h.dst != self.host:
            self.counters["misdelivered"] += 1
            self._free(buf)
            return
        c = self.by_id.get((h.program, h.dst_inst))
        if c is None:
            self.counters["no_context"] += 1
            self._free(buf)
            return
        if h.kind == _wire.CREDIT:
            if h.src >= c.credit_hosts or h.src_inst >= MAX_INSTANCES:
                self.counters["bad_source"] += 1
                self._free(buf)
                return
            self.counters["credits"] += 1
            word = c.credit_addr + 4 * (h.src * MAX_INSTANCES + h.src_inst)
            ni.host_dma(True, word, buf + 28, 4, self.on_credit_done, buf)
            return
        slot = c.prod % c.slots
        c.prod = (c.prod + 1) & MASK32
        end = c.ring + (slot + 1) * c.slot_bytes
        ni.wr32(buf + n, TRAILER_FULL | n)              # the length word goes after the packet
        ni.host_dma(True, end - 4 - n, buf, n + 4, self.on_delivered, (c, buf))

    def on_credit_done(self, buf):
        yield self.c_rxdone
        self._free(buf)

    def on_delivered(self, item):
        c, buf = item
        yield self.c_rxdone
        self.counters["delivered"] += 1
        self._free(buf)
        if self.notify_pci:
            c.delivered = (c.delivered + 1) & MASK32
            self.ni.wr32(c.entry + CX_DELIVERED, c.delivered)

    def stats(self) -> dict:
        out = dict(self.counters)
        if self.ni is not None:
            out.update(free_rx_buffers=len(self.free_rx), rx_buffers=len(self.rx_buffers),
                       contexts=sum(1 for c in self.ctx if c.active))
        return out

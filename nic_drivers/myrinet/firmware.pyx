# cython: language_level=3, annotation_typing=False
"""Control programs for the LANai: the firmware slot's interface and DP's firmware.

A LANai board does nothing by itself: the host loads a control program into its SRAM
and starts it (LCI-C04 lists the modules of LCI's; FM's is the "LCP"). Here a control
program is a Python object with a few hooks, each run on the NI processor model as a
generator that yields the NI cycles its work takes:

    attach(ni)            reserve its SRAM layout (raise OSError to refuse the board)
    start(ni)             the host set CTRL_RUN: read the configuration, arm the receiver
    on_host_send(off)     the host rang the send doorbell (an SRAM word the program watches)
    on_packet((off, n))   the receive DMA engine put a packet of n bytes at SRAM[off]
    on_crc_error(n)       optional: the hardware CRC check rejected a packet of n bytes
                          (it was dropped and counted; the armed buffer stays armed)
    detach(ni)            the program is being replaced or the board released

plus whatever doorbell words it asks the board to ``watch`` and the completions of the
DMAs it starts. Protocol modules supply their own (``ni.load_firmware(fw)``).

DP's firmware implements the host interface of the driver in ``driver.py`` -- the pair
is matched, as a driver and the control program it loads always are:

* **Send** (LCI-C02 steps 2-4, EP-C01). The host posts descriptors into a ring in SRAM
  and bumps a producer word the firmware watches. A descriptor names a frame already in
  the send buffer (the host wrote it by PIO) or one in host memory (the firmware DMAs it
  into the send buffer first). Either way the send DMA engine then streams it, route
  bytes first. Completions are counted in SRAM and DMA'd to a host word now and then --
  at once when the host says it is waiting, with an interrupt if it asked for one.
* **Receive** (LCI-C08, FM-C06/C07). The receive DMA engine is kept armed with a free
  SRAM buffer. A packet of DP's Myrinet type is dispatched on its link protocol: the
  EPOS bulk protocol to the bulk ring, everything else to the kernel ring. Each ring is
  a circle of slots in pinned host memory; the firmware appends the packet's length and
  a full flag *after* the packet and places the packet at the end of its slot, so one
  DMA brings data and flag and the host polls one fixed word per slot. A ring the host
  has not drained holds packets in SRAM; when SRAM runs out the receiver stays unarmed
  and the network holds further packets back: nothing is dropped for want of room. One
  receive DMA means head-of-line blocking, so a ring nobody will ever drain (bulk packets
  with no EPOS receiver) would deafen the NI for good: a ring that holds packets while its
  host consumes nothing for ``abandon_s`` (the driver's ``abandon_ms``) is deemed
  abandoned, and its held packets are dropped and counted. A slow host keeps its packets.
* **Notification** of the kernel ring, chosen by the driver: an interrupt per delivery
  (``irq``), the polling watchdog (``watchdog``, LCI-C09: a timer started by a delivery
  raises the interrupt only if the host has not consumed the ring by then), or nothing
  (``poll``). The bulk ring never interrupts: its owner polls.
"""
from __future__ import annotations

import errno
from collections import deque

from nic_drivers.myrinet._model import ISR_RX, ISR_TX
from nic_drivers.myrinet._model cimport LanaiNI
from nic_drivers.myrinet.fabric import MAX_ROUTE_BYTES

__all__ = ["Firmware", "DPFirmware", "MYRI_TYPE_DP", "BULK_PROTO", "ROUTE_MAX",
           "CB_SEND_PROD", "CB_RX_CONS", "CB_BULK_CONS", "CB_TX_WAIT", "CB_RX_RING", "CB_RX_SLOTS",
           "CB_BULK_RING", "CB_BULK_SLOTS", "CB_SLOT_BYTES", "CB_TXDONE_ADDR", "CB_RX_MODE",
           "CB_WATCHDOG_NS", "CB_TX_DONE", "DESC_BASE", "DESC_BYTES", "DESC_PIO", "RX_MODES", "TRAILER_FULL"]

# A locally assigned Myrinet packet type: first byte with the most significant bit clear
# (HW-MYRI); Myricom's registry values are not in our sources.
MYRI_TYPE_DP = 0x0DB5
BULK_PROTO = 0x88B6            # HW-ETH: the second IEEE 802 local experimental EtherType
ROUTE_MAX = MAX_ROUTE_BYTES    # route bytes a frame has room for: 24 (PPro's grid reaches 22 at 1024 nodes)

# Control block in SRAM: words the host writes (doorbells are watched) and reads.
CB_SEND_PROD = 0x00            # host: descriptors posted (a count)            [watched]
CB_RX_CONS = 0x04              # host: kernel-ring slots consumed (a count)     [watched]
CB_BULK_CONS = 0x08            # host: bulk-ring slots consumed (a count)       [watched]
CB_TX_WAIT = 0x0C              # host: 0, 1 a poller waits, 2 an interrupt is wanted [watched]
CB_RX_RING = 0x10
CB_RX_SLOTS = 0x14
CB_BULK_RING = 0x18
CB_BULK_SLOTS = 0x1C
CB_SLOT_BYTES = 0x20
CB_TXDONE_ADDR = 0x24
CB_RX_MODE = 0x28
CB_WATCHDOG_NS = 0x2C
CB_TX_DONE = 0x30              # firmware: sends completed (a count), DMA'd to the host word
DESC_BASE = 0x100
DESC_BYTES = 16                # length | PIO flag, host address, frame offset in the buffer, spare
DESC_PIO = 1 << 31
TRAILER_FULL = 1 << 31
RX_MODES = ("irq", "watchdog", "poll")
MASK32 = 0xFFFFFFFF


class Firmware:
    """The firmware slot's interface; a control program overrides what it uses."""

    name = "none"

    def attach(self, ni) -> None:
        self.ni = ni

    def detach(self, ni) -> None:
        self.ni = None

    def start(self, ni):
        """The host set CTRL_RUN: read the control block, ``ni.watch`` the doorbells."""
        return None

    def on_host_send(self, offset):
        """The host rang the send doorbell (the watched SRAM word at `offset`)."""
        return None

    def on_packet(self, pkt):
        """The receive DMA engine stored a packet: `pkt` is (SRAM offset, length)."""
        return None


class _Ring:
    __slots__ = ("name", "base", "slots", "slot_bytes", "prod", "cons", "pending", "cons_word", "hold_timer",
                 "cons_mark")

    def __init__(self, name, cons_word):
        self.name = name
        self.cons_word = cons_word
        self.base = self.slots = self.slot_bytes = 0
        self.prod = self.cons = 0
        self.pending = deque()
        self.hold_timer = None          # runs while the ring holds packets: is its host still there?
        self.cons_mark = 0              # `cons` when that timer started

    def full(self) -> bool:
        return ((self.prod - self.cons) & MASK32) >= self.slots


cdef inline LanaiNI _board(object fw):
    """The board DP's control program runs on, typed: its handlers reach it by C calls."""
    ni = fw.ni
    if ni is None:
        raise AttributeError("DP's control program is not attached to a board")
    return <LanaiNI> ni


class DPFirmware(Firmware):
    """DP's control program (and the EPOS bulk pipeline's NI half)."""

    name = "dp"

    def __init__(self, profile, ntx: int, abandon_s: float = 1.0):
        self.ntx = ntx
        self.abandon_s = abandon_s
        self.c_poll = profile["lanai.poll_cycles"]
        self.c_desc = profile["lanai.fw_desc_cycles"]
        self.c_xmit = profile["lanai.fw_xmit_cycles"]
        self.c_txdone = profile["lanai.fw_txdone_cycles"]
        self.c_recv = profile["lanai.fw_recv_cycles"]
        self.c_rxdone = profile["lanai.fw_rxdone_cycles"]
        self.ni = None
        self.counters = dict.fromkeys(("sent", "sent_pio", "sent_dma", "bad_descriptors", "received",
                                       "to_kernel", "to_bulk", "held", "dropped_abandoned", "runts", "unknown_type", "no_ring",
                                       "watchdog_interrupts", "rx_interrupts", "done_reports"), 0)

    # -- layout ----------------------------------------------------------------------------

    def attach(self, ni) -> None:
        b = ni.buffer_bytes
        if DESC_BASE + self.ntx * DESC_BYTES > ni.firmware_bytes:
            raise OSError(errno.ENOMEM, f"LANai: {self.ntx} send descriptors do not fit the control area")
        first = ni.firmware_bytes
        nrx = (ni.sram_bytes - first - self.ntx * b) // b
        if nrx < 2:
            raise OSError(errno.ENOMEM, f"LANai: {ni.sram_bytes} bytes of SRAM hold no {self.ntx} send buffers "
                                        f"and two receive buffers of {b} bytes")
        self.ni = ni
        self.buffer_bytes = b
        self.send_buf = [first + i * b for i in range(self.ntx)]
        rx0 = first + self.ntx * b
        self.rx_buffers = [rx0 + i * b for i in range(nrx)]
        self._reset_state()

    def detach(self, ni) -> None:
        self.ni = None

    def _reset_state(self):
        self.seen = 0
        self.done = 0
        self.reported = 0
        self.free_rx = list(reversed(self.rx_buffers))
        self.kring = _Ring("kernel", CB_RX_CONS)
        self.bring = _Ring("bulk", CB_BULK_CONS)
        self.wd_timer = None

    def send_buffer(self, i: int) -> int:
        """SRAM offset of send buffer `i` (the driver PIO-writes frames there)."""
        return self.send_buf[i]

    def start(self, ni):
        self._reset_state()
        rd = ni.rd32
        for ring, base, slots in ((self.kring, CB_RX_RING, CB_RX_SLOTS), (self.bring, CB_BULK_RING, CB_BULK_SLOTS)):
            ring.base = rd(base)
            ring.slots = rd(slots)
            ring.slot_bytes = rd(CB_SLOT_BYTES)
            ring.cons = rd(ring.cons_word)
            ring.prod = ring.cons
        self.seen = rd(CB_SEND_PROD)
        self.done = self.reported = self.seen
        ni.wr32(CB_TX_DONE, self.done)
        self.txdone_addr = rd(CB_TXDONE_ADDR)
        mode = rd(CB_RX_MODE)
        self.rx_mode = RX_MODES[mode] if mode < len(RX_MODES) else "irq"
        self.watchdog_s = rd(CB_WATCHDOG_NS) * 1e-9
        ni.watch(CB_SEND_PROD, self.on_host_send)
        ni.watch(CB_RX_CONS, self.on_consumed)
        ni.watch(CB_BULK_CONS, self.on_consumed)
        ni.watch(CB_TX_WAIT, self.on_tx_wait)
        self._arm()

    # -- send side ---------------------------------------------------------------------

    def on_host_send(self, _off):
        """The host bumped the producer word: take every new descriptor."""
        cdef LanaiNI ni = _board(self)
        cost = self.c_poll
        while True:
            prod = ni.rd32(CB_SEND_PROD)
            if prod == self.seen & MASK32 or ((self.seen - self.done) & MASK32) >= self.ntx:
                return
            yield cost + self.c_desc
            cost = 0
            i = self.seen % self.ntx
            self.seen = (self.seen + 1) & MASK32
            d = DESC_BASE + DESC_BYTES * i
            w0 = ni.rd32(d)
            length = w0 & 0xFFFF
            off = ni.rd32(d + 8)
            if length == 0 or off + length > self.buffer_bytes:
                self.counters["bad_descriptors"] += 1
                self._complete()
                continue
            at = self.send_buf[i] + off
            if w0 & DESC_PIO:
                self.counters["sent_pio"] += 1
                yield self.c_xmit
                ni.net_send(at, length, self.on_sent, i)
            else:
                self.counters["sent_dma"] += 1
                ni.host_dma(False, ni.rd32(d + 4), at, length, self.on_fetched, (at, length, i))

    def on_fetched(self, item):
        yield self.c_xmit
        at, length, i = item
        _board(self).net_send(at, length, self.on_sent, i)

    def on_sent(self, _i):
        yield self.c_txdone
        self.counters["sent"] += 1
        self._complete()
        if ((self.seen - self.done) & MASK32) == self.ntx - 1 and _board(self).rd32(CB_SEND_PROD) != self.seen:
            _board(self).post(self.on_host_send, CB_SEND_PROD)     # the host is ahead of a full ring

    def _complete(self):
        cdef LanaiNI ni = _board(self)
        self.done = (self.done + 1) & MASK32
        ni.wr32(CB_TX_DONE, self.done)
        wait = ni.rd32(CB_TX_WAIT)
        if wait or ((self.done - self.reported) & MASK32) >= max(1, self.ntx // 2):
            self._report(wait)

    def _report(self, wait):
        self.reported = self.done
        self.counters["done_reports"] += 1
        _board(self).host_dma(True, self.txdone_addr, CB_TX_DONE, 4, self.on_reported if wait >= 2 else None, None)

    def on_reported(self, _):
        yield self.c_txdone
        _board(self).raise_host(ISR_TX)

    def on_tx_wait(self, _off):
        yield self.c_poll
        wait = _board(self).rd32(CB_TX_WAIT)
        if wait:
            self._report(wait)

    # -- receive side ------------------------------------------------------------------

    def _arm(self):
        cdef LanaiNI ni = _board(self)
        if not ni.rx_armed and self.free_rx:
            ni.rx_arm(self.free_rx.pop(), self.buffer_bytes - 4)

    def _free(self, buf):
        self.free_rx.append(buf)
        self._arm()

    def on_packet(self, pkt):
        buf, n = pkt
        cdef LanaiNI ni = _board(self)
        self._arm()
        yield self.c_recv
        self.counters["received"] += 1
        if n < 4:
            self.counters["runts"] += 1
            self._free(buf)
            return
        if ni.rd16be(buf) != MYRI_TYPE_DP:
            self.counters["unknown_type"] += 1
            self._free(buf)
            return
        ring = self.bring if ni.rd16be(buf + 2) == BULK_PROTO else self.kring
        if ring.slots == 0 or ring.slot_bytes < n + 4:
            self.counters["no_ring"] += 1
            self._free(buf)
            return
        if ring.pending or ring.full():
            self.counters["held"] += 1
            ring.pending.append((buf, n))
            if ring.hold_timer is None and self.abandon_s > 0:
                self._watch_holder(ring)
            return
        self._to_host(ring, buf, n)

    def _to_host(self, ring, buf, n):
        cdef LanaiNI ni = _board(self)
        slot = ring.prod % ring.slots
        ring.prod = (ring.prod + 1) & MASK32
        end = ring.base + (slot + 1) * ring.slot_bytes
        ni.wr32(buf + n, TRAILER_FULL | n)            # the length word goes after the packet
        self.counters["to_bulk" if ring is self.bring else "to_kernel"] += 1
        ni.host_dma(True, end - 4 - n, buf, n + 4, self.on_delivered, (ring, buf))

    def on_delivered(self, item):
        ring, buf = item
        yield self.c_rxdone
        self._free(buf)
        if ring is not self.kring:
            return
        if self.rx_mode == "irq":
            self.counters["rx_interrupts"] += 1
            _board(self).raise_host(ISR_RX)
        elif self.rx_mode == "watchdog" and self.wd_timer is None:
            self.wd_timer = _board(self).timer(self.watchdog_s, self.on_watchdog)

    def on_watchdog(self, _):
        self.wd_timer = None
        yield self.c_poll
        if _board(self).rd32(CB_RX_CONS) != self.kring.prod:
            self.counters["watchdog_interrupts"] += 1
            _board(self).raise_host(ISR_RX)

    def _watch_holder(self, ring):
        ring.cons_mark = ring.cons
        ring.hold_timer = _board(self).timer(self.abandon_s, self.on_hold_timeout, ring)

    def on_hold_timeout(self, ring):
        """A ring has held packets for `abandon_s`: if its host consumed nothing meanwhile,
        nobody will, and the buffers it holds go back to the receiver (counted)."""
        ring.hold_timer = None
        yield self.c_poll
        if not ring.pending:
            return
        if ring.cons != ring.cons_mark:
            self._watch_holder(ring)              # the host is slow, not gone: keep holding
            return
        self.counters["dropped_abandoned"] += len(ring.pending)
        while ring.pending:
            buf, _n = ring.pending.popleft()
            yield self.c_rxdone
            self._free(buf)

    def on_consumed(self, off):
        ring = self.kring if off == CB_RX_CONS else self.bring
        yield self.c_poll
        ring.cons = _board(self).rd32(off)
        while ring.pending and not ring.full():
            buf, n = ring.pending.popleft()
            yield self.c_rxdone
            self._to_host(ring, buf, n)

    def stats(self) -> dict:
        out = dict(self.counters)
        if self.ni is not None:
            out.update(free_rx_buffers=len(self.free_rx), rx_buffers=len(self.rx_buffers),
                       kernel_ring_held=len(self.kring.pending), bulk_ring_held=len(self.bring.pending),
                       sends_outstanding=(self.seen - self.done) & MASK32)
        return out

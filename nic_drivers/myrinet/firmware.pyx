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

DP's control program runs on every Myrinet message, so it is typed: a ``cdef class``
(``firmware.pxd``) whose handlers are `NiHandler`s the board starts by a C call and
whose work is one `kernelsim._path.Path` state machine (`_FwPath`) the board steps by a
C call -- the same NI cycles yielded at the same points as the generators they replace
(each handler's docstring below keeps the generator, for reading). LCI's and FM's
control programs stay Python generators on the same board.

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
import errno
from collections import deque

cimport cython

from kernelsim._path cimport Path, reuse
from nic_drivers.myrinet._model import ISR_RX, ISR_TX
from nic_drivers.myrinet._model cimport LanaiNI, NiHandler
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


# The control block's offsets, typed for the C code (a module global is a dict lookup per use).
cdef Py_ssize_t _CB_SEND_PROD = CB_SEND_PROD, _CB_RX_CONS = CB_RX_CONS, _CB_TX_WAIT = CB_TX_WAIT
cdef Py_ssize_t _CB_TX_DONE = CB_TX_DONE, _DESC_BASE = DESC_BASE, _DESC_BYTES = DESC_BYTES
cdef unsigned int _ISR_RX = ISR_RX, _ISR_TX = ISR_TX
cdef unsigned int _DESC_PIO = DESC_PIO, _TRAILER_FULL = TRAILER_FULL
cdef int _MYRI_TYPE_DP = MYRI_TYPE_DP, _BULK_PROTO = BULK_PROTO
cdef enum:
    MODE_IRQ
    MODE_WATCHDOG
    MODE_POLL

COUNTERS = ("sent", "sent_pio", "sent_dma", "bad_descriptors", "received", "to_kernel", "to_bulk", "held",
            "dropped_abandoned", "runts", "unknown_type", "no_ring", "watchdog_interrupts", "rx_interrupts",
            "done_reports")


cdef class Firmware:
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


cdef class _Ring:
    def __init__(self, str name, Py_ssize_t cons_word):
        self.name = name
        self.cons_word = cons_word
        self.pending = deque()
        self.hold_timer = None          # runs while the ring holds packets: is its host still there?

    cdef bint full(self):
        return <unsigned int> (self.prod - self.cons) >= self.slots


# What a handler path runs (`_FwPath.kind`): one per generator of the Python version.
cdef enum:
    K_HOST_SEND         # the send doorbell: take every new descriptor
    K_FETCHED           # a DMA'd frame is in the send buffer
    K_SENT              # the send DMA engine is done with a frame
    K_REPORTED          # the completion count reached the host: interrupt it
    K_TX_WAIT           # the host says it waits for completions
    K_PACKET            # the receive DMA engine stored a packet
    K_DELIVERED         # a packet reached its host ring
    K_WATCHDOG          # the polling watchdog's timer
    K_HOLD_TIMEOUT      # a ring has held packets for abandon_s
    K_CONSUMED          # the host consumed ring slots


@cython.final
cdef class _FwPath(Path):
    """One run of one of DP's handlers, a state machine the board steps: ``step``
    returns 1 with the NI cycles to spend before it goes on, 0 when it is over."""
    cdef DPFirmware fw
    cdef int kind, state
    cdef double cost
    cdef Py_ssize_t i, at, length, buf, n
    cdef _Ring ring

    cdef int step(self, double* cost) except -1:
        cdef DPFirmware fw = self.fw
        cdef LanaiNI ni = fw._ni()
        cdef int k = self.kind
        if k == K_HOST_SEND:
            return _host_send(fw, ni, self, cost)
        if k == K_SENT:
            if self.state == 0:
                self.state = 1
                cost[0] = fw.c_txdone
                return 1
            fw.n_sent += 1
            fw._complete()
            if <unsigned int> (fw.seen - fw.done) == fw.ntx - 1 and ni.rd32(_CB_SEND_PROD) != fw.seen:
                ni.post_path(_path(fw, K_HOST_SEND), False)     # the host is ahead of a full ring
            return 0
        if k == K_PACKET:
            return _on_packet(fw, ni, self, cost)
        if k == K_DELIVERED:
            if self.state == 0:
                self.state = 1
                cost[0] = fw.c_rxdone
                return 1
            fw._free(self.buf)
            if self.ring is not fw.kring:
                return 0
            if fw.rx_code == MODE_IRQ:
                fw.n_rx_interrupts += 1
                ni.raise_host(_ISR_RX)
            elif fw.rx_code == MODE_WATCHDOG and fw.wd_timer is None:
                fw.wd_timer = ni.timer(fw.watchdog_s, fw.on_watchdog)
            return 0
        if k == K_CONSUMED:
            return _on_consumed(fw, ni, self, cost)
        if k == K_FETCHED:
            if self.state == 0:
                self.state = 1
                cost[0] = fw.c_xmit
                return 1
            ni.net_send(self.at, self.length, _sent(fw, self.i), None)
            return 0
        if k == K_REPORTED:
            if self.state == 0:
                self.state = 1
                cost[0] = fw.c_txdone
                return 1
            ni.raise_host(_ISR_TX)
            return 0
        if k == K_TX_WAIT:
            if self.state == 0:
                self.state = 1
                cost[0] = fw.c_poll
                return 1
            wait = ni.rd32(_CB_TX_WAIT)
            if wait:
                fw._report(wait)
            return 0
        if k == K_WATCHDOG:
            if self.state == 0:
                fw.wd_timer = None
                self.state = 1
                cost[0] = fw.c_poll
                return 1
            if ni.rd32(_CB_RX_CONS) != fw.kring.prod:
                fw.n_watchdog_interrupts += 1
                ni.raise_host(_ISR_RX)
            return 0
        return _on_hold_timeout(fw, self, cost)


# Spare handler paths, made again once nothing else holds them (kernelsim._path.reuse):
# a round trip runs ten; a Cython freelist cannot serve them, as Path lives in another module.
cdef list _paths = [None] * 8


cdef inline _FwPath _path(DPFirmware fw, int kind):
    cdef _FwPath p = <_FwPath> reuse(_paths, _FwPath)
    p.fw = fw
    p.kind = kind
    p.state = 0
    p.cost = 0.0
    p.i = p.at = p.length = p.buf = p.n = 0
    p.ring = None
    return p


cdef inline _FwPath _sent(DPFirmware fw, Py_ssize_t i):
    cdef _FwPath p = _path(fw, K_SENT)
    p.i = i
    return p


cdef int _host_send(DPFirmware fw, LanaiNI ni, _FwPath p, double* cost) except -1:
    """on_host_send: the host bumped the producer word: take every new descriptor::

        cost = self.c_poll
        while True:
            prod = ni.rd32(CB_SEND_PROD)
            if prod == self.seen & MASK32 or ((self.seen - self.done) & MASK32) >= self.ntx:
                return
            yield cost + self.c_desc                                   # state 1
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
                yield self.c_xmit                                          # state 2
                ni.net_send(at, length, self.on_sent, i)
            else:
                self.counters["sent_dma"] += 1
                ni.host_dma(False, ni.rd32(d + 4), at, length, self.on_fetched, (at, length, i))
    """
    cdef unsigned int w0
    cdef Py_ssize_t d, length, off
    if p.state == 0:
        p.cost = fw.c_poll
    elif p.state == 2:
        ni.net_send(p.at, p.length, _sent(fw, p.i), None)
    while True:
        if p.state != 1:
            if ni.rd32(_CB_SEND_PROD) == fw.seen or <unsigned int> (fw.seen - fw.done) >= fw.ntx:
                return 0
            p.state = 1
            cost[0] = p.cost + fw.c_desc
            p.cost = 0.0
            return 1
        p.i = fw.seen % fw.ntx
        fw.seen += 1
        d = _DESC_BASE + _DESC_BYTES * p.i
        w0 = ni.rd32(d)
        length = w0 & 0xFFFF
        off = ni.rd32(d + 8)
        if length == 0 or off + length > fw.buffer_bytes:
            fw.n_bad_descriptors += 1
            fw._complete()
            p.state = 3
            continue
        p.at = fw.send0 + p.i * fw.buffer_bytes + off
        p.length = length
        if w0 & _DESC_PIO:
            fw.n_sent_pio += 1
            p.state = 2
            cost[0] = fw.c_xmit
            return 1
        fw.n_sent_dma += 1
        fetched = _path(fw, K_FETCHED)
        fetched.at = p.at
        fetched.length = length
        fetched.i = p.i
        ni.host_dma(False, ni.rd32(d + 4), p.at, length, fetched, None)
        p.state = 3


cdef int _on_packet(DPFirmware fw, LanaiNI ni, _FwPath p, double* cost) except -1:
    """on_packet: the receive DMA engine stored `n` bytes at SRAM[buf]::

        self._arm()
        yield self.c_recv
        self.counters["received"] += 1
        if n < 4: runts, free, return
        if ni.rd16be(buf) != MYRI_TYPE_DP: unknown_type, free, return
        ring = self.bring if ni.rd16be(buf + 2) == BULK_PROTO else self.kring
        if ring.slots == 0 or ring.slot_bytes < n + 4: no_ring, free, return
        if ring.pending or ring.full():
            held; ring.pending.append((buf, n)); start the hold timer if none; return
        self._to_host(ring, buf, n)
    """
    cdef _Ring ring
    cdef Py_ssize_t buf = p.buf, n = p.n
    if p.state == 0:
        fw._arm()
        p.state = 1
        cost[0] = fw.c_recv
        return 1
    fw.n_received += 1
    if n < 4:
        fw.n_runts += 1
        fw._free(buf)
        return 0
    if ni.rd16be(buf) != _MYRI_TYPE_DP:
        fw.n_unknown_type += 1
        fw._free(buf)
        return 0
    ring = fw.bring if ni.rd16be(buf + 2) == _BULK_PROTO else fw.kring
    if ring.slots == 0 or ring.slot_bytes < n + 4:
        fw.n_no_ring += 1
        fw._free(buf)
        return 0
    if ring.pending or ring.full():
        fw.n_held += 1
        ring.pending.append((buf, n))
        if ring.hold_timer is None and fw.abandon_s > 0:
            fw._watch_holder(ring)
        return 0
    fw._to_host(ring, buf, n)
    return 0


cdef int _on_consumed(DPFirmware fw, LanaiNI ni, _FwPath p, double* cost) except -1:
    """on_consumed: the host bumped a ring's consumer word (`p.i`)::

        ring = self.kring if off == CB_RX_CONS else self.bring
        yield self.c_poll
        ring.cons = ni.rd32(off)
        while ring.pending and not ring.full():
            buf, n = ring.pending.popleft()
            yield self.c_rxdone
            self._to_host(ring, buf, n)
    """
    cdef _Ring ring = p.ring
    if p.state == 0:
        p.state = 1
        cost[0] = fw.c_poll
        return 1
    if p.state == 1:
        ring.cons = ni.rd32(p.i)
    else:
        fw._to_host(ring, p.buf, p.n)
    if ring.pending and not ring.full():
        p.buf, p.n = ring.pending.popleft()
        p.state = 2
        cost[0] = fw.c_rxdone
        return 1
    return 0


cdef int _on_hold_timeout(DPFirmware fw, _FwPath p, double* cost) except -1:
    """on_hold_timeout: a ring has held packets for `abandon_s`: if its host consumed
    nothing meanwhile, nobody will, and the buffers it holds go back to the receiver
    (counted)::

        ring.hold_timer = None
        yield self.c_poll
        if not ring.pending: return
        if ring.cons != ring.cons_mark:
            self._watch_holder(ring)              # the host is slow, not gone: keep holding
            return
        self.counters["dropped_abandoned"] += len(ring.pending)
        while ring.pending:
            buf, _n = ring.pending.popleft()
            yield self.c_rxdone
            self._free(buf)
    """
    cdef _Ring ring = p.ring
    if p.state == 0:
        ring.hold_timer = None
        p.state = 1
        cost[0] = fw.c_poll
        return 1
    if p.state == 1:
        if not ring.pending:
            return 0
        if ring.cons != ring.cons_mark:
            fw._watch_holder(ring)
            return 0
        fw.n_dropped_abandoned += len(ring.pending)
    else:
        fw._free(p.buf)
    if ring.pending:
        p.buf, p.n = ring.pending.popleft()
        p.state = 2
        cost[0] = fw.c_rxdone
        return 1
    return 0


@cython.final
cdef class _Handler(NiHandler):
    """A handler of DP's the board starts (a watched word, a timer, the receive hook)."""
    cdef DPFirmware fw
    cdef int kind

    cdef object start(self, object arg):
        cdef _FwPath p = _path(self.fw, self.kind)
        if self.kind == K_PACKET:
            p.buf, p.n = arg
        elif self.kind == K_CONSUMED:
            p.i = arg
            p.ring = self.fw.kring if p.i == _CB_RX_CONS else self.fw.bring
        elif self.kind == K_HOLD_TIMEOUT:
            p.ring = <_Ring?> arg
        return p

    cdef object start_packet(self, Py_ssize_t off, Py_ssize_t n):
        cdef _FwPath p
        if self.kind != K_PACKET:
            return None
        p = _path(self.fw, K_PACKET)        # (a spare: taking it is all its start does)
        p.buf = off
        p.n = n
        return p


cdef _Handler _handler(DPFirmware fw, int kind):
    cdef _Handler h = _Handler.__new__(_Handler)
    h.fw = fw
    h.kind = kind
    return h


cdef class DPFirmware(Firmware):
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
        self.board = None
        self.on_host_send = _handler(self, K_HOST_SEND)
        self.on_consumed = _handler(self, K_CONSUMED)
        self.on_tx_wait = _handler(self, K_TX_WAIT)
        self.on_watchdog = _handler(self, K_WATCHDOG)
        self.on_hold_timeout = _handler(self, K_HOLD_TIMEOUT)
        self._on_packet = _handler(self, K_PACKET)

    cdef LanaiNI _ni(self):
        if self.board is None:
            raise AttributeError("DP's control program is not attached to a board")
        return self.board

    @property
    def counters(self) -> dict:
        """What the control program counted, by name (a snapshot)."""
        return dict(zip(COUNTERS, (self.n_sent, self.n_sent_pio, self.n_sent_dma, self.n_bad_descriptors,
                                   self.n_received, self.n_to_kernel, self.n_to_bulk, self.n_held,
                                   self.n_dropped_abandoned, self.n_runts, self.n_unknown_type, self.n_no_ring,
                                   self.n_watchdog_interrupts, self.n_rx_interrupts, self.n_done_reports)))

    @property
    def on_packet(self):
        """The receive hook the board posts for every good packet (this program's own
        handler unless replaced)."""
        return self._on_packet

    @on_packet.setter
    def on_packet(self, hook):
        self._on_packet = hook
        self._tell_board()

    cdef _tell_board(self):
        # The board keeps the hook it posts per packet (no attribute lookup each), this
        # program's only while it is the board's; a subclass may define `on_packet` any
        # way it likes, so its board looks it up per packet as for any other program.
        if self.board is not None and type(self) is DPFirmware and (
                self.board.firmware is self or self.board.firmware is None):   # None: being loaded
            self.board._on_packet = self._on_packet

    @property
    def rx_mode(self) -> str:
        return RX_MODES[self.rx_code]

    # -- layout ----------------------------------------------------------------------------

    def attach(self, ni) -> None:
        cdef LanaiNI board = <LanaiNI?> ni
        b = board.buffer_bytes
        if _DESC_BASE + self.ntx * _DESC_BYTES > board.firmware_bytes:
            raise OSError(errno.ENOMEM, f"LANai: {self.ntx} send descriptors do not fit the control area")
        first = board.firmware_bytes
        nrx = (board.sram_bytes - first - self.ntx * b) // b
        if nrx < 2:
            raise OSError(errno.ENOMEM, f"LANai: {board.sram_bytes} bytes of SRAM hold no {self.ntx} send buffers "
                                        f"and two receive buffers of {b} bytes")
        self.ni = ni
        self.board = board
        self.buffer_bytes = b
        self.send0 = first
        self.send_buf = [first + i * b for i in range(self.ntx)]
        rx0 = first + self.ntx * b
        self.rx_buffers = [rx0 + i * b for i in range(nrx)]
        self._reset_state()
        self._tell_board()

    def detach(self, ni) -> None:
        if self.board is not None:
            self.board._on_packet = None
        self.ni = None
        self.board = None

    cdef _reset_state(self):
        self.seen = 0
        self.done = 0
        self.reported = 0
        self.free_rx = list(reversed(self.rx_buffers))
        self.kring = _Ring("kernel", _CB_RX_CONS)
        self.bring = _Ring("bulk", CB_BULK_CONS)
        self.wd_timer = None

    def send_buffer(self, Py_ssize_t i) -> int:
        """SRAM offset of send buffer `i` (the driver PIO-writes frames there)."""
        return self.buffer_at(i)

    cdef Py_ssize_t buffer_at(self, Py_ssize_t i) except -1:
        if not 0 <= i < self.ntx:
            raise IndexError(f"send buffer {i} of {self.ntx}")
        return self.send0 + i * self.buffer_bytes

    def start(self, ni):
        cdef LanaiNI board = self._ni()
        cdef _Ring ring
        self._reset_state()
        for ring, base, slots in ((self.kring, CB_RX_RING, CB_RX_SLOTS), (self.bring, CB_BULK_RING, CB_BULK_SLOTS)):
            ring.base = board.rd32(base)
            ring.slots = board.rd32(slots)
            ring.slot_bytes = board.rd32(CB_SLOT_BYTES)
            ring.cons = board.rd32(ring.cons_word)
            ring.prod = ring.cons
        self.seen = board.rd32(_CB_SEND_PROD)
        self.done = self.reported = self.seen
        board.wr32(_CB_TX_DONE, self.done)
        self.txdone_addr = board.rd32(CB_TXDONE_ADDR)
        mode = board.rd32(CB_RX_MODE)
        self.rx_code = mode if mode < len(RX_MODES) else MODE_IRQ
        self.watchdog_s = board.rd32(CB_WATCHDOG_NS) * 1e-9
        board.watch(_CB_SEND_PROD, self.on_host_send)
        board.watch(_CB_RX_CONS, self.on_consumed)
        board.watch(CB_BULK_CONS, self.on_consumed)
        board.watch(_CB_TX_WAIT, self.on_tx_wait)
        self._arm()

    # -- send side ---------------------------------------------------------------------

    cdef int _complete(self) except -1:
        """A send is complete: count it in SRAM; report to the host if it waits or every
        half ring."""
        cdef LanaiNI ni = self._ni()
        cdef unsigned int wait
        cdef Py_ssize_t half = self.ntx // 2
        self.done += 1
        ni.wr32(_CB_TX_DONE, self.done)
        wait = ni.rd32(_CB_TX_WAIT)
        if wait or <unsigned int> (self.done - self.reported) >= (half if half > 1 else 1):
            self._report(wait)
        return 0

    cdef int _report(self, unsigned int wait) except -1:
        """DMA the completion count to the host word (then interrupt it if it asked)."""
        self.reported = self.done
        self.n_done_reports += 1
        self._ni().host_dma(True, self.txdone_addr, _CB_TX_DONE, 4, _path(self, K_REPORTED) if wait >= 2 else None,
                            None)
        return 0

    # -- receive side ------------------------------------------------------------------

    cdef int _arm(self) except -1:
        cdef LanaiNI ni = self._ni()
        if not ni.rx_armed and self.free_rx:
            ni.rx_arm(self.free_rx.pop(), self.buffer_bytes - 4)
        return 0

    cdef int _free(self, object buf) except -1:
        self.free_rx.append(buf)
        self._arm()
        return 0

    cdef int _to_host(self, _Ring ring, object buf, Py_ssize_t n) except -1:
        """Put the packet at the end of the ring's next slot, its length word after it."""
        cdef LanaiNI ni = self._ni()
        cdef Py_ssize_t at = buf
        cdef unsigned int slot = ring.prod % ring.slots
        cdef Py_ssize_t end = ring.base + (slot + 1) * <Py_ssize_t> ring.slot_bytes
        cdef _FwPath delivered = _path(self, K_DELIVERED)
        ring.prod += 1
        ni.wr32(at + n, _TRAILER_FULL | <unsigned int> n)      # the length word goes after the packet
        if ring is self.bring:
            self.n_to_bulk += 1
        else:
            self.n_to_kernel += 1
        delivered.ring = ring
        delivered.buf = at
        ni.host_dma(True, end - 4 - n, at, n + 4, delivered, None)
        return 0

    cdef int _watch_holder(self, _Ring ring) except -1:
        ring.cons_mark = ring.cons
        ring.hold_timer = self._ni().timer(self.abandon_s, self.on_hold_timeout, ring)
        return 0

    def stats(self) -> dict:
        out = self.counters
        if self.ni is not None:
            out.update(free_rx_buffers=len(self.free_rx), rx_buffers=len(self.rx_buffers),
                       kernel_ring_held=len(self.kring.pending), bulk_ring_held=len(self.bring.pending),
                       sends_outstanding=<unsigned int> (self.seen - self.done))
        return out

# cython: language_level=3, boundscheck=False, wraparound=False
"""The DEC 21140 "Tulip" Fast Ethernet controller: the hardware side.

Structure after QEMU's ``hw/net/tulip.c`` -- register file with a write-semantics
table, transmit and receive ring walkers, a DMA copier, the CSR5/CSR7 interrupt
summary, a backend adapter to the medium -- plus what QEMU leaves out: time. Every
bus transaction and every byte on the wire takes the time the profile says, so the
driver's and DP's choices (burst length, store-and-forward, interrupt on completion)
move the modeled figures as they would on the card (HW-21140).

Descriptors and buffers live in the node's physical memory and are reached only by
DMA through the addresses the driver wrote into CSR3/CSR4 and the descriptors.
"""
from kernelsim._engine cimport Engine, try_advance
from kernelsim._physmem cimport PhysMem, mem_rd32, mem_wr32, span_check, span_ok
from kernelsim.media._port cimport FramePort
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.list cimport PyList_GET_ITEM
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, memset
from nic_drivers._nic cimport NicModel, nic_dma

# What each engine event of the card is (EventTarget.on_event's `what`).
DEF TX_FETCHED = 0
DEF TX_LOADED = 1
DEF TX_WIRE_DONE = 2
DEF RX_DONE = 16        # and above: a received frame's DMA done; the rest tells which (RxDma.tag)
DEF RX_TAGS = 1 << 24   # tags in use at once: far more than frames in flight
DEF TX_SETUP_DONE = 4

DEF BROADCAST_MAC48 = 0xFFFFFFFFFFFF


cdef inline unsigned long long _mac48(const unsigned char* p) noexcept nogil:
    """A MAC address as one integer, its first byte lowest (the perfect filter's key)."""
    return (p[0] | (<unsigned long long> p[1] << 8) | (<unsigned long long> p[2] << 16)
            | (<unsigned long long> p[3] << 24) | (<unsigned long long> p[4] << 32) | (<unsigned long long> p[5] << 40))

# The register and descriptor bits are C constants declared in _model.pxd.


cdef class Dec21140(NicModel):
    """One 21140 on one node's PCI bus."""
    vendor_id = 0x1011
    device_id = 0x0009

    def __cinit__(self, Engine engine, PhysMem mem, bytes hwaddr, profile):
        self._init_nic(engine, mem, profile, True)
        self.hwaddr = hwaddr
        self.port = None
        self.tx_poll_s = profile["nic.tx_poll_s"]
        self._rxq = NULL
        self._rxq_cap = self._rxq_head = self._rxq_len = 0
        self._rxq_tag = 0
        self._d_boxes = [None] * 64
        self._reset()

    def __dealloc__(self):
        free(self._rxq)

    cdef _reset(self):
        cdef int i
        for i in range(16):
            self.csr[i] = 0
        self.csr[0] = 0xFE000000
        self.tx_state = TS_STOPPED
        self.rx_state = RS_STOPPED
        self.tx_cur = 0
        self.rx_cur = 0
        self.tx_pending_kick = False
        self.rx_free_at = 0.0
        self.burst_bytes = 0
        self._line = False
        self._nperfect = 0
        self._rxq_live = 0               # frames in flight finish, but hold no descriptor

    # -- register file ---------------------------------------------------------------

    cpdef unsigned int csr_read(self, int n):
        cdef unsigned int v
        if not 0 <= n < 16:
            return 0xFFFFFFFF
        v = self.csr[n]
        if n == 5:
            v = (v & ~(<unsigned int> 0x7 << 17) & ~(<unsigned int> 0x7 << 20)) \
                | (<unsigned int> self.rx_state << 17) | (<unsigned int> self.tx_state << 20)
        elif n == 8:
            self.csr[8] = 0               # missed-frame counter clears on read
        return v

    cpdef csr_write(self, int n, unsigned int value):
        """The write-semantics table of CSR list of HW-21140."""
        if n == 0:
            if value & SWR:
                self._reset()
                return
            self.csr[0] = value
            pbl = (value >> 8) & 0x3F
            self.burst_bytes = pbl * 4      # 0 = unlimited bursts
        elif n == 1:
            self._tx_kick()
        elif n == 2:
            if self.rx_state == RS_SUSPENDED:
                self.rx_state = RS_WAITING
        elif n == 3:
            self.csr[3] = value
            self.rx_cur = value
        elif n == 4:
            self.csr[4] = value
            self.tx_cur = value
        elif n == 5:
            self.csr[5] &= ~(value & W1C_MASK)
            self._update_irq()
        elif n == 6:
            old = self.csr[6]
            self.csr[6] = value
            if value & SR and not old & SR:
                self.rx_state = RS_WAITING
            elif not value & SR:
                self.rx_state = RS_STOPPED
            if value & ST and not old & ST:
                self.tx_state = TS_SUSPENDED
                self._tx_kick()
            elif not value & ST:
                self.tx_state = TS_STOPPED
        elif n == 7:
            self.csr[7] = value
            self._update_irq()
        elif 9 <= n < 16:
            self.csr[n] = value

    # -- interrupt summary -------------------------------------------------------------

    cdef _raise(self, unsigned int bits, bint last=False):
        # `last`: the card's event does nothing more at this instant (NicModel._set_line)
        self.csr[5] |= bits
        self._update_irq(last)

    cdef _update_irq(self, bint last=False):
        cdef unsigned int s = self.csr[5] & ~(<unsigned int> (NIS | AIS))
        cdef unsigned int en = self.csr[7]
        if s & en & NIS_SOURCES:
            s |= NIS
        if s & en & AIS_SOURCES:
            s |= AIS
        self.csr[5] = (self.csr[5] & ~(<unsigned int> 0x7 << 17) & ~(<unsigned int> 0x7 << 20)) | (s & 0x1FFFF)
        self._set_line((s & en & (NIS | AIS)) != 0, last)

    # -- transmit ring walker ----------------------------------------------------------

    cdef _tx_kick(self):
        if not self.csr[6] & ST:
            return
        if self.tx_state == TS_SUSPENDED:
            self.tx_state = TS_FETCHING
            self.engine.post(self.engine.now + (self.tx_poll_s + nic_dma(self, 16)), self, TX_FETCHED, None)
        else:
            self.tx_pending_kick = True       # busy: look again when this frame is done

    cdef Py_ssize_t _next_desc(self, Py_ssize_t cur, unsigned int des1, unsigned int end_bit,
                               unsigned int chain_bit, Py_ssize_t base) except? -1:
        if des1 & end_bit:
            return base
        if des1 & chain_bit:
            return mem_rd32(self.mem, cur + 12)
        return cur + 16 + ((self.csr[0] >> 2) & 0x1F) * 4

    cdef int _then(self, double t, int what, Py_ssize_t d) except -1:
        """The last thing one of the card's transmit events does: its next one, at `t`, on
        descriptor `d`. Run at once when nothing else can happen before it
        (`Engine.advance`: the same effects at the same instant, in the same order), posted
        otherwise. (A frame's fetch, load and next fetch were three events each.)"""
        if try_advance(self.engine, t):
            if what == TX_FETCHED:
                self._tx_fetched()
            elif what == TX_LOADED:
                self._tx_loaded(d)
            else:
                self._tx_setup_done(d)
        else:
            self.engine.post(t, self, what, None if what == TX_FETCHED else self._boxed(d))
        return 0

    cdef int on_event(self, int what, object arg) except -1:
        if what == TX_FETCHED:
            self._tx_fetched()
        elif what == TX_LOADED:
            self._tx_loaded(<Py_ssize_t> arg)
        elif what == TX_WIRE_DONE:
            self._tx_wire_done(<Py_ssize_t> arg, True)
        elif what >= RX_DONE:
            self._rx_done(what)
        else:
            self._tx_setup_done(<Py_ssize_t> arg)
        return 0

    cdef object _boxed(self, Py_ssize_t d):
        """Descriptor address `d` as the Python int an event carries: made once per
        descriptor (direct-mapped by its 16-byte index; a ring's are consecutive), not
        twice per frame (an address is above 256: an allocation)."""
        cdef Py_ssize_t i = (d >> 4) & 63
        o = <object> PyList_GET_ITEM(self._d_boxes, i)
        if o is None or <Py_ssize_t> o != d:
            o = d
            self._d_boxes[i] = o
        return o

    cdef _tx_fetched(self):
        cdef Py_ssize_t d = self.tx_cur
        cdef unsigned int des0 = mem_rd32(self.mem, d)
        cdef unsigned int des1
        cdef Py_ssize_t length
        if not self.csr[6] & ST:
            self.tx_state = TS_STOPPED
            return
        if not des0 & OWN:
            self.tx_state = TS_SUSPENDED
            self._raise(TU)
            if self.tx_pending_kick:
                self.tx_pending_kick = False
                self._tx_kick()
            return
        self.tx_pending_kick = False
        des1 = mem_rd32(self.mem, d + 4)
        length = des1 & 0x7FF
        self.tx_state = TS_READING
        if des1 & TDES1_SET:
            # Setup frame: loads the address filter; we accept and complete it.
            self._then(self.engine.now + nic_dma(self, length), TX_SETUP_DONE, d)
            return
        if self.engine.realtime:
            # Real time: the DMA is done at once and nothing of this card's comes between
            # (its events run in the order posted), so the frame goes on as this event.
            self._tx_loaded(d)
            return
        # Store and forward waits for the whole frame; otherwise the wire starts once
        # the FIFO holds the transmit threshold (128 bytes at 100 Mb/s).
        self._then(self.engine.now + nic_dma(self, length if self.csr[6] & SF else min(length, 128)), TX_LOADED, d)

    cdef _tx_setup_done(self, Py_ssize_t d):
        """Load the 16-entry perfect filter: each address in three longwords' low halves."""
        cdef Py_ssize_t buf = mem_rd32(self.mem, d + 8), i, w
        cdef unsigned int des1 = mem_rd32(self.mem, d + 4)
        cdef unsigned long long mac
        self._nperfect = 0
        if (des1 & 0x7FF) >= 192:
            for i in range(16):
                mac = 0
                for w in range(3):          # the address's bytes in order, low half of each longword
                    mac |= (<unsigned long long> (mem_rd32(self.mem, buf + 12 * i + 4 * w) & 0xFFFF)) << (16 * w)
                self._perfect[i] = mac
            self._nperfect = 16
        self._tx_complete(d, des1)
        self._tx_advance(d, self.engine.now)

    cdef _tx_loaded(self, Py_ssize_t d):
        """The frame is in the FIFO (store and forward): put it on the wire."""
        cdef unsigned int des1 = mem_rd32(self.mem, d + 4)
        cdef Py_ssize_t length = des1 & 0x7FF
        cdef Py_ssize_t buf = mem_rd32(self.mem, d + 8)
        cdef Py_ssize_t padded = length if length >= ETH_MIN_FRAME else ETH_MIN_FRAME
        cdef double start, end
        cdef bytes frame
        cdef char* out
        if not des1 & TDES1_FS or not des1 & TDES1_LS or length < 14:
            # Multi-descriptor frames are not used by our driver; refuse them loudly.
            mem_wr32(self.mem, d, TDES0_ES)
            self._raise(TI if des1 & TDES1_IC else 0)
            self._tx_advance(d, self.engine.now)
            return
        # The frame as it leaves, padded to the minimum: one bytes object, made here --
        # unless it needs no padding and the port takes it from memory (`send_raw`: a
        # real transport copies it from there; a modeled medium gets the same bytes).
        if not span_ok(buf, length, self.mem.size):
            span_check(buf, length, self.mem.size, "physical memory")
        port = self.port
        if padded == length and isinstance(port, FramePort):
            (<FramePort> port).send_raw(&self.mem.buf[buf], length, self.engine.now, &start, &end)
        else:
            frame = PyBytes_FromStringAndSize(NULL, padded)
            out = PyBytes_AS_STRING(frame)
            memcpy(out, &self.mem.buf[buf], length)
            if padded > length:
                memset(out + length, 0, padded - length)
            if isinstance(port, FramePort):     # a medium's end or a real transport: a C call
                (<FramePort> port).send_frame(frame, self.engine.now, &start, &end)
            else:
                start, end = port.transmit(frame, self.engine.now)
        self.tx_frames += 1
        self.tx_bytes += length
        if self.engine.realtime:
            # Real time: the frame is in the transport already; completed before the next
            # fetch, as the two events would run in the order posted.
            self._tx_wire_done(d, False)
            self._tx_advance(d, start)
            return
        # The FIFO holds one frame beyond the one on the wire: fetch the next one as
        # this one starts, complete this one when its last bit has left.
        self.engine.post(end, self, TX_WIRE_DONE, self._boxed(d))
        self._tx_advance(d, start)

    cdef _tx_wire_done(self, Py_ssize_t d, bint last):
        cdef unsigned int des1 = mem_rd32(self.mem, d + 4)
        self._tx_complete(d, des1, last)

    cdef _tx_complete(self, Py_ssize_t d, unsigned int des1, bint last=False):
        mem_wr32(self.mem, d, 0)                           # status write-back: OWN cleared, no errors
        if des1 & TDES1_IC:
            self._raise(TI, last)

    cdef _tx_advance(self, Py_ssize_t d, double t):
        """Step to the next descriptor and fetch it, starting at time `t` (the last thing
        of each event that calls it)."""
        cdef unsigned int des1 = mem_rd32(self.mem, d + 4)
        self.tx_cur = self._next_desc(d, des1, TDES1_TER, TDES1_TCH, self.csr[4])
        self.tx_pending_kick = False
        self.tx_state = TS_FETCHING
        self._then(t + nic_dma(self, 16), TX_FETCHED, 0)

    # -- receive ring walker (the medium calls frame_in by C at the frame's last bit) ----

    cpdef rx_frame(self, const unsigned char[::1] frame, bint crc_ok):
        self.frame_in(frame, crc_ok, False)

    cdef int frame_in(self, const unsigned char[::1] frame, bint crc_ok, bint last) except -1:
        cdef Py_ssize_t d = self.rx_cur
        cdef Py_ssize_t n = frame.shape[0]
        cdef unsigned int des0, des1, status
        cdef Py_ssize_t size1, buf
        cdef double tail, t
        cdef RxDma* q
        cdef Py_ssize_t k, cap
        if self.rx_state == RS_STOPPED:
            self.rx_missed += 1
            return 0
        if n >= 14 and not self._accepts(frame):
            self.rx_filtered += 1
            return 0
        des0 = mem_rd32(self.mem, d)
        if not des0 & OWN or self._rx_busy(d):
            # Receive buffer unavailable: the frame is lost and counted (CSR8).
            self.rx_state = RS_SUSPENDED
            self.csr[8] = (self.csr[8] + 1) & 0xFFFF
            self.rx_missed += 1
            self._raise(RU)
            return 0
        des1 = mem_rd32(self.mem, d + 4)
        size1 = des1 & 0x7FF
        status = ((<unsigned int> (n + 4)) << 16) | RDES0_FS | RDES0_LS
        if n < 14:
            status |= RDES0_ES | RDES0_RF             # runt: flagged, the driver drops it
        if not crc_ok:
            status |= RDES0_ES | RDES0_CE
            self.rx_crc_errors += 1
        if n > size1:
            status |= RDES0_ES | RDES0_TL
            self.rx_too_long += 1
            n = 0
        elif n > ETH_MAX_FRAME:
            status |= RDES0_TL                       # longer than 802.3 allows: flagged, kept
        # The frame streamed into host memory while it arrived; what is left after the
        # last bit is the final burst (with unlimited bursts, what the FIFO held past its
        # 64-byte DMA threshold) and the descriptor status write.
        tail = nic_dma(self, min(n, self.burst_bytes or 64)) + nic_dma(self, 4)
        t = max(self.engine.now, self.rx_free_at) + tail
        self.rx_free_at = t
        if n:
            # Straight into memory: a slice of the view and a call with it cost more than the copy.
            buf = mem_rd32(self.mem, d + 8)
            if not span_ok(buf, n, self.mem.size):
                span_check(buf, n, self.mem.size, "physical memory")
            memcpy(&self.mem.buf[buf], &frame[0], n)
        self.rx_cur = self._next_desc(d, des1, RDES1_RER, RDES1_RCH, self.csr[3])
        self.rx_frames += 1
        self.rx_bytes += n
        if self._rxq_len == self._rxq_cap:
            # Grow the ring (as many as the descriptors in flight at once), oldest first.
            cap = self._rxq_cap * 2 if self._rxq_cap else 8
            q = <RxDma*> realloc(self._rxq, cap * sizeof(RxDma))
            if q == NULL:
                raise MemoryError()
            for k in range(self._rxq_head):     # the wrapped part goes after the rest
                q[self._rxq_cap + k] = q[k]
            self._rxq = q
            self._rxq_cap = cap
        k = (self._rxq_head + self._rxq_len) % self._rxq_cap
        self._rxq_tag = (self._rxq_tag + 1) % RX_TAGS
        self._rxq[k].desc = d
        self._rxq[k].status = status
        self._rxq[k].tag = RX_DONE + self._rxq_tag
        self._rxq_len += 1
        self._rxq_live += 1
        # In real time every DMA is done at once and the engine runs events in the order
        # posted: one event hands back every frame queued by then (`_rx_done`), so a burst
        # taken in before the engine runs raises one receive interrupt, not one per frame.
        if self.engine.realtime:
            if self._rxq_len == 1:
                self.engine.post(t, self, RX_DONE + self._rxq_tag, None)
        elif last and try_advance(self.engine, t):
            # The frame's arrival does nothing more at its instant and nothing can come
            # before the DMA's end: the end runs now, as the event it would be (one event
            # per received frame fewer, the same effects at the same instant).
            self._rx_done(RX_DONE + self._rxq_tag)
        else:
            self.engine.post(t, self, RX_DONE + self._rxq_tag, None)
        return 0

    cdef bint _rx_busy(self, Py_ssize_t d) noexcept:
        """Descriptor `d` holds a frame whose DMA is not done yet."""
        cdef Py_ssize_t i
        for i in range(self._rxq_len - self._rxq_live, self._rxq_len):
            if self._rxq[(self._rxq_head + i) % self._rxq_cap].desc == d:
                return True
        return False

    cdef int rx_room(self) except -1:
        """The next receive descriptor is the card's and holds no frame still in DMA."""
        cdef Py_ssize_t d = self.rx_cur
        if self.rx_state == RS_STOPPED:
            return 0
        return 1 if mem_rd32(self.mem, d) & OWN and not self._rx_busy(d) else 0

    cdef bint _accepts(self, const unsigned char[::1] frame) except -1:
        """Address filtering: promiscuous, multicast with PM, or a perfect-filter hit."""
        if self.csr[6] & PR:
            return True
        cdef unsigned long long dst = _mac48(&frame[0])
        cdef int i
        if frame[0] & 1:
            return bool(self.csr[6] & PM) or dst == BROADCAST_MAC48
        for i in range(self._nperfect):
            if self._perfect[i] == dst:
                return True
        return False

    cdef int _rx_done(self, int tag) except -1:
        """The frame of the record tagged `tag` is in host memory: hand its descriptor back.

        It is the oldest one (frames finish in arrival order) but after a reset, which
        lets later frames start their DMA at once."""
        cdef Py_ssize_t i = 0, j, cap = self._rxq_cap
        cdef RxDma done
        if self.engine.realtime:
            # Real time: every frame queued is done (see `frame_in`), the oldest first.
            while self._rxq_len:
                done = self._rxq[self._rxq_head]
                if self._rxq_len <= self._rxq_live:
                    self._rxq_live -= 1
                self._rxq_head = (self._rxq_head + 1) % cap
                self._rxq_len -= 1
                mem_wr32(self.mem, done.desc, done.status)     # OWN cleared: the host's now
            self._raise(RI)
            return 0
        while self._rxq[(self._rxq_head + i) % cap].tag != tag:
            i += 1
        done = self._rxq[(self._rxq_head + i) % cap]
        if i >= self._rxq_len - self._rxq_live:
            self._rxq_live -= 1
        if i == 0:
            self._rxq_head = (self._rxq_head + 1) % cap
        else:
            for j in range(i, self._rxq_len - 1):
                self._rxq[(self._rxq_head + j) % cap] = self._rxq[(self._rxq_head + j + 1) % cap]
        self._rxq_len -= 1
        mem_wr32(self.mem, done.desc, done.status)         # OWN cleared: the host's now
        self._raise(RI, True)                       # the event's last thing
        return 0

    def stats(self):
        return {"tx_frames": self.tx_frames, "tx_bytes": self.tx_bytes, "rx_frames": self.rx_frames,
                "rx_bytes": self.rx_bytes, "rx_missed": self.rx_missed, "rx_crc_errors": self.rx_crc_errors,
                "rx_too_long": self.rx_too_long, "rx_filtered": self.rx_filtered, "dma_bytes": self.dma_bytes,
                "interrupts_raised": self.irq_raised, "csr5": hex(self.csr_read(5)), "csr6": hex(self.csr[6])}

# cython: language_level=3
"""The receive side of LCI's host library, the part every packet runs (host.py documents
the library; this is its hot path, typed).

`HostRx` is the base of `host.HostLib`: the state a poll touches is in C fields of the
library object itself (a 1024-node broadcast has every node's library busy at once, so
each attribute that is a dict entry is another cache miss), and the steps of a poll --
look at the next receive buffer, parse, upcall, give the buffer back -- run without a
Python frame. `Packet` is what the upcall sees. Everything a poll does and charges is
exactly what host.py's Python did (same order, same CPU seconds): only the simulator's
own time changes.
"""

import errno

from kernelsim._physmem cimport PhysMem
from protocols.lci._wire cimport Header

from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L
from protocols.lci.memory import UserBuffer

cdef unsigned int RX_FULL = L.RX_FULL
cdef unsigned int FREE_VALID = L.FREE_VALID
cdef Py_ssize_t CB_POLLED = L.CB_POLLED
cdef Py_ssize_t CB_TICK = L.CB_TICK
cdef unsigned int CPL_VALID = L.CPL_VALID
cdef int K_DATA = W.K_DATA
cdef int K_RCPY = W.K_RCPY
cdef int K_MCAST = W.K_MCAST
cdef int K_FA_REQ = W.K_FA_REQ
cdef int K_FA_REPLY = W.K_FA_REPLY
cdef int F_MISS = W.F_MISS
cdef Py_ssize_t HDR_BYTES = W.HDR_BYTES
cdef tuple REASONS = tuple(W.REASONS)
cdef long long MASK32 = 0xFFFFFFFF


cdef inline Py_ssize_t _lines(Py_ssize_t n, Py_ssize_t line=64):
    """Bytes of cache lines `n` bytes occupy (host.py's `_lines`)."""
    return max(line, -(-n // line) * line)


cdef class Packet:
    """A received packet, as the upcall sees it. Return True from the upcall to keep it
    (release it later with ``lci.release(pkt)``); otherwise it goes back at once."""

    cdef public HostRx lib
    cdef public Py_ssize_t addr         # the host receive buffer it sits in
    cdef public Py_ssize_t off          # its payload's address
    cdef public int src
    cdef public Py_ssize_t length
    cdef public object _data
    cdef public bint kept, live

    def __init__(self, HostRx lib, Py_ssize_t addr, Py_ssize_t off, int src, Py_ssize_t length):
        self.lib = lib
        self.addr = addr
        self.off = off
        self.src = src
        self.length = length
        self._data = None
        self.kept = False
        self.live = True

    @property
    def data(self) -> bytes:
        if not self.live:
            raise OSError(errno.EBADF, "the packet has been released")
        if self._data is None:
            self._data = self.lib.mem.read(self.off, self.length)
        return self._data

    def copy_to(self, buf, off=0) -> None:
        """Copy the payload into a user buffer (a memcpy, charged to the receiving call,
        at the L2 rate while the buffer and the receive queue fit in L2: LCI-C26)."""
        if not self.live:
            raise OSError(errno.EBADF, "the packet has been released")
        cdef HostRx lib = self.lib
        if not isinstance(buf, UserBuffer) or buf.vm is not lib.vm:
            raise OSError(errno.EFAULT, "copy_to needs a buffer of this process (lci.alloc)")
        dst = buf._span(off, self.length)
        cdef PhysMem mem = lib.mem
        cdef Py_ssize_t i = 0, p, k
        for p, k in lib.vm.pieces(dst, self.length):
            mem.move(p, self.off + i, k)
            i += k
        lib.owed += <double> lib.c.copy(self.length, buf.size + len(lib.rx_bufs) * _lines(self.length))
        st = lib.st
        st["copies"] += 1
        st["copied_bytes"] += self.length

    def __repr__(self):
        return f"<LCI packet from node {self.lib and self.src}, {self.length} B{'' if self.live else ', released'}>"


cdef class HostRx:
    """The receive half of `HostLib`: its state in C fields, its poll without frames."""

    # Set by HostLib.__init__ / setup (names as host.py always had them).
    cdef public object node, engine, dev, fw, c, variant, reliability, transfer, mc, upcall
    cdef public object events, sleepers, vm, htlb, peers, timed, aborted, stalled_since, svc
    cdef public PhysMem mem
    cdef public Header hdr
    cdef public dict st, malformed
    cdef public object given, rx_bufs, send_free, desc, anon_given
    cdef public Py_ssize_t slot, status, cpl_ring, nsd, sendq, sendq_bytes, rx_queue_bytes
    cdef public long long free_prod, polled, cpl_cons, sd_prod, anon_prod, cmd_prod
    cdef public int mtu
    cdef public double owed, pio_word, pio_desc
    cdef public bint interrupts, signalled, want_completion, realtime
    cdef public long long _timer        # the engine handle of the armed wake-up, or -1
    # Derived once the library is set up (`_rx_setup`): what a poll reads on every packet.
    cdef bint hrx
    cdef Py_ssize_t free_base, nfree
    cdef double h_poll, h_recv_miss, h_release_word

    def _rx_setup(self):
        """Cache the constants a poll uses (the costs, the free ring) as C values."""
        c = self.c
        self.hrx = self.reliability == "host"
        self.free_base = self.fw.lay["free_base"]
        self.nfree = self.fw.nfree
        self.h_poll = c.h_poll
        self.h_recv_miss = c.mem_miss + c.h_recv           # as host.py summed them
        self.h_release_word = c.h_release + self.pio_word

    # -- small steps (no modeled time of their own: the callers charge it) ---------------------

    cpdef _give(self, Py_ssize_t addr):
        self.dev.pio_write32(self.free_base + 4 * (self.free_prod % self.nfree), addr | FREE_VALID)
        self.free_prod += 1
        self.given.append(addr)

    cpdef check_abort(self):
        if self.aborted is None and self.mem.rd32(self.status):
            self.aborted = self.fw.aborted or "the NI aborted"
        if self.aborted is not None:
            raise OSError(errno.EIO, f"LCI {self.variant.name}: {self.aborted}")

    cpdef double _take_owed(self):
        cdef double owed = self.owed
        self.owed = 0.0
        return owed

    cpdef bint head_full(self):
        if not self.given:
            return False
        cdef Py_ssize_t end = <Py_ssize_t> self.given[0] + self.slot
        return bool(self.mem.rd32(end - 4) & RX_FULL)

    cpdef bint ready(self):
        """Would the very next look find work (an arrival, an abort; a send completion if
        a call waits for one)?"""
        if self.head_full() or self.mem.rd32(self.status):
            return True
        due = self.next_deadline() if self.timed else None
        if due is not None and due <= self.engine.now:
            return True                 # a host timer is already due: look now, do not sleep
        if not self.want_completion:
            return False
        cdef Py_ssize_t a = self.cpl_ring + 4 * (self.cpl_cons % self.nsd)
        return bool(self.mem.rd32(a) & CPL_VALID)

    cpdef arm_timer(self):
        """Wake a waiting process when the next host timer falls due (`next_deadline`)."""
        if self._timer >= 0:
            self.engine.cancel(self._timer)
            self._timer = -1
        if not self.timed and not self.realtime and self.stalled_since is None:
            return                      # no timer running: next_deadline() would say None
        due = self.next_deadline()
        if due is not None:
            self._timer = self.engine.after(max(due - self.engine.now, 0.0), self._timer_fired, None)

    # -- receive ---------------------------------------------------------------------------------

    def poll_path(self, since=None):
        """One poll: take every packet in the receive queue, run the upcalls, release."""
        cdef PhysMem mem = self.mem
        cdef Header hdr = self.hdr
        cdef dict st = self.st
        cdef object given = self.given
        cdef Py_ssize_t addr, end, off
        cdef unsigned int w, body
        cdef int n = 0, err, kind, src
        cdef double owed
        cdef Packet pkt
        cdef bint keep
        yield (0.5 * self.h_poll if since is not None else self.h_poll) + self._take_owed()
        st["polls"] += 1
        self.check_abort()
        while given:
            addr = given[0]
            end = addr + self.slot
            w = mem.rd32(end - 4)
            if not w & RX_FULL:
                break
            yield self.h_recv_miss                  # the NI wrote the line: a cache miss
            given.popleft()
            mem.wr32(end - 4, 0)
            self.polled += 1
            body = w & 0xFFFF
            off = end - 4 - body
            err = hdr.parse_body(mem.buf, off, body, self.mtu)
            if err:
                self.malformed[REASONS[err]] += 1
                yield self.h_release_word
                self._give(addr)
                st["released"] += 1
                continue
            n += 1
            kind = hdr.kind
            if self.hrx:
                keep = yield from self._hrx_receive(hdr)
                if not keep:
                    yield self.h_release_word
                    self._give(addr)
                    st["released"] += 1
                    continue
            if kind == K_RCPY and hdr.flags & F_MISS:
                yield from self._rcpy_miss(hdr)
                yield self.h_release_word
                self._give(addr)
                st["released"] += 1
                continue
            src = hdr.src
            if kind != K_DATA:
                src = -1
                if kind == K_MCAST:
                    src = self.mc.on_mcast(hdr, off + HDR_BYTES)             # multicast
                elif kind == K_FA_REQ or kind == K_FA_REPLY:
                    src = yield from self.mc.on_packet(hdr, off + HDR_BYTES)  # fetch-and-add
                else:
                    self.malformed["unknown_kind"] += 1
                if src < 0:
                    yield self.h_release_word
                    self._give(addr)
                    st["released"] += 1
                    continue
            st["received"] += 1
            st["received_bytes"] += hdr.length
            pkt = Packet.__new__(Packet)
            pkt.lib = self
            pkt.addr = addr
            pkt.off = off + HDR_BYTES
            pkt.src = src
            pkt.length = hdr.length
            pkt.live = True
            keep = False
            if self.upcall is not None:
                st["upcalls"] += 1
                keep = bool(self.upcall(pkt))
            owed = self._take_owed()
            if owed:
                yield owed
            if keep:
                pkt.kept = True
                st["kept"] += 1
            else:
                pkt.live = False
                yield self.h_release_word
                self._give(addr)
                st["released"] += 1
        if n == 0:
            st["empty_polls"] += 1
        if self.interrupts and n:
            yield self.pio_word
            self.dev.pio_write32(CB_POLLED, self.polled & MASK32)
        if self.hrx:
            yield from self._hrx_service()
        if self.realtime:
            self.dev.pio_write32(CB_TICK, 1)          # the NI looks at its clock (timer.py)
        if self.mc.queue:
            yield from self.mc.service_path()           # host-forwarded multicast (C12, C20)
        return n

    def _release_path(self, Py_ssize_t addr):
        yield self.h_release_word
        self._give(addr)
        self.st["released"] += 1

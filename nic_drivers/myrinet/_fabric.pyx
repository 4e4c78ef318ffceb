# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The Myrinet network's hot path: packet heads moving through switches, links held and
released, the receiving NI's flow control (the topologies and routes are in fabric.py).

Timing of one packet of ``n`` bytes (route, type, payload, plus the CRC trailer): its
head reaches a switch one propagation delay after leaving the previous element, asks
for the output port its route byte names ``switch.hop_s`` later (the crossbar's delay),
takes it if it is free -- else waits in the order heads asked, as the switch's arbiter
grants -- and so on to the receiving NI. If the NI accepts at time ``a`` (its receive
DMA is armed; else the head waits there: back-pressure), the tail arrives at
``a + n / rate`` and each link is released as the tail passes its far end; the sender's
send DMA engine is done when the tail has left it. Each packet goes through the fault
injector when its tail arrives (loss, a corrupted byte that fails the NI's CRC check,
duplication, a hold-back that lets later packets pass).

Events per packet: one per switch (the head asks for its output port), one at the NI,
one when the sender is done and one for the tail. A link's release is not an event of
its own: when the tail's time is known the link records when it is free (``free_at``);
a head that asks later finds it free, and only a head already waiting makes the release
an event. So a route of k switches costs k + 3 events whatever the cluster's size.

Fewer when nothing else happens meanwhile: the code that owns the current event (``last``:
it does nothing more after this) may move time on itself (`Engine.advance`), which the
engine allows only when no other event comes first -- then the head's next step, or the
sender's done, runs at once, at the same modeled instant and in the same order as its
event would have. An idle network's packet costs one event (the tail) that way.
"""
from collections import deque

cimport cython

from kernelsim._engine cimport Engine, EventTarget
from kernelsim.media.faults cimport faults_active
from nic_drivers.myrinet._model cimport LanaiNI, Medium

cdef int EV_HOP = 0          # the head is at a switch and its delay has passed
cdef int EV_AT_NI = 1        # the head is at the receiving NI
cdef int EV_RELEASE = 2      # a waited-for link is free
cdef int EV_SENDER_DONE = 3  # the tail has left the sending NI
cdef int EV_TAIL = 4         # the tail is in the receiving NI

cdef unsigned char ROUTE_BIT = 0x80


cdef class Channel:
    """One direction of one link, with the output port that drives it."""

    def __init__(self, str name, bint to_ni, object target):
        self.name = name
        self.to_ni = to_ni
        self.target = target
        self.switch = -1 if to_ni else <int> target
        self.busy = False
        self.free_at = -1.0
        self.release_posted = False
        self.waiters = deque()

    cdef void settle(self, double now):
        """The holder's tail has passed and nobody waits: the link is free (accounted)."""
        if self.busy and not self.release_posted and 0.0 <= self.free_at <= now:
            self.busy = False
            self.busy_s += self.free_at - self.t_acq

    def stats(self):
        return {"packets": self.packets, "bytes": self.bytes, "busy_us": self.busy_s * 1e6,
                "waits": self.waits, "wait_us": self.wait_s * 1e6}


@cython.freelist(8)
cdef class Packet:
    pass


cdef class Wire(Medium):
    """Moves packets over channels (``switch_out``, ``inject_ch``) that a subclass cables."""

    def __init__(self, Engine engine, double byte_s, double prop_s, double hop_s, int crc_bytes, faults):
        self.engine = engine
        self.byte_s = byte_s
        self.prop_s = prop_s
        self.hop_s = hop_s
        self.crc_bytes = crc_bytes
        self.faults = faults
        self.switch_out = []
        self.inject_ch = {}

    def cable_in(self, ni, Channel ch):
        """Cable `ch` as the channel node `ni.nid`'s packets enter the network by."""
        self.inject_ch[ni.nid] = ch
        if isinstance(ni, LanaiNI):
            (<LanaiNI> ni)._in_wire = self
            (<LanaiNI> ni)._in_ch = ch

    cdef Channel _in(self, LanaiNI ni):
        # The board keeps its channel into this wire (`cable_in` is the one way in: the
        # table cannot be replaced); a board cabled some other way is looked up.
        if ni._in_wire is self:
            return <Channel> ni._in_ch
        return self.inject_ch.get(ni.nid)

    cdef int inject_packet(self, object ni, bytes data, object token, bint last) except -1:
        """The send DMA engine of `ni` starts streaming `data` (route first) now."""
        cdef double t
        cdef Packet p = Packet.__new__(Packet)
        cdef Channel ch
        p.data = data
        p.pos = 0
        p.src = ni
        p.token = token
        p.nbytes = len(data) + self.crc_bytes
        p.dur = p.nbytes * self.byte_s
        p.chans = []
        self.packets += 1
        ch = self._in(<LanaiNI?> ni)
        if ch is None:                       # not cabled: the bits go nowhere
            self.lost += 1
            self.engine.post(self.engine.now + p.dur, self, EV_SENDER_DONE, p)
            return 0
        p.want = ch
        self._take(ch, p)
        t = self.engine.now + self.prop_s + self.hop_s
        if last and self.engine.advance(t):
            self._hop(p, True)
        else:
            self.engine.post(t, self, EV_HOP, p)
        return 0

    cdef int on_event(self, int what, object arg) except -1:
        if what == EV_HOP:
            self._hop(<Packet> arg, True)
        elif what == EV_AT_NI:
            self._at_ni(<Packet> arg, True)
        elif what == EV_RELEASE:
            self._release(<Channel> arg, True)
        elif what == EV_SENDER_DONE:
            self._sender_done(<Packet> arg, True)
        else:
            self._tail(<Packet> arg)
        return 0

    cdef _take(self, Channel ch, Packet p):
        ch.busy = True
        ch.free_at = -1.0
        ch.t_acq = self.engine.now
        ch.packets += 1
        ch.bytes += p.nbytes
        p.chans.append(ch)

    cdef _hop(self, Packet p, bint last):
        cdef bytes data = p.data
        cdef list outs = <list> self.switch_out[p.want.switch]
        cdef int port
        cdef object out
        if p.pos >= len(data) or not data[p.pos] & ROUTE_BIT:
            self._misroute(p, self.engine.now - self.hop_s)
            return
        port = data[p.pos] & 0x7F
        out = outs[port] if port < len(outs) else None
        if out is None:
            self._misroute(p, self.engine.now - self.hop_s)
            return
        p.pos += 1
        p.want = <Channel> out
        self._ask(p, last)

    cdef _ask(self, Packet p, bint last):
        cdef Channel ch = p.want
        cdef double now = self.engine.now
        ch.settle(now)
        if ch.busy:
            ch.waits += 1
            p.t_ask = now
            ch.waiters.append(p)
            if ch.free_at >= 0.0 and not ch.release_posted:
                ch.release_posted = True
                self.engine.post(ch.free_at, self, EV_RELEASE, ch)
            return
        self._take(ch, p)
        self._forward(p, last)

    cdef _forward(self, Packet p, bint last):
        cdef double t
        if p.want.to_ni:
            t = self.engine.now + self.prop_s
            if last and self.engine.advance(t):
                self._at_ni(p, True)
            else:
                self.engine.post(t, self, EV_AT_NI, p)
        else:
            t = self.engine.now + self.prop_s + self.hop_s
            if last and self.engine.advance(t):
                self._hop(p, True)
            else:
                self.engine.post(t, self, EV_HOP, p)

    cdef _free_at(self, Channel ch, double t):
        """The holder's tail passes the link's far end at `t`."""
        if t < self.engine.now:
            t = self.engine.now
        ch.free_at = t
        if ch.waiters and not ch.release_posted:
            ch.release_posted = True
            self.engine.post(t, self, EV_RELEASE, ch)

    cdef _release(self, Channel ch, bint last):
        cdef Packet p
        cdef double now = self.engine.now
        ch.release_posted = False
        ch.busy = False
        ch.busy_s += now - ch.t_acq
        if ch.waiters:
            p = <Packet> ch.waiters.popleft()
            ch.wait_s += now - p.t_ask
            self._take(ch, p)
            self._forward(p, last)

    cdef _at_ni(self, Packet p, bint last):
        cdef LanaiNI ni = <LanaiNI?> p.want.target
        if ni.net_head():
            self._stream(p, last)
        else:
            p.t_ask = self.engine.now
            ni.rx_wait(self._granted, p)

    def _granted(self, Packet p):
        self.ni_wait_s += self.engine.now - p.t_ask
        self._stream(p, False)

    cdef _stream(self, Packet p, bint last):
        """The receiving NI takes the packet: the tail follows at link rate."""
        cdef double now = self.engine.now
        cdef double tail = now + p.dur
        cdef Py_ssize_t k = len(p.chans), i
        cdef double per_hop = self.hop_s + self.prop_s
        cdef double t0
        for i in range(1, k):
            self._free_at(<Channel> p.chans[i], tail - (k - 1 - i) * per_hop)
        t0 = tail - (k - 1) * per_hop - self.prop_s
        if t0 < now:
            t0 = now
        if last and t0 < tail:
            # The tail's event first (it comes later: the two keep their order), then
            # the sender is done at once if nothing else comes before.
            self.engine.post(tail, self, EV_TAIL, p)
            if self.engine.advance(t0):
                self._sender_done(p, True)
            else:
                self.engine.post(t0, self, EV_SENDER_DONE, p)
            return
        self.engine.post(t0, self, EV_SENDER_DONE, p)
        self.engine.post(tail, self, EV_TAIL, p)

    cdef _sender_done(self, Packet p, bint last):
        cdef Channel ch
        if p.chans:
            ch = <Channel> p.chans[0]
            if ch is self._in(<LanaiNI> p.src):
                self._release(ch, False)
        (<LanaiNI> p.src).tail_left(p.token, last)

    cdef _tail(self, Packet p):
        cdef LanaiNI ni = <LanaiNI?> p.want.target
        cdef const unsigned char* at
        if not faults_active(self.faults):   # the packet as it was sent, less the route it used
            self.delivered += 1
            at = <const unsigned char*> p.data
            ni.net_tail_at(at + p.pos, len(p.data) - p.pos, True)
            return
        data = p.data[p.pos:]
        copies = self.faults.apply(data) if self.faults.active else ((data, 0.0, True),)
        now_done = False
        for d, delay, ok in copies:
            if not now_done and delay == 0.0:
                now_done = True
                self.delivered += 1
                ni.net_tail(d, ok)
            else:
                self.engine.after(delay, self._direct, (ni, d, ok))
        if not now_done:
            if not copies:
                self.lost += 1
            ni.net_abort()                 # nothing stored: the armed buffer stays armed

    def _direct(self, item):
        """A fault's extra or held-back copy presents itself at the NI again."""
        ni, d, ok = item
        if ni.net_head():
            self.engine.after((len(d) + self.crc_bytes) * self.byte_s, self._direct_tail, item)
        else:
            ni.rx_wait(self._direct_granted, item)

    def _direct_granted(self, item):
        ni, d, ok = item
        self.engine.after((len(d) + self.crc_bytes) * self.byte_s, self._direct_tail, item)

    def _direct_tail(self, item):
        ni, d, ok = item
        self.delivered += 1
        ni.net_tail(d, ok)

    cdef _misroute(self, Packet p, double start):
        """A bad route byte: the switch discards the packet as it streams in from `start`."""
        cdef Py_ssize_t i
        cdef double t = start + p.dur
        self.misrouted += 1
        for i in range(1, len(p.chans)):
            self._free_at(<Channel> p.chans[i], t)
        self.engine.post(t if t > self.engine.now else self.engine.now, self, EV_SENDER_DONE, p)

    def settle_channels(self):
        """Account every link whose holder's tail has passed (before reading statistics)."""
        cdef double now = self.engine.now
        cdef Channel ch
        for ch in self.inject_ch.values():
            ch.settle(now)
        for outs in self.switch_out:
            for c in outs:
                if c is not None:
                    (<Channel> c).settle(now)

# cython: language_level=3, annotation_typing=False, binding=True
"""The keep-alive: how an SP AM endpoint notices a lost last packet, or a node that is gone (SP-C08).

Go-back-N needs a packet *after* a loss to reveal the gap. When nothing follows -- the
last request of a burst is lost, or the NACK for it is -- messages stay unacknowledged
and nothing else happens. After "a long period of time" the sender sends a keep-alive
that carries its next sequence numbers on both channels; the receiver compares them
with what it expects and NACKs what it lacks, or, with no gap, just acknowledges.

Timeouts are emulated by counting unsuccessful polls (SP-A33, footnote 2): a peer is
due once ``keepalive_polls`` polls have passed since its oldest unacknowledged message
last made progress (its `mark`). N7 leaves the number unvalued; the module's
default is a modeling choice. After ``max_keepalives`` in a row unanswered the call
fails with ETIMEDOUT: SP AM does not recover from crashes or partitions (SP-C01).
Closing waits for acknowledgements by the same rule -- a close that gave up sooner
would abandon a reply its peer is still waiting for, and under heavy loss the peer
would wait for ever -- so a close that finds a node gone fails with ETIMEDOUT too
(having released the endpoint); a node already reported gone is not waited for.

**In real time** (a node process, a script attached to it) the machine is this host, and
a poll of the library is no 2 µs loop on a dedicated node: it is Python on a shared
core, and a peer may be a script that has not yet started. Counted in polls of the
paper's size, 200 keep-alives would pass in 0.13 s, and a peer still importing its
libraries would be reported gone. So in real time the poll count follows the wall clock
(one poll per `full_poll` since open, however few the library made), and a keep-alive
period lasts at least ``realtime_keepalive_ms`` (a modeling choice, 25 ms: giving up
takes ``max_keepalives`` periods, 5 s; closing lingers ``close_linger`` periods, 0.8 s).
Modeled runs count polls exactly as before.

Only peers with unacknowledged messages can be due. The endpoint keeps them in
`settling` and a lower bound of the poll count at which the first may fall due, so a
poll costs nothing here until then, whatever the number of nodes. A caller about to
wait arms a timer for that moment (its spin would make one poll every `full_poll`).
"""
from __future__ import annotations

import errno
import math
from time import perf_counter as _wall

from protocols.am import _wire as W
from libc.math cimport INFINITY
from protocols.am._wire cimport Peer
from protocols.am._codes cimport *
from protocols.am.window cimport Window

__all__ = ["KeepAlive"]

_NEVER = float("inf")


cdef class KeepAlive(Window):
    """The keep-alive half of an AM endpoint (Window < KeepAlive < Bulk < AmEndpoint)."""

    def _init_keepalive(self, params: dict) -> None:
        polls = params["keepalive_polls"]
        self.wall_clock = self.engine.realtime
        if self.wall_clock:
            self._opened_at = _wall()
            if self.full_poll > 0:
                polls = max(polls, math.ceil(params["realtime_keepalive_ms"] * 1e-3 / self.full_poll))
        self.keepalive_polls = polls
        self.max_keepalives = params["max_keepalives"]
        self.settling = {}                    # peers with unacked messages (an ordered set)
        self._ka_due = _NEVER                 # no peer falls due before this poll count
        self._timer = -1
        self.gone = set()                     # nodes a call has reported ETIMEDOUT for
        self.linger_polls = params["close_linger"] * self.keepalive_polls
        self.heard = -1                       # the poll count at the last packet from a peer
        self._on_timer = self._timer_fired    # bound once: a caller arms the timer before every wait

    def _tick_wall_clock(self) -> None:
        """Real time: the poll count is at least the wall time since open, in polls of
        `full_poll` -- a caller that spins in am_poll and one that waits count the same
        silence, however slowly this host runs the library's polls."""
        p = int((_wall() - self._opened_at) / self.full_poll) if self.full_poll > 0 else 0
        if p > self.polls:
            self.polls = p

    cdef int _unsettled(self, Peer peer) except -1:
        """`peer` is about to have its first unacknowledged message."""
        cdef long long due = self.polls + self.keepalive_polls
        self.settling[peer] = None
        if due < self._ka_due:
            self._ka_due = due
        return 0

    cdef int _settled(self, Peer peer) except -1:
        """Every message to `peer` is acknowledged."""
        self.settling.pop(peer, None)
        if not self.settling:
            self._ka_due = _NEVER
        return 0

    cdef double _next_due(self) except? -1.0:
        """The exact poll count at which the first peer falls due (and the new bound).
        A C method over typed peers: as a Python method, called per wait, it was a
        method lookup and call and a generic attribute read per peer."""
        cdef Peer peer
        cdef double due = INFINITY
        cdef long long k = self.keepalive_polls
        for peer in self.settling:
            if peer.mark + k < due:
                due = peer.mark + k
        self._ka_due = due
        return due

    cdef int _keepalive_check(self) except -1:
        """In a pump: queue every peer that is due (they send a keep-alive when pumped)."""
        cdef Peer peer
        if self.polls < self._ka_due:
            return 0
        k = self.keepalive_polls
        for peer in self.settling:
            if self.polls - peer.mark >= k:
                self._kick(peer)
        self._next_due()
        return 0

    def reported_gone(self, peer) -> bool:
        """A call has failed with ETIMEDOUT for `peer`, and it has not been heard from since."""
        return peer.keepalives >= self.max_keepalives and peer.nid in self.gone

    cdef int _keepalive_due(self, Peer peer) except -1:
        """The end of a peer's pump: is a keep-alive due (SP-C08)? 1: the pump sends it
        (and then marks the peer: `Pump`); ETIMEDOUT once `max_keepalives` went unanswered."""
        if not peer.unacked() or self.polls - peer.mark < self.keepalive_polls:
            return 0
        if peer.keepalives >= self.max_keepalives:
            if self.closing and peer.nid in self.gone:
                return 0                        # said once already: closing abandons what it holds for it
            self.gone.add(peer.nid)
            raise OSError(errno.ETIMEDOUT, f"node {peer.nid} has not answered {peer.keepalives} keep-alives "
                                           "(SP AM does not recover from crashes or partitions)")
        return 1

    def _rx_keepalive(self, peer, h) -> None:
        """A keep-alive carries the sender's next sequence numbers, so whatever it sent
        before it and we lack is a gap: NACK what we expect (it is resent from there).
        No gap: an ack is all it needs. Cleared suppression lets a refused chunk be
        refused again if the first refusal was lost."""
        self.counts[S_KEEPALIVES_RECEIVED] += 1
        gap = False
        for rx, fl, horizon in ((peer.rx_req, 0, h.addr >> 8 & 0xFF), (peer.rx_rep, F_REPCH, h.addr & 0xFF)):
            rx.nacked = False
            if rx.expected != horizon:
                peer.ctl.append((W.K_NACK, fl, rx.expected, 0))
                self.counts[S_NACKS_SENT] += 1
                gap = True
        if not gap:
            peer.rx_req.ack_owed = True

    def lingering(self) -> bool:
        """Closing: has a peer been heard from within the last `close_linger` keep-alive
        periods? Then the endpoint stays to answer its keep-alives, which ask again for an
        acknowledgement of ours that was lost (the two-generals problem of the last ack)."""
        return self.heard >= 0 and self.polls - self.heard < self.linger_polls

    # -- the waiting caller's timer ------------------------------------------------------------

    cpdef arm_timer(self):
        """Before the caller waits: wake it when a keep-alive falls due (SP-C08). The
        timeout is counted in polls; a spinning caller makes one every `full_poll`."""
        cdef double due, left
        if self._timer >= 0:
            self.engine.cancel(self._timer)
            self._timer = -1
        due = self._next_due() if self.settling else INFINITY
        if self.closing and self.heard >= 0 and self.heard + self.linger_polls < due:
            due = self.heard + self.linger_polls
        if due == INFINITY:
            return
        left = due - self.polls
        self._timer = self.engine.after((left if left > 1 else 1) * self.full_poll, self._on_timer, None)

    def _timer_fired(self, _arg) -> None:
        self._timer = -1
        self.events.wake()

    def _cancel_timer(self) -> None:
        if self._timer >= 0:
            self.engine.cancel(self._timer)
            self._timer = -1

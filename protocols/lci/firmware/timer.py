"""Timer (LCI-C04): the NI's interval timer put to three uses.

* The polling watchdog (LCI-C09): with network interrupts enabled, a delivery starts a
  timer (70 µs on the PPro, 30 µs on the P3: LCI-A38/A39); the interrupt is raised
  only if it expires before the host has taken what was delivered -- a host that polls
  in time never sees an interrupt.
* I-nirx's retransmission timer per destination with packets outstanding: it fires
  when the oldest of them has waited the time-out (``lci.retx_timeout_s``, backed off
  while nothing is acknowledged: ``LciCosts.rto``; LCI-C12, C13).
* In real time (a board model in a process on a real transport) the engine runs every
  event at once, so an interval timer cannot wait: the retransmission deadlines are
  kept here and looked at whenever the host rings ``CB_TICK`` (it does at every poll),
  as a LANai control program reads its clock in its event loop. The watchdog and the
  delayed acknowledgement just go at once there.
* I-nirx's delayed-acknowledgement timer per sender: started when a packet from it is
  accepted and none runs, cancelled by any acknowledgement that goes back, and on
  expiry an explicit acknowledgement goes (LCI-C12).
"""
from __future__ import annotations

from nic_drivers.myrinet._model import ISR_RX
from protocols.lci.firmware import layout as L

__all__ = ["Timers"]

MASK32 = 0xFFFFFFFF


class Timers:
    def __init__(self, fw):
        self.fw = fw
        self.wd = None

    def start(self) -> None:
        self.wd = None
        self.watchdog_s = self.fw.ni.rd32(L.CB_WATCHDOG_NS) * 1e-9
        self.realtime = self.fw.realtime
        self.waiting = {}               # real time: peers with packets unacknowledged
        if self.realtime:
            self.fw.ni.watch(L.CB_TICK, self.on_tick)

    # -- polling watchdog -----------------------------------------------------------------

    def delivered(self) -> None:
        ni = self.fw.ni
        if self.wd is None and ni.rd32(L.CB_IRQ):
            self.wd = ni.timer(self.watchdog_s, self.on_watchdog)

    def on_watchdog(self, _):
        fw = self.fw
        self.wd = None
        yield fw.c.ni_timer
        if fw.ni.rd32(L.CB_IRQ) and fw.ni.rd32(L.CB_POLLED) != fw.tohost.delivered & MASK32:
            fw.counters["watchdog_interrupts"] += 1
            fw.ni.raise_host(ISR_RX)

    # -- I-nirx ---------------------------------------------------------------------------

    def retx(self, peer, restart: bool = False) -> None:
        """Keep a retransmission timer running while packets to `peer` are unacknowledged."""
        ni = self.fw.ni
        if self.realtime:
            if peer.tx.outstanding():
                self.waiting[peer.nid] = peer
            else:
                self.waiting.pop(peer.nid, None)
            return
        if restart and peer.retx_timer is not None:
            ni.cancel_timer(peer.retx_timer)
            peer.retx_timer = None
        if peer.retx_timer is None and peer.tx.outstanding():
            due = peer.tx.oldest_stamp() + self.fw.c.rto(peer.tx) - ni.rtc()
            peer.retx_timer = ni.timer(max(due, 1e-9), self.on_retx, peer)

    def on_retx(self, peer):
        peer.retx_timer = None
        yield self.fw.c.ni_timer
        yield from self.fw.flow.on_retx_timer(peer)

    def on_tick(self, _):
        """Real time: retransmit to every peer whose oldest packet has waited too long."""
        if not self.waiting:
            return
        fw = self.fw
        yield fw.c.ni_timer
        now = fw.ni.rtc()
        for peer in list(self.waiting.values()):
            if peer.tx.outstanding() and peer.tx.oldest_stamp() + fw.c.rto(peer.tx) <= now:
                yield from fw.flow.on_retx_timer(peer)

    def dack(self, peer) -> None:
        if peer.ack_timer is None:
            peer.ack_timer = self.fw.ni.timer(self.fw.c.delayed_ack_s, self.on_dack, peer)

    def cancel_dack(self, peer) -> None:
        if peer.ack_timer is not None:
            self.fw.ni.cancel_timer(peer.ack_timer)
            peer.ack_timer = None

    def on_dack(self, peer):
        peer.ack_timer = None
        yield self.fw.c.ni_timer
        yield from self.fw.flow.on_dack_timer(peer)

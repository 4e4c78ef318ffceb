"""Fetch&Add (LCI-C04, C11): one variable per NI, answered by the NI.

A request is an ordinary packet of kind FA_REQ from the requesting host (so it goes
through the flow control: credits, or I-nirx's go-back-N, and survives loss where
the variant does), its increment in the header's aux word. The NI replies with the
current value, then adds (LCI-C11): the reply goes out of the request's own receive
buffer, through the same flow control, and the buffer is freed -- its credit
returned -- once the reply has gone (with I-nirx: been acknowledged). The reply
reaches the requesting host as a packet of kind FA_REPLY, which the host library
consumes (no upcall).

With I-hrx the host runs the protocol, so requests go up to the host, which answers
them (LCI-C12; ``protocols/lci/hostmcast.py``).
"""
from __future__ import annotations

from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L

__all__ = ["FetchAdd"]

MASK32 = 0xFFFFFFFF


class FetchAdd:
    def __init__(self, fw):
        self.fw = fw
        self.value = 0

    def start(self) -> None:
        fw = self.fw
        self.value = 0
        recvq = fw.recvq
        recvq.register(W.K_FA_REPLY, recvq.on_data)
        if fw.reliability == "host":
            recvq.register(W.K_FA_REQ, recvq.on_data)     # the host answers (LCI-C12)
        else:
            recvq.register(W.K_FA_REQ, self.on_request)

    def on_request(self, peer, buf, n):
        fw = self.fw
        hdr = fw.hdr
        inc = hdr.aux
        ok = yield from fw.flow.on_data(peer, hdr)
        if not ok:
            yield from fw.recvq.release(buf)
            return
        yield fw.c.ni_fa
        old = self.value
        self.value = (old + inc) & MASK32
        fw.counters["fa_requests"] += 1
        slot = fw.multicast.hold_rx(buf, peer, 1)
        f = slot.forward(0)
        f.buf = buf + W.TYPE_BYTES + W.HDR_BYTES - fw.unicast.payload_off
        f.dest = peer.nid
        f.length = 0
        f.kind = L.SD_SEND
        f.flags = W.K_FA_REPLY << L.SDF_WIRE_SHIFT
        f.aux = old
        f.seq = f.ack = -1
        fw.counters["fa_replies"] += 1
        yield from fw.sendq.ready(peer, f)
        yield from fw.flow.accepted(peer)               # the reply, if it went, acknowledged it

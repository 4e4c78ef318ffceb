"""LCI's control program for the LANai, built of the modules of LCI-C04 (Fig. 4).

Each part is a small class in its own file, sharing this object's state (the board,
the costs, the peers); the board runs their handlers one at a time, each a generator
yielding the NI cycles its work takes (``nic_drivers/myrinet/_model.pyx``):

=====================  =================================================================
part                   what it does
=====================  =================================================================
``hostq``              Host Send Queue Mgt: the event loop's look at the send descriptor
                       ring; SDMA fetches the data from the host packet queue, RCPY from
                       user memory through the NTLB, PIO finds it already in place
``sendq``              Send Queue Mgt: per-destination queues of packets the flow control
                       holds back, sent during acknowledgement processing (LCI-C05); send
                       completions DMA'd to the host (a queue: sends to different
                       destinations complete out of order)
``flow``               Reliability / Flow Control: NI-to-NI credits (reliability=none,
                       LCI-C07), go-back-N on the NI (ni, LCI-C13), or nothing but the
                       shared receive pool when the host runs the protocol (host, C12)
``recvq``              Recv Queue Mgt and Recv Dispatch: the receive DMA kept armed from
                       the pool; each packet checked, then dispatched on its kind (a
                       table: multicast and fetch-and-add add entries, LCI-C10/C11)
``unicast``            Unicast: route and header into the send buffer, the send DMA
``tohost``             DMA to Host and Host Recv Queue Mgmt: packet and full flag in one
                       DMA into the next free host buffer (LCI-C08)
``timer``              Timer: the polling watchdog (LCI-C09), retransmission and
                       delayed-acknowledgement timers (I-nirx)
``ntlb``               the NI half of RCPY's shared TLB and the RCPY receive path
                       (LCI-C16..C19)
``multicast``          Multicast: the forwarding table (the group and its tree shape),
                       fan-out of a packet out of its buffer to each child (LCI-C10)
``fetchadd``           Fetch&Add: the NI's one variable (LCI-C11)
=====================  =================================================================

State per peer is created when the peer is first sent to or heard from (`peer`), so
an idle NI in a large cluster holds nothing per node, and no per-packet work walks
the peers.
"""
from __future__ import annotations

import errno

from nic_drivers.myrinet._model import ISR_ERR
from nic_drivers.myrinet.firmware import Firmware
from protocols.lci import _wire as W
from protocols.lci.firmware import layout as L
from protocols.lci.firmware.fetchadd import FetchAdd
from protocols.lci.firmware._flow import make_flow
from protocols.lci.firmware._hostq import HostSendQueue
from protocols.lci.firmware._multicast import Multicast
from protocols.lci.firmware.ntlb import Ntlb
from protocols.lci.firmware._records import NiPeer, TxPacket
from protocols.lci.firmware._recvq import RecvQueue
from protocols.lci.firmware._sendq import SendQueue
from protocols.lci.firmware.timer import Timers
from protocols.lci.firmware._tohost import ToHost
from protocols.lci.firmware._unicast import Unicast

__all__ = ["LciFirmware", "NiPeer", "TxPacket", "RELIABILITY_CODES", "TRANSFER_CODES"]

RELIABILITY_CODES = ("none", "ni", "host")
TRANSFER_CODES = ("sdma", "pio", "rcpy")


class LciFirmware(Firmware):
    name = "lci"

    def __init__(self, costs, variant, window: int, pool: int, routes=None):
        self.c = costs
        self.variant = variant
        self.reliability = variant.reliability
        self.transfer = variant.transfer
        self.mtu = variant.mtu
        self.window = window
        self.pool = pool
        self.routes = routes             # nid -> route bytes (None: the board's, as the mapper loaded them)
        self.realtime = False            # a board in real time (timer.py): set by the loader
        self.nsend = costs.send_buffers
        self.nfree = costs.host_rx_buffers
        self.nanon = costs.anon_pages if variant.transfer == "rcpy" else 0
        self.ni = None
        self.hdr = W.Header()
        self.counters = dict.fromkeys(
            ("descriptors", "bad_descriptors", "sent", "sent_pio", "sent_sdma", "sent_rcpy", "blocked", "received",
             "delivered", "held_for_host_buffer", "acks_sent", "acks_received", "credits_returned", "nacks_sent",
             "nacks_received", "retransmitted", "retx_timeouts", "delayed_acks", "duplicates", "out_of_order",
             "dropped_no_buffer", "crc_errors", "watchdog_interrupts", "rcpy_hits", "rcpy_misses",
             "ntlb_updates", "mcast_sent", "mcast_received", "forwards", "forwards_waiting_buffer",
             "fa_requests", "fa_replies", "dropped_no_process"), 0)
        self.malformed = dict.fromkeys(W.REASONS[1:] + ("bad_source", "bad_kind_for_variant"), 0)
        self.aborted = None

    # -- the firmware slot ---------------------------------------------------------------

    def attach(self, ni) -> None:
        try:
            self.lay = L.layout(ni.sram_bytes, ni.firmware_bytes, self.nsend, self.nfree, self.nanon, self.pool,
                                self.mtu)
        except ValueError as exc:
            raise OSError(errno.ENOMEM, f"lci: {exc}") from None
        self.ni = ni
        lay = self.lay
        self.nsd = lay["nsd"]
        self.tx = [TxPacket(i, lay["send_base"] + i * lay["send_bytes"]) for i in range(self.nsend)]
        self.hostq = HostSendQueue(self)
        self.sendq = SendQueue(self)
        self.flow = make_flow(self)
        self.unicast = Unicast(self)
        self.recvq = RecvQueue(self)
        self.tohost = ToHost(self)
        self.timers = Timers(self)
        self.ntlb = Ntlb(self)
        self.multicast = Multicast(self)
        self.fetchadd = FetchAdd(self)

    def detach(self, ni) -> None:
        self.ni = None

    def start(self, ni):
        rd = ni.rd32
        self.cpl_ring = rd(L.CB_CPL_RING)
        self.cpl_slots = rd(L.CB_CPL_SLOTS)
        self.status_addr = rd(L.CB_STATUS)
        self.host_slot = rd(L.CB_HOST_SLOT)
        self.peers: dict = {}
        self.aborted = None
        for part in (self.hostq, self.sendq, self.flow, self.unicast, self.recvq, self.tohost, self.timers,
                     self.ntlb, self.multicast, self.fetchadd):
            part.start()
        # The board posts `on_packet` for every packet it receives: the receive queue's own
        # handler, without this class's frame in between.
        self.on_packet = self.recvq.on_packet

    def on_packet(self, pkt):
        return self.recvq.on_packet(pkt)

    def on_crc_error(self, n):
        """The hardware CRC check dropped a packet (LCI-C25): I-sdma's assumption is gone."""
        self.counters["crc_errors"] += 1
        yield self.c.ni_poll
        if self.reliability == "none":
            self.abort(f"NI {self.ni.nid} received a packet with a bad CRC: LCI without retransmission assumes "
                       "a reliable network and aborts (LCI-C03); load lci with reliability=ni or host")

    # -- shared by the parts ------------------------------------------------------------

    def peer(self, nid: int):
        p = self.peers.get(nid)
        if p is None:
            route = (self.routes if self.routes is not None else self.ni.route_table).get(nid)
            if route is None or nid == self.ni.nid or len(route) > L.ROUTE_MAX:
                return None
            p = NiPeer(nid, bytes(route), self.window)
            self.flow.new_peer(p)
            self.peers[nid] = p
        return p

    def abort(self, reason: str) -> None:
        """An assumption of the variant was violated: stop, tell the host why (LCI-C03)."""
        if self.aborted is not None:
            return
        self.aborted = reason
        ni = self.ni
        stage = self.lay["status_stage"]
        ni.wr32(stage, 1)
        ni.host_dma(True, self.status_addr, stage, 4)
        ni.raise_host(ISR_ERR)

    def stats(self) -> dict:
        out = dict(self.counters)
        out["malformed"] = dict(self.malformed)
        if self.ni is not None:
            out.update(variant=self.variant.name, window=self.window, rx_pool=self.pool,
                       free_rx_buffers=len(self.recvq.free), peers=len(getattr(self, "peers", {})),
                       blocked_now=sum(len(p.blocked) for p in getattr(self, "peers", {}).values()),
                       held_now=len(self.tohost.pending), aborted=self.aborted,
                       rx_held_for_forwards=len(self.multicast.holds), rx_pool_in_use=self.pool - len(self.recvq.free),
                       group=self.multicast.describe(), fa_value=self.fetchadd.value)
        return out

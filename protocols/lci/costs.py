"""LCI's costs and sizes, read from the platform profile (the ``lci.*`` keys).

Host work is charged in CPU seconds (the profile gives cycles of LCI's library, so a
faster CPU runs the same code faster), NI work in LANai cycles (the firmware's handlers
yield them, see ``nic_drivers/myrinet/_model.pyx``). What LCI moves across PCI, the
wire or host memory is charged by the machine's own keys (``pci.*``, ``link.*``,
``mem.*``) where the board and the node model already charge it.

**The window W** (LCI-A36, see N7: never printed) is derived, not given: each NI
reserves W receive buffers for every possible sender (LCI-C07), and the buffers are
what NI memory holds -- 256 buffers of 2 Kbyte on the PPro's 1 MB LANai 4.1 (LCI-A34),
twice that on the P3's 2 MB LANai 9.2 (LCI-A35), for the 63 other nodes of the
64-node clusters (LCI-A01/A02). So

    W = largest even number <= (lci.rx_pool_bytes / mtu) / lci.senders,   at least 2

which gives 4 (PPro) and 8 (P3) with the 2 Kbyte MTU -- the "small, fixed number" of
§4.1, twice as big on the P3 (§7) -- 8 and 16 with I-1k, and 2 and 4 with I-4k, where
W/2 = 1 on the PPro: every data packet gets its own acknowledgement (LCI-C07, §5.5).
Even, so that the half-window acknowledgement after W/2 releases is whole.

**One W for every variant.** The go-back-N variants (I-nirx, I-hrx) use the same W as
their window of unacknowledged packets per destination. Their senders share the
receive pool rather than reserving it (LCI-C12), so their window need not shrink with
the cluster -- but a window of their own (once a separate constant, 16 on the PPro and
32 on the P3) made them differ from I-sdma in how much each sender may have in flight
as well as in where the protocol runs, so their g came out *below* I-sdma's where the
paper finds it above (LCI-C13). With one W they differ in mechanism only, and the P3's
windows are twice the PPro's for all of them (section 7).

**Retransmission time-out.** ``lci.retx_timeout_s`` is the time-out of a packet sent
into an idle path; a time-out that passes with nothing acknowledged doubles the next
one, up to ``2**lci.retx_backoff_max`` times (queues full of packets ahead of ours make
a round trip far longer than the idle one: without the back-off each time-out resent
the whole window again, to be dropped as duplicates). Any acknowledgement that frees a
packet resets it. After ``lci.retx_give_up`` time-outs in a row without an
acknowledgement the peer is deemed gone (close stops waiting for it).
"""
from __future__ import annotations

import errno

__all__ = ["LciCosts", "derive_window", "HOST_CYCLE_KEYS", "NI_CYCLE_KEYS"]

HOST_CYCLE_KEYS = ("send", "poll", "recv", "release", "reclaim", "seq_send", "seq_recv", "ack", "htlb")
NI_CYCLE_KEYS = ("poll", "desc", "fetch", "xmit", "txdone", "recv", "rxdone", "ack_send", "ack_recv",
                 "seq_send", "seq_recv", "ntlb", "timer", "mcast", "fa")


def derive_window(profile, mtu: int) -> int:
    """W for an MTU, from the NI receive-buffer memory and the number of senders."""
    pool = int(profile["lci.rx_pool_bytes"])
    senders = int(profile["lci.senders"])
    if senders < 1 or pool < 2 * mtu:
        raise OSError(errno.EINVAL, f"lci: lci.rx_pool_bytes={pool} and lci.senders={senders} leave no window "
                                    f"of {mtu}-byte buffers")
    w = (pool // mtu) // senders
    return max(2, w - w % 2)


class LciCosts:
    """The profile's ``lci.*`` values for one node: host costs in seconds, NI in cycles."""

    def __init__(self, node):
        p = node.profile
        cyc = node.costs.cycles
        for k in HOST_CYCLE_KEYS:
            setattr(self, f"h_{k}", cyc(p[f"lci.host_{k}_cycles"]))
        for k in NI_CYCLE_KEYS:
            setattr(self, f"ni_{k}", float(p[f"lci.ni_{k}_cycles"]))
        self.pin_s = p["lci.pin_s"]
        self.signal_s = p["lci.signal_s"]
        self.copy_l2_Bps = p["lci.copy_l2_Bps"]
        self.l2_bytes = int(p["lci.l2_bytes"])
        self.copy_mem_Bps = p["mem.copy_rate_Bps"]
        self.copy_base_s = p["mem.copy_base_s"]
        self.mem_miss = p["mem.miss_s"]
        self.send_buffers = int(p["lci.send_buffers"])
        self.host_rx_buffers = int(p["lci.host_rx_buffers"])
        self.retx_timeout_s = p["lci.retx_timeout_s"]
        self.retx_backoff_max = int(p["lci.retx_backoff_max"])
        self.retx_give_up = int(p["lci.retx_give_up"])
        self.delayed_ack_s = p["lci.delayed_ack_s"]
        self.stall_s = p["lci.stall_s"]
        self.anon_pages = int(p["lci.anon_pages"])
        self.watchdog_s = p["lanai.watchdog_s"]

    def copy(self, nbytes: int, working_set: int) -> float:
        """memcpy of `nbytes` whose buffers span `working_set` bytes: at the L2 rate while
        they fit in the L2 cache, at the memory rate once they do not (LCI-A46, C26)."""
        if nbytes <= 0:
            return 0.0
        rate = self.copy_l2_Bps if working_set <= self.l2_bytes else self.copy_mem_Bps
        return self.copy_base_s + nbytes / rate

    def rto(self, tx) -> float:
        """The retransmission time-out of a window after its consecutive time-outs."""
        return self.retx_timeout_s * (1 << min(tx.expiries, self.retx_backoff_max))

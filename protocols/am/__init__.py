"""SP AM: Generic Active Messages 1.1 on the IBM SP's TB2 adapter, as a protocol module.

How a protocol lives in dp -- SP AM is the first, and the pattern FM and LCI follow
==================================================================================

**Three places code can run.** A protocol over a NIC splits its work between the
host kernel, the host's user process, and the adapter. Where each piece goes is the
protocol's defining choice, and the papers behind dp made three different ones:

* SP AM (this package) puts *everything* in the user process. The TB2's standard
  firmware already lets one process per node read and write the card's FIFOs without
  the operating system (SP-A18, SP-C02); Chang, Czajkowski, Hawblitzel and von Eicken
  kept that firmware and wrote AM as a user library over it. So the adapter half of
  this module is *nothing*: ``nic_drivers/tb2/_model.pyx`` runs IBM's firmware
  unchanged (the i860 walks the packet-length array, DMAs, receives into host
  memory). What every packet touches -- header, sequence numbers, windows, chunk
  assembly -- is ``_wire.pyx`` (Cython: it runs for every packet); the library
  around it is the endpoint, one file per mechanism (``endpoint.pyx``, ``window.pyx``,
  ``bulk.pyx``, ``keepalive.pyx``): paths charged as process time.
* FM (HPVM) runs a control program on the Myrinet NI (the LANai's "LCP") and a
  user library; its module installs the firmware through the NI's firmware slot
  (``nic_drivers/myrinet/firmware.py``: ``ni.load_firmware(fw)``) at ``insmod``
  and gives the user library the NI's send queue and a pinned host receive region.
* LCI does reliability and multicast forwarding on the NI or on the host, by module
  parameter; the same slot carries its firmware, and the host half is a library.

**What the kernel does** is the same for all three, and small: at ``insmod`` the
module finds its NIC among the node's network devices (``ENODEV`` if none), takes
the card for its protocol (here: reserves the TB2 so neither DP nor a raw FIFO
program can take it -- ``EBUSY`` for them), and registers what user code calls to
enter it: here one system call, ``am_open``, that hands the calling process the
card's FIFOs and an endpoint (a file descriptor), and pins its memory segments.
Every resource is registered through the kernel's undo log, so a failed ``insmod``
or an ``rmmod`` unwinds in reverse. An open endpoint holds a module reference:
``rmmod am`` is ``EBUSY`` while one lives.

**The card changes hands, as a card does.** DP and the FIFOs' single user cannot
share a TB2 (one client per node, SP-A18). The choice made here: ``insmod am`` on a
node where DP is loaded but idle *unloads DP* from that node (it is recorded in the
undo log), and ``rmmod am`` loads it back -- the node carries plain DP again and DP
messages flow. If DP is in use (open DP endpoints) ``insmod am`` fails with EBUSY
and DP stays; ``insmod am displace_dp=0`` refuses with EBUSY whenever DP is loaded.
So ``Cluster(nodes=2, nic="tb2", load=["am"])`` and ``dp ... --load am`` work as
expected.

**How the API reaches scripts.** ``libdp.am`` is the user half: ``AM.open(dp)``
makes the ``am_open`` system call for a libdp process and returns an `AM` whose
methods are the paper's Table 1 (``am_request_1..4``, ``am_reply_1..4``,
``am_store``, ``am_store_async``, ``am_get``, ``am_poll``), trio-async and, under
``.sync``, blocking. Each call submits a path to the process's CPU exactly as DP's
calls do (``kernelsim.run_path``; a call that must wait -- a full window, a store in
flight -- waits with ``kernelsim.wait_on`` on the endpoint's event queue, woken by the
adapter or by the keep-alive timer), so the modeled time of an AM call is the sum of what its
mechanism does: AM's own instructions (``costs.py``: the paper's per-call costs less
what the FIFO layer charges) plus every entry write, cache flush, sync and
MicroChannel access the TB2 package charges.

**The protocol** (SP-C05..C08), per pair of nodes and per direction, two channels:
requests (window 75 packets) and replies (76), SP-A28. Sequence numbers per message;
the sender keeps every unacknowledged message; the receiver drops a message with the
wrong number and NACKs the one it expects, and the sender goes back and resends it
and all later ones. Acks ride on every packet; an explicit one goes when a quarter of
the window is unacknowledged, and one per completed bulk chunk. Bulk data moves in
chunks of 8064 bytes (36 packets of 224) sharing one sequence number, placed by their
offsets; the window holds two chunks, so chunk N leaves once chunk N-2 is
acknowledged (SP-A30). The host hands a chunk over a few packets at a time -- one
length store per four entries, as it prepares them (SP-C03) -- so the adapter sends
the first packets while the host prepares the rest. A store of one packet is a short
message: copied like a request's words, acknowledged like one, its source free as
soon as it is handed over. A keep-alive, timed in unsuccessful polls, forces NACKs when
messages stay unacknowledged too long. Receive-FIFO entries are popped lazily and
flushed (SP-C04, in ``fifos.pyx``). Remote addresses must lie in the target's
registered segments: a transfer that does not is refused by the target before any
byte is written and fails with EFAULT at its initiator.

Module parameters (``insmod am key=value``, ``--load am:key=value``, and in the
``dp am-*`` commands ``--param am.key=value``) hold the windows, the chunk size,
the keep-alive timeout, the lazy-pop interval and AM's own per-call costs in cycles.
"""
from __future__ import annotations

import errno

from kernelsim import Module, Param

from protocols.am.costs import DEFAULT_POP_EVERY, derive
from protocols.am.bulk import Transfer
from protocols.am.endpoint import AM_PROTO, AmEndpoint, HandlerRuleError, Segment, Token
from protocols.am.service import AmService, when_card_free

__all__ = ["MODULE", "AM_PROTO", "AmEndpoint", "AmService", "HandlerRuleError", "Segment", "Token", "Transfer"]

_C = derive()


def _init(kernel, **params):
    devs = [d for d in kernel.netdevs.values() if getattr(d, "kind", None) == "tb2"]
    if not devs:
        raise OSError(errno.ENODEV, f"am: node {kernel.nid} has no TB2 adapter driven by the tb2 module")
    nd = devs[0]
    if params["chunk_packets"] > min(params["request_window"], params["reply_window"]):
        raise OSError(errno.EINVAL, "am: a chunk must fit in the window (chunk_packets <= request_window, "
                                    "reply_window)")
    if nd.user is not None:
        raise OSError(errno.EBUSY, f"am: process {nd.user.proc.pid} has the TB2 FIFOs of node {kernel.nid} mapped "
                                   "(one user per node, SP-A18)")
    mods = kernel.modules
    if mods.loaded("dp"):
        if not params["displace_dp"]:
            raise OSError(errno.EBUSY, f"am: DP holds the TB2 of node {kernel.nid} (rmmod dp first, or load am "
                                       "with displace_dp=1)")
        mods.rmmod("dp")                     # EBUSY, and nothing changed, while DP has open endpoints
        mods.on_unload(lambda: when_card_free(nd.dev, lambda: _restore_dp(kernel)))
    svc = AmService(kernel, nd, params)
    svc.reserve()                            # EBUSY if anyone else holds the card
    mods.on_unload(svc.unreserve)
    kernel.register_syscall("am_open", svc.sys_open)
    kernel.register_service("am", svc)
    return svc


def _restore_dp(kernel) -> None:
    """rmmod am: the node carries DP again (best effort: a failure leaves DP unloaded,
    and ``modprobe dp`` says why)."""
    if not kernel.modules.loaded("dp"):
        try:
            kernel.modules.modprobe("dp")
        except OSError:
            pass


def _exit(kernel, svc) -> None:
    """The loader's undo log releases the card and brings DP back (``depends`` keeps tb2 loaded)."""


def _cycles(key, source):
    return Param(float, _C[key], f"AM's own cost in {_C_DOC[key]} ({source})", min=0.0, max=1e6)


_C_DOC = {
    "poll_cycles": "cycles per am_poll besides the FIFO poll",
    "dispatch_cycles": "cycles per received message besides taking its FIFO entry",
    "hdr_cycles": "cycles to build a packet's AM header, before its length is stored",
    "word_cycles": "cycles per argument word beyond the first",
    "post_cycles": "cycles after a request or reply has been handed over (window bookkeeping)",
    "request_cycles": "cycles a request (or store) spends beyond a reply",
    "bulk_cycles": "cycles per packet of a bulk chunk besides the FIFO work",
}

MODULE = Module(
    name="am",
    description="SP Active Messages (GAM 1.1) over the TB2's user FIFOs: reliable, ordered, windowed, bulk chunks",
    sources=("SP-A17", "SP-A18", "SP-A22", "SP-A25", "SP-A26", "SP-A27", "SP-A28", "SP-A29", "SP-A30", "SP-A31",
             "SP-A32", "SP-A33", "SP-A34", "SP-A35", "SP-A36", "SP-A37", "SP-A38", "SP-A46",
             "SP-C01", "SP-C02", "SP-C03", "SP-C04", "SP-C05", "SP-C06", "SP-C07", "SP-C08"),
    depends=("tb2",),
    params={
        "request_window": Param(int, 75, "request window in packets (SP-A28)", min=1, max=127),
        "reply_window": Param(int, 76, "reply window in packets (SP-A28)", min=1, max=127),
        "chunk_packets": Param(int, 36, "packets per bulk chunk, 224 data bytes each (SP-A25, SP-A26)",
                               min=1, max=64),
        "ack_div": Param(int, 4, "explicit ack once 1/ack_div of the sender's window is unacknowledged (SP-A29)",
                         min=1, max=127),
        "keepalive_polls": Param(int, 500, "unsuccessful polls before a keep-alive forces NACKs (SP-A33, N7: "
                                 "unvalued; modeling choice: about 0.65 ms of spinning, some 13 round trips)",
                                 min=1, max=10**9),
        "realtime_keepalive_ms": Param(float, 25.0, "real time only: the least wall time of a keep-alive period, "
                                       "ms (modeling choice: a peer whose script starts late, or a host under "
                                       "load, is not a node that is gone; giving up takes max_keepalives "
                                       "periods, 5 s; modeled runs count polls only, SP-A33)", min=0.0, max=1e6),
        "max_keepalives": Param(int, 200, "keep-alives unanswered before a call fails with ETIMEDOUT (SP AM does "
                                "not recover from crashes, SP-C01; modeling choice)", min=1, max=10**9),
        "close_linger": Param(int, 32, "keep-alive periods a closing endpoint goes on answering after the last "
                              "packet it heard: its last acknowledgement may be lost, and the peer's keep-alive "
                              "then asks again (modeling choice, as TCP's TIME_WAIT; 0: leave at once)",
                              min=0, max=10**6),
        "pop_every": Param(int, DEFAULT_POP_EVERY, "receive entries consumed per lazy pop (SP-C04; N7: "
                           "unvalued, the tb2 module's default)", min=1, max=64),
        "checksum": Param(bool, False, "an end-to-end checksum in every packet: a 4-byte Adler-32 trailer over "
                          "source, destination, AM header and data, so a packet damaged past the link CRC is "
                          "dropped, counted and resent (modeling choice, issue 11; off: the paper's protocol and "
                          "costs; on: 220 data bytes per bulk packet)"),
        "checksum_byte_cycles": Param(float, 1.5, "cycles per byte summed, at the sender and again at the receiver "
                                      "(modeling choice: Adler-32's load and two adds per byte on the POWER2's two "
                                      "fixed-point units)", min=0.0, max=1e6),
        "checksum_packet_cycles": Param(float, 40.0, "cycles per packet summed besides its bytes: the two modulo "
                                        "reductions, storing or comparing the trailer (modeling choice)",
                                        min=0.0, max=1e6),
        "displace_dp": Param(bool, True, "unload an idle DP from the node at insmod and load it back at rmmod "
                             "(0: refuse with EBUSY while DP is loaded)"),
        "open_cycles": Param(float, 270.0, "am_open's kernel work: map the FIFOs, set up the endpoint (modeling "
                             "choice, as dp.open_cycles)", min=0.0, max=1e9),
        "poll_cycles": _cycles("poll_cycles", "SP-A35 less the FIFO poll"),
        "dispatch_cycles": _cycles("dispatch_cycles", "SP-A36 less the FIFO take and one more FIFO poll"),
        "hdr_cycles": _cycles("hdr_cycles", "modeling choice"),
        "word_cycles": _cycles("word_cycles", "slope of SP-A37/SP-A38 less the FIFO copy of a word"),
        "post_cycles": _cycles("post_cycles", "SP-A38 less header, FIFO send and retransmission copy"),
        "request_cycles": _cycles("request_cycles", "SP-A37 less its poll (SP-A35) less SP-A38"),
        "bulk_cycles": _cycles("bulk_cycles", "SP-A32 less the FIFO work of a 36-packet chunk, per packet"),
    },
    init=_init,
    exit=_exit,
)

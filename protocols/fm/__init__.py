"""Illinois Fast Messages (FM 2.x, as in HPVM 1.9) as the protocol module ``fm``.

Where FM's work runs (see ``protocols/am/__init__.py`` for how a protocol lives in dp)
====================================================================================

FM is a user-level library over a network interface that runs FM's own control
program, plus a shared-memory transport between the processes of one SMP host
(FACTS section 3; the paper is Bruno, Chien, Katz, Papadopoulos, "Performance
Enhancements for HPVM in Multi-Network and Heterogeneous Hardware"):

* **the NI** (``lcp.py``): the LANai control program, loaded into the board's firmware
  slot at ``insmod``. It sends what the host PIO'd into a context's send ring, and
  DMAs every arriving packet into the next slot of its context's pinned region --
  knowing nothing of credits (FM-C01..C07);
* **the kernel** (``service.py``, ``board.py``): at load, takes the board (DP and DP's
  Myrinet driver step aside, as DP does for AM: they come back at ``rmmod fm``), pins
  the receive region (FM-A05), starts the control program, and times PIO on the
  node's own modeled bus to choose the pacing chunk (FM-A17), which it reports in the
  kernel log (``node.dmesg()``) and ``modinfo``; then ``fm_open`` gives a process a
  context (FM-C05);
* **the user process** (``context.py``, ``transports.py``, ``_smt.pyx``): the streamed
  API, credits, handlers, the shared-memory transport. ``libdp.fm`` is its face.

What comes from the model, not from a constant: arrival notification (FM-C06) -- a poll
of host memory is a cache hit and no bus traffic, a poll of a LANai register is a PCI
read that the NI's DMAs wait for or are cut by (``kernelsim._pcibus``); PIO pacing
(FM-C13) -- the host bridge's posted-write queue of the profile's chipset makes
unpaced PIO collapse, or not; the shared-memory transport's costs -- each atomic
instruction (FM-A10) and copy it makes.

Module parameters (``insmod fm key=value``, ``--load fm:key=value``, and in the ``dp
fm-*`` commands ``--param fm.key=value``): the transports (``net``, ``smt``), the
notification (``notify``), pacing, credits and sizes, and FM's own costs: the host
library's, in CPU cycles, and the control program's, in NI cycles.

The costs are modeling choices: FM's code is not in our sources. Two anchors: a poll
costs 100 ns on Myrinet and about 150 ns on the shared-memory transport on the HPVM
1.9 machine (FM-A07, FM-A08), here in cycles of its assumed 450 MHz CPU. The control
program's per-packet work (``lcp_send_cycles``, ``lcp_recv_cycles``) is the one cost
calibrated: with everything else fixed, the zero-byte one-way latency on the hpvm19
profile with memory notification comes out at FM-B01's 8.8 us. Nothing is fitted to
any other figure; PCI notification, FM 2.1's machine, the shared-memory transport and
the pacing curves come out of the mechanisms with these same costs.
"""
from __future__ import annotations

import errno

from kernelsim import Module, Param

__all__ = ["MODULE"]


def _init(kernel, **params):
    from nic_drivers.myrinet._model import LanaiNI
    from protocols.fm.board import FmBoard
    from protocols.fm.service import FmService

    pacing = params["pacing"]
    if pacing not in ("auto", "off"):
        try:
            n = int(pacing, 0)
        except ValueError:
            n = -1
        if not 32 <= n <= 65536:
            raise OSError(errno.EINVAL, f"fm: parameter pacing is auto, off or a chunk of 32..65536 bytes, "
                                        f"not {pacing!r}")
    f = params["smt_frames"]
    if f & (f - 1):
        raise OSError(errno.EINVAL, f"fm: smt_frames must be a power of two (FM-A11), not {f}")
    if params["smt_queues"] > params["smt_procs"]:
        raise OSError(errno.EINVAL, f"fm: smt_queues ({params['smt_queues']}) must be at most smt_procs "
                                    f"({params['smt_procs']}) (1 <= M <= N, FM-A13)")
    mods = kernel.modules
    board = None
    if params["net"] == "myrinet":
        if not kernel.modeled:
            raise OSError(errno.EINVAL, "fm: the Myrinet transport runs in modeled time; in real time load fm with "
                                        "net=null (the shared-memory transport between real processes)")
        cards = [d for d in kernel.pci_devices if isinstance(d, LanaiNI)]
        if not cards:
            raise OSError(errno.ENODEV, f"fm: node {kernel.nid} has no Myrinet board (load fm with net=null for "
                                        "shared memory only)")
        card = cards[0]
        if mods.loaded("dp"):
            if not params["displace_dp"]:
                raise OSError(errno.EBUSY, f"fm: DP holds node {kernel.nid}'s board (rmmod dp first, or load fm "
                                           "with displace_dp=1)")
            mods.rmmod("dp")                     # EBUSY, and nothing changed, while DP has open endpoints
            mods.on_unload(lambda: _restore(kernel, "dp"))
        if card.driver is not None:
            drv = getattr(card.driver, "driver_module", None)
            if drv is None or not params["displace_dp"]:
                raise OSError(errno.EBUSY, f"fm: the board of node {kernel.nid} is driven by {card.driver!r}")
            mods.rmmod(drv)
            mods.on_unload(lambda: _restore(kernel, drv))
        board = FmBoard(kernel, card, params, params)
        card.driver = board
        mods.on_unload(lambda: setattr(card, "driver", None))
        mods.on_unload(board.release)
    svc = FmService(kernel, params, board)
    kernel.register_syscall("fm_open", svc.sys_open)
    kernel.register_service("fm", svc)
    kernel.log(f"fm: loaded: net={params['net']}, notify={params['notify']}, smt={'on' if params['smt'] else 'off'}"
               + (f", {params['contexts']} contexts x {params['max_hosts']} hosts x 2112-byte slots pinned "
                  f"({params['contexts'] * params['max_hosts'] * 2112} bytes)" if board is not None else ""))
    return svc


def _restore(kernel, name) -> None:
    """rmmod fm: the driver (and DP) it displaced come back (best effort: ``modprobe``
    says why if they cannot)."""
    if not kernel.modules.loaded(name):
        try:
            kernel.modules.modprobe(name)
        except OSError:
            pass


def _exit(kernel, svc) -> None:
    """The loader's undo log stops the board, frees the region and restores DP."""


def _cycles(default, help_text):
    return Param(float, float(default), help_text, min=0.0, max=1e7)


MODULE = Module(
    name="fm",
    description="Illinois Fast Messages 2.x (HPVM 1.9): streamed messages, credits, memory notification, "
                "shared-memory transport, PIO pacing",
    sources=("FM-A01", "FM-A02", "FM-A03", "FM-A04", "FM-A05", "FM-A06", "FM-A07", "FM-A08", "FM-A09", "FM-A10",
             "FM-A11", "FM-A12", "FM-A13", "FM-A15", "FM-A16", "FM-A17", "FM-B01", "FM-B19a",
             "FM-C01", "FM-C02", "FM-C03", "FM-C04", "FM-C05", "FM-C06", "FM-C07", "FM-C08", "FM-C09", "FM-C10",
             "FM-C11", "FM-C12", "FM-C13"),
    params={
        "net": Param(str, "myrinet", "network transport: myrinet, or null for shared memory only (FM-C08)",
                     choices=("myrinet", "null")),
        "notify": Param(str, "memory", "arrival notification: memory (the host polls its own memory, FM-C06) or pci "
                                       "(the host polls a LANai word across PCI, as before HPVM 1.9)",
                        choices=("memory", "pci")),
        "pacing": Param(str, "auto", "PIO pacing chunk: auto (the start-up micro-benchmark picks it, FM-A17), off, "
                                     "or a chunk in bytes (FM-A16: 160 on the 440BX)"),
        "contexts": Param(int, 4, "communication contexts (processes) per host sharing the NI (FM-A05, FM-C05)",
                          min=1, max=16),
        "max_hosts": Param(int, 64, "hosts the pinned receive region is sized for: one 2080-byte packet slot per "
                                    "host per context (FM-A05); the credit pool shares it (FM-A06)",
                           min=2, max=4096),
        "credits": Param(int, 0, "credits per peer, in packets (0: the region's or the SMT frames' share per peer "
                                 "of the job, FM-A06)", min=0, max=65536),
        "refill_div": Param(int, 2, "a receiver sends an explicit refill once credits/refill_div are owed "
                                    "(modeling choice; refills also ride on every packet back)", min=1, max=1024),
        "extract_on_wait": Param(bool, True, "a sender out of credits keeps extracting while it waits (FM-C03); 0 "
                                             "shows why: two hosts sending to each other deadlock"),
        "send_slots": Param(int, 16, "packet slots in each context's send ring in LANai SRAM (modeling choice)",
                            min=2, max=256),
        "smt": Param(bool, True, "the shared-memory transport between the job's processes on one host (FM-C08)"),
        "smt_procs": Param(int, 8, "N: processes a shared-memory region holds (FM-A13)", min=2, max=4096),
        "smt_queues": Param(int, 1, "M: receive queues per receiver, sender I uses I mod M (FM-A13, FM-C12; 0: one "
                                    "per sender, M = N)", min=0, max=4096),
        "smt_frames": Param(int, 64, "message frames of 2 KB of data in each receiver's free list, a power of two "
                                     "(FM-A11, FM-A12; FACTS N10: read as frames of 2 KB)", min=2, max=65536),
        "smt_name": Param(str, "", "real time: the POSIX shared-memory name of the job's region (default "
                                   "/dp-fm-UID-PROGRAM)"),
        "displace_dp": Param(bool, True, "unload an idle DP and its Myrinet driver at insmod and load them back at "
                                         "rmmod (0: refuse with EBUSY)"),
        "open_cycles": _cycles(400, "fm_open's kernel work (modeling choice, as dp.open_cycles)"),
        "send_cycles": _cycles(260, "host cycles of FM_begin_message and FM_end_message for a message: checks, "
                                    "credit, header (modeling choice)"),
        "packet_cycles": _cycles(60, "host cycles for each packet of a message after the first (modeling choice)"),
        "piece_cycles": _cycles(40, "host cycles of one FM_send_piece besides its data (modeling choice)"),
        "extract_cycles": _cycles(40, "host cycles of one FM_extract besides its polls and packets (modeling choice)"),
        "dispatch_cycles": _cycles(150, "host cycles per packet extracted: header, stream, credits (modeling "
                                        "choice)"),
        "handler_cycles": _cycles(100, "host cycles to start a message's handler (modeling choice)"),
        "receive_cycles": _cycles(30, "host cycles of one FM_receive besides its copy (modeling choice)"),
        "poll_cycles": _cycles(45, "host cycles of one Myrinet poll with memory notification: FM-A07's 100 ns at "
                                   "the 450 MHz of the assumed HPVM 1.9 machine"),
        "smt_poll_cycles": _cycles(68, "host cycles of one poll of one SMT queue: FM-A08's about 150 ns at 450 MHz"),
        "lcp_poll_cycles": _cycles(12, "NI cycles for the control program to notice a doorbell (modeling choice, "
                                       "as DP's)"),
        "lcp_send_cycles": _cycles(177, "NI cycles per packet sent: header, route, send DMA (calibrated: FM-B01 "
                                        "with the other costs)"),
        "lcp_txdone_cycles": _cycles(10, "NI cycles per send completion (modeling choice, as DP's)"),
        "lcp_recv_cycles": _cycles(177, "NI cycles per packet received: checks, context, slot, length word, host "
                                        "DMA (calibrated: FM-B01 with the other costs)"),
        "lcp_rxdone_cycles": _cycles(12, "NI cycles per delivery: free the buffer, count it (modeling choice, as "
                                         "DP's)"),
    },
    init=_init,
    exit=_exit,
)

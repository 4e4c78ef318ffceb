"""LCI on Myrinet as a loadable protocol module (the LCI paper: Verstoep et al., LCI-T3, LCI-A01..A56, LCI-C01..C28).

How LCI lives in dp
===================

LCI is the protocol that puts the most on the NI, and the one whose paper moves
work between host and NI to see what it costs; so this module is built around that
split (``protocols/am/__init__.py`` tells how a protocol module lives in dp in
general; this says what is LCI's own):

* **The NI half** is a control program for the LANai (``firmware/``), installed in
  the board's firmware slot at ``insmod`` in place of DP's. It is made of the modules
  of LCI-C04 -- host send queue, send queue, reliability/flow control, receive queue
  and dispatch, unicast, DMA to host, timer (and the NI TLB of RCPY) -- each a small
  class in its own file. Its handlers yield LANai cycles (the ``lci.ni_*`` profile
  keys), and the board charges PCI DMA, the send and receive engines and the wire.
* **The host half** is a user-level library (``host.py``) in the one LCI process of
  each node (LCI-A54), reaching the NI by PIO writes into SRAM and by the NI's DMAs
  into pinned host memory; its work is charged as host cycles (``lci.host_*``) plus
  the copies, PIO bursts and cache misses it causes. The kernel only hands out the NI
  (``service.py``: the ``lci_open`` system call) and turns the polling watchdog's
  interrupt into a wake-up of the process.
* **The user API** is ``libdp.lci`` (trio, and ``.sync`` for blocking calls).

**Variants are mechanisms** (``variants.py``). ``variant=`` takes the paper's names
(I-sdma, I-pio, I-rcpy, I-nirx, I-hrx, I-1k, I-4k, and composites such as I-pio-1k);
``reliability=``, ``transfer=`` and ``mtu=`` set one choice on top of it. What changes
with each is *which code runs where*, never a constant: SDMA copies into the host
packet queue and the NI fetches by DMA; PIO writes the NI buffer with write-combined
bursts and the NI fetches nothing; RCPY looks up both TLBs; reliability=ni adds
sequence numbers, windows and timers to the NI's handlers, reliability=host to the
host's calls; a bigger MTU means fewer NI buffers, a smaller window W and more
acknowledgements (W derived from NI memory: ``costs.py``).

**Calibration.** The ``lci.*`` costs were set once, so that I-sdma's LogP values come
out of the model within 5% of the paper's Table III on both platforms (the host's
cycles per library step from os and or; the LANai's cycles per firmware step from L
and g). Every other variant's figures come out of its mechanism with those same
costs: none was fitted to them (``dp lci-logp --variant all``).

**Multicast and fetch-and-add** (LCI-C10, C11, C12, C20; ``trees.py``,
``firmware/_multicast.pyx``, ``firmware/fetchadd.py``, ``hostmcast.py``). One broadcast
group of all nodes unless ``groups=`` gives disjoint ones; a spanning tree per root
(``tree=`` binary, binomial, k=F), computed from the member list the host writes into
each NI at insmod. The NIs forward out of their receive buffers (I-sdma, I-pio,
I-nirx) or the hosts do as they poll (``multicast=host``: I-sdma-hmc; always with
I-hrx). Each NI holds one fetch-and-add variable, answered by the NI (by the host with
I-hrx). MPICH's message-forwarding broadcast, for comparison, is ``libdp.lci_mcast``.

**Faults.** I-nirx and I-hrx recover from loss, corruption, duplication and
reordering (go-back-N with time-outs, duplicate detection, requests to resend what
was dropped for want of a buffer). I-sdma and the other variants without
retransmission assume a reliable network (LCI-C03): a bad CRC, a packet beyond the
buffers reserved for its sender, or credits that never come back stop them with EIO
naming the broken assumption. Malformed packets are dropped and counted, by reason,
by the NI (and by the host, which checks again).
"""
from __future__ import annotations

import errno

from kernelsim import Module, Param

from protocols.lci.hostmcast import install_group, my_group
from protocols.lci.service import LciEndpoint, LciService, lci_routes
from protocols.lci.trees import parse_tree
from protocols.lci.variants import (MTUS, MULTICAST, PAPER_VARIANTS, RELIABILITY, TRANSFER, Variant, parse_variant,
                                    resolve)

__all__ = ["MODULE", "LciService", "LciEndpoint", "Variant", "PAPER_VARIANTS", "parse_variant", "resolve"]


def _init(kernel, **params):
    variant = resolve(params["variant"], params["reliability"], params["transfer"], params["mtu"],
                      params["multicast"])
    tree = parse_tree(params["tree"])                         # EINVAL before anything is touched
    if variant.transfer == "rcpy" and variant.reliability == "host":
        raise OSError(errno.EINVAL, "lci: RCPY packets go straight to user memory, where the host's "
                                    "retransmission protocol never sees them: use reliability=none or ni with "
                                    "transfer=rcpy")
    devs = [d for d in kernel.netdevs.values() if getattr(d, "kind", None) == "myrinet"]
    if not devs:
        raise OSError(errno.ENODEV, f"lci: node {kernel.nid} has no Myrinet board driven by the myrinet module")
    nd = devs[0]
    group = my_group(kernel.nid, params["groups"], set(lci_routes(nd)) | {kernel.nid}, tree)
    mods = kernel.modules
    if mods.loaded("dp"):
        if not params["displace_dp"]:
            raise OSError(errno.EBUSY, f"lci: DP holds the LANai of node {kernel.nid} (rmmod dp first, or load lci "
                                       "with displace_dp=1)")
        mods.rmmod("dp")                 # EBUSY, and nothing changed, while DP has open endpoints
        mods.on_unload(lambda: _restore_dp(kernel))
    svc = LciService(kernel, nd, variant, params)   # EINVAL before anything is touched
    nd.stop()                            # DP's control program out ...
    mods.on_unload(nd.open)              # ... and back at rmmod
    mods.on_unload(svc.stop)
    svc.start()
    install_group(svc, group)            # the forwarding table in the NI, at initialisation (LCI-C10)
    kernel.register_syscall("lci_open", svc.sys_open)
    kernel.register_service("lci", svc)
    return svc


def _restore_dp(kernel) -> None:
    """rmmod lci: the node carries DP again (a failure leaves DP unloaded; modprobe dp says why)."""
    if not kernel.modules.loaded("dp"):
        try:
            kernel.modules.modprobe("dp")
        except OSError:
            pass


def _exit(kernel, svc) -> None:
    """The loader's undo log halts LCI's program, gives DP's back, and reloads DP."""


MODULE = Module(
    name="lci",
    description="LCI on Myrinet: reliable packets with NI credits or go-back-N on NI or host, SDMA/PIO/RCPY, "
                "1-4 KB MTU, polling watchdog, multicast forwarded on NI or host, fetch-and-add",
    sources=("LCI-A24", "LCI-A25", "LCI-A34", "LCI-A35", "LCI-A36", "LCI-A37", "LCI-A38", "LCI-A39", "LCI-A40",
             "LCI-A41", "LCI-A42", "LCI-A43", "LCI-A44", "LCI-A45", "LCI-A46", "LCI-A47", "LCI-A48", "LCI-A50",
             "LCI-A51", "LCI-A52", "LCI-A53", "LCI-A54",
             "LCI-C01", "LCI-C02", "LCI-C03", "LCI-C04", "LCI-C05", "LCI-C06", "LCI-C07", "LCI-C08", "LCI-C09",
             "LCI-C10", "LCI-C11", "LCI-C12", "LCI-C13", "LCI-C15", "LCI-C16", "LCI-C17", "LCI-C18", "LCI-C19",
             "LCI-C20", "LCI-C25", "LCI-C26", "LCI-C28"),
    depends=("myrinet",),
    params={
        "variant": Param(str, "I-sdma", "the paper's variant: I-sdma, I-pio, I-rcpy, I-nirx, I-hrx, I-1k, I-4k or a "
                                        "composite such as I-pio-1k (Table II)"),
        "reliability": Param(str, "", "none (credits, no retransmission), ni (go-back-N on the NI) or host "
                                      "(go-back-N in the library); empty: the variant's",
                             choices=("",) + RELIABILITY),
        "transfer": Param(str, "", "sdma, pio or rcpy; empty: the variant's", choices=("",) + TRANSFER),
        "mtu": Param(int, 0, "NI packet buffer size in bytes: 1024, 2048 or 4096; 0: the variant's",
                     choices=(0,) + MTUS),
        "multicast": Param(str, "", "where multicast packets are forwarded: ni (LCI-C10) or host (I-sdma-hmc, "
                                    "C20); empty: the variant's (host with I-hrx)", choices=("",) + MULTICAST),
        "tree": Param(str, "binary", "multicast spanning tree: binary (LCI-A50), binomial (A51) or k=F (fan-out F)"),
        "groups": Param(str, "", "multicast groups, disjoint (LCI-A50): members N or A-B joined by '+', groups "
                                 "separated by '/' (e.g. 0-31/32-63); empty: one group of all nodes (A52)"),
        "window": Param(int, 0, "W: credits per sender (reliability=none) or the go-back-N window; 0: derived "
                                "from NI memory (lci.rx_pool_bytes, lci.senders), for every variant",
                        min=0, max=4096),
        "displace_dp": Param(bool, True, "unload an idle DP from the node at insmod and load it back at rmmod "
                                         "(0: refuse with EBUSY while DP is loaded)"),
        "open_cycles": Param(float, 400.0, "lci_open's kernel work in cycles (modeling choice, as dp.open_cycles)",
                             min=0.0, max=1e9),
    },
    init=_init,
    exit=_exit,
)

"""IBM SP switch adapter "TB2": device model (`_model`), SP switch (`switch`), kernel
driver (`driver`) and the user-level FIFOs (`fifos`) that SP AM and the raw ping-pong
(``dp pingpong --nic tb2 --raw``, `libdp._tb2_raw`) are built on.
"""
from __future__ import annotations

import errno

from kernelsim import Module, Param
from nic_drivers.tb2._model import Tb2Adapter
from nic_drivers.tb2.driver import Tb2NetDevice
from nic_drivers.tb2.fifos import DEFAULT_POP_EVERY, Packet, UserFifos, open_fifos
from nic_drivers.tb2.switch import Tb2Switch

__all__ = ["Tb2Adapter", "Tb2NetDevice", "Tb2Switch", "UserFifos", "Packet", "MODULE", "LINK_KIND",
           "DEFAULT_PLATFORM", "hwaddr_for", "make_device", "connect", "check_profile", "open_fifos",
           "frame_station", "station_key"]

LINK_KIND = "tb2"
DEFAULT_PLATFORM = "sp_thin"


def hwaddr_for(nid: int) -> bytes:
    """The NART entry for a node: its switch node number and the route to use (SP-A11:
    four routes per pair; the cluster spreads destinations over them)."""
    return bytes([(nid >> 8) & 0xFF, nid & 0xFF, nid % 4])


def frame_station(packet) -> bytes:
    """Which adapter a packet is for, as a real transport routes it: its destination node
    number (the header's first two bytes, SP-A11), the same key `station_key` gives a NART entry."""
    return bytes(packet[0:2])


def station_key(hwaddr) -> bytes:
    return bytes(hwaddr[0:2])


# (key, smallest value a machine can have, largest): checked once when a card is made,
# so an impossible --param is EINVAL up front rather than a division by zero or a
# silently absurd figure deep in the model.
_DOMAIN = (
    ("pci.dma_rate_Bps", 1.0, None), ("switch.link_Bps", 1.0, None), ("cache.line_bytes", 1, 4096),
    ("tb2.send_fifo_entries", 1, 256), ("tb2.recv_fifo_entries_per_node", 1, 4096),
    ("tb2.fifo_bytes", 256, None), ("switch.routes", 1, 256), ("switch.nodes_per_chip", 1, None),
    ("tb2.dma_burst_bytes", 0, None),
)


def check_profile(profile) -> None:
    for key, lo, hi in _DOMAIN:
        v = profile[key]
        if v != v or v < lo or (hi is not None and v > hi):
            span = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
            raise OSError(errno.EINVAL, f"profile value {key}={v!r} is impossible for a TB2 machine (must be {span})")


def make_device(node):
    """Put a TB2 on `node`'s MicroChannel (the machine, not the driver)."""
    check_profile(node.profile)
    dev = Tb2Adapter(node.engine, node.mem, node.nid, hwaddr_for(node.nid), node.profile)
    node.pci_devices.append(dev)
    return dev


def _init(kernel, pop_every, budget, irq_holdoff_us):
    return kernel.bind_netdevs(
        Tb2Adapter, "tb",
        lambda card, name: Tb2NetDevice(kernel, card, name, pop_every=pop_every, budget=budget,
                                        irq_holdoff_us=irq_holdoff_us),
        "TB2 adapter")


def _exit(kernel, devs) -> None:
    """The loader's undo log brings each device down and unbinds it."""


MODULE = Module(
    name="tb2",
    description="IBM SP switch adapter (TB2): send/receive FIFOs for DP or one user process",
    sources=("SP-A14", "SP-A15", "SP-A16", "SP-A17", "SP-A18", "SP-A19", "SP-A20", "SP-A21", "SP-A22", "SP-A23",
             "SP-A24", "SP-C02", "SP-C03", "SP-C04", "HW-TB2"),
    params={
        "pop_every": Param(int, DEFAULT_POP_EVERY,
                           "receive entries consumed before they are popped back to the adapter (SP-C04 "
                           "'a fixed number'; N7: unvalued, modeling choice)", min=1, max=64),
        "budget": Param(int, 64, "receive entries the interrupt handler takes per pass", min=1, max=4096),
        "irq_holdoff_us": Param(float, 40.0, "after a pass that found a backlog (2+ packets), mask the arrival "
                                "interrupt this long so processes run (0: interrupt per arrival, which livelocks "
                                "a streaming receiver on this host)", min=0.0, max=100000.0),
    },
    init=_init,
    exit=_exit,
)


def connect(engine, profile, devices, rng=None):
    """Every adapter on one SP switch board (port = the node's position)."""
    check_profile(profile)
    sw = Tb2Switch(engine, profile, rng)
    for i, dev in enumerate(devices):
        sw.attach(dev.nid if hasattr(dev, "nid") else i, dev)
    return sw

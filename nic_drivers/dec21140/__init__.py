"""DEC 21140 Fast Ethernet: device model (`_model`) and Linux-style driver (`driver`)."""
from __future__ import annotations

import errno

from kernelsim import Module, Param
from nic_drivers.dec21140._model import Dec21140
from nic_drivers.dec21140.driver import TulipNetDevice

__all__ = ["Dec21140", "TulipNetDevice", "MODULE", "make_device", "hwaddr_for", "frame_station", "station_key"]

LINK_KIND = "ether"


def hwaddr_for(nid: int) -> bytes:
    """A locally administered MAC per node id (the cluster's address plan)."""
    return bytes([0x02, 0x00, 0xD9, 0x00, (nid >> 8) & 0xFF, nid & 0xFF])


def frame_station(frame) -> bytes:
    """Which station a frame is for, as a switch reads it: its destination MAC (the same
    key `station_key` gives a NART entry). Real transports of more than two nodes route by it."""
    return bytes(frame[0:6])


def station_key(hwaddr) -> bytes:
    return bytes(hwaddr)


def make_device(node):
    """Put a 21140 on `node`'s PCI bus (the machine, not the driver)."""
    dev = Dec21140(node.engine, node.mem, hwaddr_for(node.nid), node.profile)
    node.pci_devices.append(dev)
    return dev


def _init(kernel, tx_ring, rx_ring, budget, store_forward, burst_longwords):
    return kernel.bind_netdevs(
        Dec21140, "eth",
        lambda card, name: TulipNetDevice(kernel, card, name, tx_ring=tx_ring, rx_ring=rx_ring, budget=budget,
                                          store_forward=store_forward, burst_longwords=burst_longwords),
        "DEC 21140")


def _exit(kernel, devs) -> None:
    """The loader's undo log stops each device and frees its rings."""


MODULE = Module(
    name="dec21140",
    description="DEC 21140 Fast Ethernet driver (tulip-style rings, call-gate friendly transmit)",
    sources=("DP-A02", "HW-21140"),
    params={
        "tx_ring": Param(int, 32, "transmit descriptors (Linux tulip: 32)", min=2, max=512),
        "rx_ring": Param(int, 128, "receive descriptors (Linux tulip: 128)", min=2, max=1024),
        "budget": Param(int, 16, "interrupt handler work budget (CSR5 passes per interrupt)", min=1, max=1024),
        "store_forward": Param(bool, True, "CSR6 SF: start transmitting only once the whole frame is in the FIFO"),
        "burst_longwords": Param(int, 32, "CSR0 programmable burst length in longwords (0: unlimited)",
                                 min=0, max=63),
    },
    init=_init,
    exit=_exit,
)


DEFAULT_PLATFORM = "p133"


def connect(engine, profile, devices, rng=None):
    """Two cards back to back on one full-duplex cable (the DP paper's Fig. 5 set-up)."""
    from kernelsim.media import EtherLink

    if len(devices) != 2:
        raise OSError(errno.EINVAL, f"dec21140: a back-to-back cable joins 2 nodes, not {len(devices)} "
                                    "(switched Ethernet is not modeled yet)")
    link = EtherLink(engine, profile, rng)
    link.attach(0, devices[0])
    link.attach(1, devices[1])
    return link

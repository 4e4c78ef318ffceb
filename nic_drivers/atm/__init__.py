"""ATM: an OC-3c adapter in the style of the FORE PCA-200E -- device model (`_model`),
medium (`_medium`: fibers and a cell switch) and Linux-style driver (`driver`)."""
from __future__ import annotations

import errno

from kernelsim import Module, Param
from nic_drivers.atm._medium import CellLink, CellPort, CellSwitch
from nic_drivers.atm._model import Pca200e
from nic_drivers.atm.driver import ENCAP_BYTES, AtmNetDevice

__all__ = ["Pca200e", "AtmNetDevice", "CellLink", "CellSwitch", "CellPort", "MODULE", "LINK_KIND",
           "DEFAULT_PLATFORM", "hwaddr_for", "make_device", "connect"]

LINK_KIND = "atm"
DEFAULT_PLATFORM = "p133_atm"
VCI_BASE = 32           # VCIs 0-31 are reserved (signalling, OAM, ILMI)


def hwaddr_for(nid: int) -> tuple[int, int]:
    """The (VPI, VCI) on which every peer reaches node `nid` (see driver.py, Addressing)."""
    return (0, VCI_BASE + nid)


def make_device(node):
    """Put an ATM adapter on `node`'s PCI bus (the machine, not the driver)."""
    dev = Pca200e(node.engine, node.mem, hwaddr_for(node.nid), node.profile)
    node.pci_devices.append(dev)
    return dev


def _init(kernel, mtu, encap, small_buffers, large_buffers, supply_block, budget):
    return kernel.bind_netdevs(
        Pca200e, "atm",
        lambda card, name: AtmNetDevice(kernel, card, name, mtu=mtu, encap=encap, small_buffers=small_buffers,
                                        large_buffers=large_buffers, supply_block=supply_block, budget=budget),
        "ATM adapter")


def _exit(kernel, devs) -> None:
    """The loader's undo log stops each adapter and frees its queues and buffers."""


MODULE = Module(
    name="atm",
    description="OC-3c ATM adapter driver (PCA-200E-style host queues, AAL5 SAR on the card, one VC per node pair)",
    sources=("HW-ATM", "DP-B08", "DP-B09"),
    params={
        "mtu": Param(int, 1536, "AAL5 MTU of every VC, link header included (DP needs 2 + 8 + 1500)",
                     min=64, max=65535),
        "encap": Param(str, "vcmux", "link header: vcmux = 2-byte protocol id; llc = RFC 2684 LLC/SNAP, 8 bytes",
                       choices=tuple(ENCAP_BYTES)),
        "small_buffers": Param(int, 192, "384-byte receive buffers (Linux fore200e: 6 blocks of 32)", min=1, max=4096),
        "large_buffers": Param(int, 128, "4032-byte receive buffers (Linux fore200e: 4 blocks of 32)", min=1, max=4096),
        "supply_block": Param(int, 32, "receive buffers per buffer-supply queue entry", min=1, max=32),
        "budget": Param(int, 16, "interrupt handler passes per interrupt", min=1, max=1024),
    },
    init=_init,
    exit=_exit,
)


def connect(engine, profile, devices, rng=None):
    """Two adapters back to back on a fiber pair, or every adapter on one cell switch.

    The switch's VC translation table is the cluster's provisioning: for every ordered
    pair (s, d), cells s sends on d's VCI leave the switch towards d on s's VCI.
    """
    if len(devices) == 2 and not profile["link.switched"]:
        link = CellLink(engine, profile, rng)
        link.attach(0, devices[0])
        link.attach(1, devices[1])
        return link
    if not devices:
        raise OSError(errno.EINVAL, "atm: no adapters to connect")
    sw = CellSwitch(engine, profile, len(devices), rng)
    for port, dev in enumerate(devices):
        sw.attach(port, dev)
    for s, src in enumerate(devices):
        for d, dst in enumerate(devices):
            sw.add_vc(s, dst.hwaddr[1], d, src.hwaddr[1])
    return sw

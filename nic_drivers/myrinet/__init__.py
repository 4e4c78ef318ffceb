"""Myrinet: the LANai board model (`_model`), its network (`fabric`), DP's control
program (`firmware`), the driver (`driver`) and the EPOS pipeline (`pipeline`)."""
from __future__ import annotations

import errno

from kernelsim import Module, Param
from kernelsim._pcibus import PciBus
from nic_drivers.myrinet._model import LanaiNI
from nic_drivers.myrinet.driver import MyrinetNetDevice
from nic_drivers.myrinet.fabric import MyrinetFabric
from nic_drivers.myrinet.firmware import RX_MODES, DPFirmware, Firmware

__all__ = ["LanaiNI", "MyrinetNetDevice", "MyrinetFabric", "Firmware", "DPFirmware", "MODULE", "LINK_KIND",
           "DEFAULT_PLATFORM", "hwaddr_for", "make_device", "connect"]

LINK_KIND = "myrinet"
DEFAULT_PLATFORM = "ppro200_lanai4"


def hwaddr_for(nid: int) -> int:
    """A node's Myrinet address in the cluster description: its node id.

    Routes depend on where the sender sits, so they are not an address of the
    destination alone: the driver turns the node id into route bytes from the route
    table the mapper loaded into its NI (see ``fabric.MyrinetFabric.map_routes``).
    """
    return nid


_POSITIVE = ("lanai.hz", "lanai.sram_bytes", "lanai.buffer_bytes", "pci.dma_rate_Bps", "pci.clock_hz",
             "pci.bus_bytes", "pci.wc_burst_bytes", "link.rate_bps", "switch.hops", "switch.ports")


def _check_profile(profile) -> None:
    for key in _POSITIVE:
        if not profile[key] > 0:
            raise OSError(errno.EINVAL, f"myrinet: profile value {key} must be positive, not {profile[key]!r}")


def make_device(node):
    """Put a LANai board on `node`'s PCI bus (the machine, not the driver)."""
    _check_profile(node.profile)
    dev = LanaiNI(node.engine, node.mem, node.nid, node.profile)
    if "chipset.pwq_lines" in node.profile:
        dev.bus = PciBus(node.profile)      # the machine models its PCI bus and host bridge
    node.pci_devices.append(dev)
    return dev


def connect(engine, profile, devices, rng=None):
    """Cable the boards to the profile's ``switch.topology`` (chain, grid, clos) and map the routes."""
    _check_profile(profile)
    fabric = MyrinetFabric(engine, profile, rng)
    fabric.build(devices)
    return fabric


def _init(kernel, tx_ring, rx_ring, bulk_ring, rx_mode, watchdog_us, pio_max, budget, abandon_ms):
    return kernel.bind_netdevs(
        LanaiNI, "myri",
        lambda card, name: MyrinetNetDevice(kernel, card, name, tx_ring=tx_ring, rx_ring=rx_ring,
                                            bulk_ring=bulk_ring, rx_mode=rx_mode, watchdog_us=watchdog_us,
                                            pio_max=pio_max, budget=budget,
                                            abandon_s=abandon_ms * 1e-3),
        "LANai board")


def _exit(kernel, devs) -> None:
    """The loader's undo log stops each board and frees its rings."""


MODULE = Module(
    name="myrinet",
    description="Myrinet LANai driver with DP's control program, PIO/DMA sends and the EPOS bulk pipeline",
    sources=("LCI-A15..A35", "LCI-A40..A48", "LCI-C02", "LCI-C08", "LCI-C09", "LCI-C25", "LCI-C27",
             "FM-A02..A07", "FM-C01", "FM-C06", "FM-C07", "EP-A01..A20", "EP-C01..C08", "HW-MYRI"),
    params={
        "tx_ring": Param(int, 16, "send descriptors, each with an NI send buffer and a pinned host buffer",
                         min=2, max=256),
        "rx_ring": Param(int, 64, "slots of the kernel receive ring in pinned host memory", min=2, max=4096),
        "bulk_ring": Param(int, 32, "slots of the EPOS bulk receive ring (0: no bulk transfers)", min=0, max=4096),
        "rx_mode": Param(str, "irq", "kernel-ring notification: irq, watchdog (LCI-C09 polling watchdog) or poll",
                         choices=RX_MODES),
        "watchdog_us": Param(float, 0.0, "polling-watchdog timeout in us (0: the profile's lanai.watchdog_s)",
                             min=0.0, max=1e6),
        "pio_max": Param(int, -1, "frames up to this many bytes go by PIO, longer ones by DMA "
                                  "(-1: the profile's lanai.pio_max_bytes; 0: always DMA)", min=-1, max=65535),
        "budget": Param(int, 16, "interrupt handler passes per interrupt", min=1, max=1024),
        "abandon_ms": Param(float, 1000.0, "a host ring that holds NI buffers and has consumed nothing for this "
                                           "long is deemed abandoned: its held packets are dropped and counted, "
                                           "so the NI hears other traffic again (0: never; modeling choice)",
                            min=0.0, max=1e7),
    },
    init=_init,
    exit=_exit,
)

"""The shared NIC base: every device model drives its interrupt line and times its DMA
through `NicModel`, every driver binds its card through `NicDriver`.

One formula for a bus-master transfer (set-up, a re-arbitration per burst after the
first, bytes at the rate) and one interrupt-line rule (a sink hears each change of
level, rising edges are counted) -- checked here on each card with its own profile.
"""
from __future__ import annotations

import errno
import math

import pytest

from kernelsim import Engine, PhysMem
from libdp._cluster import build_profile
from nic_drivers._nic import NicDriver, NicModel
from nic_drivers.atm import hwaddr_for as atm_hwaddr
from nic_drivers.atm._model import Pca200e
from nic_drivers.atm.driver import AtmNetDevice
from nic_drivers.dec21140 import hwaddr_for as ether_hwaddr
from nic_drivers.dec21140._model import Dec21140
from nic_drivers.dec21140.driver import TulipNetDevice
from nic_drivers.myrinet._model import LanaiNI
from nic_drivers.myrinet.driver import MyrinetNetDevice
from nic_drivers.tb2 import hwaddr_for as tb2_hwaddr
from nic_drivers.tb2._model import Tb2Adapter
from nic_drivers.tb2.driver import Tb2NetDevice


def _card(kind):
    eng, mem = Engine(), PhysMem(1 << 20)
    if kind == "dec21140":
        prof = build_profile("p133")
        return Dec21140(eng, mem, ether_hwaddr(1), prof), prof
    if kind == "atm":
        prof = build_profile("p133_atm")
        return Pca200e(eng, mem, atm_hwaddr(1), prof), prof
    if kind == "myrinet":
        prof = build_profile("ppro200_lanai4")
        return LanaiNI(eng, mem, 1, prof), prof
    prof = build_profile("sp_thin")
    return Tb2Adapter(eng, mem, 1, tb2_hwaddr(1), prof), prof


KINDS = ["dec21140", "atm", "myrinet", "tb2"]


def test_every_model_and_driver_stands_on_the_base():
    for cls in (Dec21140, Pca200e, LanaiNI, Tb2Adapter):
        assert issubclass(cls, NicModel)
    for cls in (TulipNetDevice, AtmNetDevice, MyrinetNetDevice, Tb2NetDevice):
        assert issubclass(cls, NicDriver)


@pytest.mark.parametrize("kind", KINDS)
def test_a_dma_transfer_costs_setup_bursts_and_bytes(kind):
    dev, prof = _card(kind)
    if kind == "dec21140":
        dev.csr_write(0, 8 << 8)                 # PBL 8 longwords: 32-byte bursts
    burst = dev.burst_bytes
    assert dev.dma_setup == prof["pci.dma_setup_s"] and dev.dma_rate == prof["pci.dma_rate_Bps"]
    for n in (4, 64, 1500, 9000):
        bursts = math.ceil(n / burst) if burst else 1
        want = prof["pci.dma_setup_s"] + (bursts - 1) * dev.burst_overhead + n / prof["pci.dma_rate_Bps"]
        before = dev.dma_bytes
        assert dev.dma_time(n) == pytest.approx(want, rel=1e-12)
        assert dev.dma_bytes == before + n       # a transfer is counted
    if kind == "myrinet":
        assert burst == 0 and dev.burst_overhead == 0.0   # one burst per transfer
    else:
        assert burst > 0 and dev.burst_overhead == prof["pci.burst_overhead_s"] > 0
        # one byte past a burst boundary costs a re-arbitration
        step = dev.dma_time(burst + 1) - dev.dma_time(burst)
        assert step == pytest.approx(dev.burst_overhead + 1 / dev.dma_rate, rel=1e-9)


def test_a_card_without_a_dma_rate_is_refused():
    prof = build_profile("p133")

    class NoRate:                                # a profile the checks of build_profile never saw
        def __getitem__(self, key):
            return 0.0 if key == "pci.dma_rate_Bps" else prof[key]

    with pytest.raises(OSError) as e:
        Dec21140(Engine(), PhysMem(1 << 16), ether_hwaddr(1), NoRate())
    assert e.value.errno == errno.EINVAL


def test_the_interrupt_line_reports_changes_of_level_and_counts_rising_edges():
    dev, _ = _card("myrinet")
    heard = []
    dev.irq_sink = heard.append
    dev.csr_write(0x04, 0x1)                     # EIMR: the RX interrupt enabled
    dev.raise_host(0x1)
    dev.raise_host(0x1)                          # already high: no second edge
    dev.csr_write(0x00, 0x1)                     # ISR write 1 to clear: the line drops
    dev.raise_host(0x2)                          # not enabled: the line stays low
    dev.raise_host(0x1)
    assert heard == [True, False, True]
    assert dev.irq_raised == 2

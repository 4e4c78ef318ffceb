"""The node's PCI bus and host bridge (kernelsim._pcibus), and the kernel pieces FM added
beside it: the board's DMA on the bus, the kernel log, SMP CPUs, profile bases, modinfo
of a loaded module."""
from __future__ import annotations

import errno

import pytest

from kernelsim import load_profile
from kernelsim._pcibus import PciBus
from libdp import Cluster

LINE = 32


def bus(name="lpr_lanai4", **over):
    p = load_profile(name)
    for k, v in over.items():
        p.override(k.replace("__", "."), v)
    return PciBus(p)


def drain_rate(b, nbytes):
    """MB/s of a PIO write of `nbytes` on an idle bus followed by a flushing read (a
    message's write and the wait until it is there)."""
    c = b.idle_copy()
    return nbytes / c.read(c.post(0.0, 0x1000, nbytes)) / 1e6


def test_a_queue_full_of_consecutive_lines_is_one_burst_and_the_cpu_goes_on():
    b = bus()
    cpu = b.post(0.0, 0x1000, 5 * LINE)
    assert cpu == pytest.approx(5 * b.post_s)                # posted: the CPU does not wait for PCI
    assert b.bursts == 1 and b.retries == 0
    assert b.drained_at == pytest.approx(b.burst_s + 5 * (LINE // b.bus_bytes) * b.clk)
    assert b.drained_at > cpu


def test_the_440bx_breaks_down_past_its_queue_and_the_440lx_does_not():
    bx = bus("lpr_lanai4")
    bx.post(0.0, 0x1000, 6 * LINE)
    assert bx.retries == 1 and bx.collapsed_lines >= 1
    lx = bus("kayak_lanai4")
    lx.post(0.0, 0x1000, 6 * LINE)
    assert lx.retries == 0 and lx.bursts == 6                # a burst per line, the CPU held when full
    lpr = [drain_rate(bus("lpr_lanai4"), n) for n in (32, 64, 128, 160, 192, 512, 2048)]
    kayak = [drain_rate(bus("kayak_lanai4"), n) for n in (32, 64, 128, 160, 192, 512, 2048)]
    assert lpr[:4] == sorted(lpr[:4]) and lpr[3] == max(lpr)  # rises to 160 bytes (FM-B21)...
    assert lpr[4] < lpr[3] and lpr[-1] < lpr[4]               # ...then falls
    assert kayak == sorted(kayak)                             # robust (FM-B22)
    assert lpr[-1] < kayak[-1] and lpr[2] > kayak[2]          # worse for long writes, better for short


def test_a_deeper_queue_moves_the_collapse():
    deep = bus(chipset__pwq_lines=8)
    assert drain_rate(deep, 8 * LINE) > drain_rate(bus(), 8 * LINE)


def test_a_read_waits_for_posted_writes():
    b = bus()
    b.post(0.0, 0x1000, 4 * LINE)
    done = b.read(0.0)
    assert b.sampled_at == pytest.approx(b.drained_at + b.read_bus_s)
    assert done == pytest.approx(b.sampled_at + b.read_s - b.read_bus_s)


def test_a_read_cuts_a_long_dma_after_its_latency_timer_and_delays_it():
    b = bus()
    end = b.dma_start(0.0, 2048)
    b.read(0.1e-6)                                            # asks while the DMA's timer runs
    assert b.sampled_at == pytest.approx(b.lt_s + b.read_bus_s)
    assert b.dma_end == pytest.approx(end + b.read_bus_s + b.dma_setup_s)
    assert b.dma_preempted == 1


def test_a_short_dma_keeps_the_bus_and_the_read_waits():
    b = bus()
    end = b.dma_start(0.0, 32)
    assert end < b.lt_s
    b.read(0.0)
    assert b.dma_end == end and b.dma_preempted == 0
    assert b.sampled_at == pytest.approx(end + b.read_bus_s)


def test_one_dma_at_a_time():
    b = bus()
    b.dma_start(0.0, 64)
    with pytest.raises(RuntimeError):
        b.dma_start(0.0, 64)


def test_a_profile_without_a_bus_model_has_none_and_with_one_the_board_uses_it():
    c = Cluster(nodes=1, platform="ppro200_lanai4", nic="myrinet")
    assert c.nodes[0].pci_devices[0].bus is None
    c = Cluster(nodes=1, platform="lpr_lanai4", nic="myrinet")
    card = c.nodes[0].pci_devices[0]
    assert card.bus is not None and "pci_bus" in card.stats()


def test_the_boards_dma_finishes_later_when_a_read_cuts_in():
    def run(read_at):
        c = Cluster(nodes=1, platform="lpr_lanai4", nic="myrinet")
        card = c.nodes[0].pci_devices[0]
        eng = c.engine
        done = []
        src = c.nodes[0].mem.alloc(4096)
        t0 = eng.now
        card.host_dma(False, src, card.firmware_bytes, 2048, lambda _: done.append(eng.now) or None, None)
        if read_at is not None:
            eng.at(t0 + read_at, lambda _: card.bus.read(eng.now))
        while not done and eng.step():
            pass
        return done[0] - t0

    plain, cut = run(None), run(0.2e-6)
    b = bus()
    assert cut - plain == pytest.approx(b.read_bus_s + b.dma_setup_s)


def test_kernel_log():
    c = Cluster(nodes=2)
    node = c.nodes[0]
    node.log("hello")
    node.engine.now = 1.5
    node.log("later")
    lines = node.dmesg()
    assert lines[-2].endswith("] hello") and lines[-1] == "[    1.500000] later"


def test_processes_are_placed_on_the_cpus_of_a_multiprocessor():
    c = Cluster(nodes=1, platform="lpr_lanai4", nic="myrinet")
    node = c.nodes[0]
    assert len(node.cpus) == 2
    a, b = node.spawn("a"), node.spawn("b")
    assert a.cpu is node.cpus[0] and b.cpu is node.cpus[1]
    assert node.spawn("c", cpu=1).cpu is node.cpus[1]
    with pytest.raises(OSError) as e:
        node.spawn("d", cpu=2)
    assert e.value.errno == errno.EINVAL
    uni = Cluster(nodes=2).nodes[0]
    assert len(uni.cpus) == 1 and uni.spawn().cpu is uni.cpu and uni.spawn().cpu is uni.cpu


def test_a_profile_may_start_from_another():
    lpr, hpvm, kayak = load_profile("lpr_lanai4"), load_profile("hpvm19"), load_profile("kayak_lanai4")
    assert hpvm.name == "hpvm19" and hpvm.nic == "myrinet"
    assert hpvm.as_dict() == lpr.as_dict()
    assert kayak["cpu.hz"] == 300e6 and kayak["lanai.hz"] == lpr["lanai.hz"]
    assert kayak.entry("fsb.hz").source.startswith("FM-A18")
    for name in ("lpr_lanai4", "kayak_lanai4", "hpvm19", "pii300_lanai4"):
        p = load_profile(name)
        for k in p.keys():
            e = p.entry(k)
            assert e.source and e.unit, f"{name}: {k} needs a source and a unit"


def test_modinfo_of_a_loaded_module_says_what_it_runs_with():
    c = Cluster(nodes=2)
    info = c.nodes[0].modules.modinfo("dp")
    assert info["loaded"]["params"]["tbp_slots"] == 0
    c.nodes[0].modules.rmmod("dp")
    assert "loaded" not in c.nodes[0].modules.modinfo("dp")

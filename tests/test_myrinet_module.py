"""The myrinet driver as a kernel module: load, unload, refusals and unwinding."""
from __future__ import annotations

import errno
import random

import pytest

from kernelsim import Engine, Node
from libdp import Cluster
from libdp._cluster import build_profile
from nic_drivers import myrinet
from nic_drivers.myrinet import LanaiNI


def bare_nodes(n=2, platform="ppro200_lanai4", params=()):
    """Nodes with LANai boards cabled and mapped, but no module loaded."""
    prof = build_profile(platform, params)
    eng = Engine()
    nodes = [Node(i, prof.copy(), eng) for i in range(n)]
    devs = [myrinet.make_device(nd) for nd in nodes]
    for nd in nodes:
        nd.hosts = {i: {myrinet.LINK_KIND: myrinet.hwaddr_for(i)} for i in range(n)}
    fabric = myrinet.connect(eng, prof, devs, random.Random(0))
    return nodes, devs, fabric


def kernel_state(node):
    return {"mem": node.mem.in_use(), "irq": node.irq.stats(), "netdevs": dict(node.netdevs),
            "lsmod": node.modules.lsmod(), "drivers": [d.driver for d in node.pci_devices],
            "firmware": [d.firmware for d in node.pci_devices],
            "running": [d.stats()["running"] for d in node.pci_devices]}


def test_load_binds_the_board_and_unload_gives_everything_back():
    nodes, devs, _ = bare_nodes()
    node, dev = nodes[0], devs[0]
    before = kernel_state(node)
    node.modules.insmod("myrinet")
    nd = node.netdevs["myri0"]
    assert dev.driver is nd and dev.firmware is not None and dev.stats()["running"]
    assert node.mem.in_use() > before["mem"]
    assert nd.routes[1] == dev.route_table[1] and nd.routes[1][0] & 0x80
    node.modules.rmmod("myrinet")
    assert kernel_state(node) == before


def test_dp_holds_the_driver_until_it_goes():
    nodes, _, _ = bare_nodes()
    node = nodes[0]
    before = kernel_state(node)
    node.modules.modprobe("myrinet")
    node.modules.modprobe("dp")
    with pytest.raises(OSError) as ei:
        node.modules.rmmod("myrinet")
    assert ei.value.errno == errno.EBUSY
    node.modules.rmmod("dp")
    node.modules.rmmod("myrinet")
    assert kernel_state(node) == before


@pytest.mark.parametrize("params", [
    {"rx_mode": "sometimes"},
    {"tx_ring": 1},
    {"pio_max": -2},
    {"nonsense": 3},
    {"watchdog_us": "soon"},
])
def test_bad_parameters_are_einval_and_change_nothing(params):
    nodes, _, _ = bare_nodes()
    node = nodes[0]
    before = kernel_state(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("myrinet", **params)
    assert ei.value.errno == errno.EINVAL
    assert kernel_state(node) == before


def test_probe_that_runs_out_of_sram_unwinds_memory_and_irq():
    """256 send buffers of 4224 bytes do not fit the LANai 4.1's 1 MB: the firmware
    refuses after host memory and the IRQ line were taken; all of it goes back."""
    nodes, _, _ = bare_nodes()
    node = nodes[0]
    before = kernel_state(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("myrinet", tx_ring=256)
    assert ei.value.errno == errno.ENOMEM
    assert kernel_state(node) == before
    node.modules.insmod("myrinet")                  # and the board still works afterwards
    assert node.netdevs["myri0"].dev.stats()["running"]


def test_probe_without_a_free_irq_line_unwinds():
    nodes, _, _ = bare_nodes()
    node = nodes[0]
    for line in range(3, node.irq.NLINES):
        node.irq.request_irq(line, lambda pending: iter(()), f"other{line}")
    before = kernel_state(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("myrinet")
    assert ei.value.errno == errno.EBUSY
    assert kernel_state(node) == before


def test_probe_without_host_memory_unwinds():
    nodes, _, _ = bare_nodes(params=[("mem.bytes", 400_000)])
    node = nodes[0]
    before = kernel_state(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("myrinet")
    assert ei.value.errno == errno.ENOMEM
    assert kernel_state(node) == before


def test_second_board_failing_unwinds_the_first():
    nodes, _, _ = bare_nodes()
    node = nodes[0]
    other = LanaiNI(node.engine, node.mem, node.nid, build_profile("ppro200_lanai4", [("lanai.sram_bytes", 200_000)]))
    node.pci_devices.append(other)                   # too little SRAM for 16 send buffers
    before = kernel_state(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("myrinet")
    assert ei.value.errno == errno.ENOMEM
    assert kernel_state(node) == before


def test_no_board_is_enodev():
    prof = build_profile("ppro200_lanai4")
    node = Node(0, prof, Engine())
    with pytest.raises(OSError) as ei:
        node.modules.insmod("myrinet")
    assert ei.value.errno == errno.ENODEV
    assert node.modules.lsmod() == []


def test_reload_after_traffic_keeps_working():
    c = Cluster(nodes=2, nic="myrinet")
    from libdp import pingpong
    first = c.run_spmd(pingpong, [1, 512], 5)[0]
    for n in c.nodes:
        n.modules.rmmod("dp")
        n.modules.rmmod("myrinet")
        assert not n.pci_devices[0].stats()["running"]
        n.modules.insmod("myrinet")
        n.modules.insmod("dp")
    again = c.run_spmd(pingpong, [1, 512], 5)[0]
    assert [r["rtt_us"] for r in again] == pytest.approx([r["rtt_us"] for r in first], rel=1e-9)


def test_modinfo_names_the_parameters_and_sources():
    info = Cluster(nodes=1, nic="myrinet").nodes[0].modules.modinfo("myrinet")
    assert {"tx_ring", "rx_ring", "bulk_ring", "rx_mode", "watchdog_us", "pio_max"} <= set(info["params"])
    assert "LCI-C09" in info["sources"] and "EP-C01..C08" in info["sources"]


@pytest.mark.parametrize("key,value", [("switch.hops", 0), ("link.rate_bps", 0), ("lanai.hz", 0)])
def test_impossible_profile_values_are_refused(key, value):
    with pytest.raises(OSError) as ei:
        Cluster(nodes=2, nic="myrinet", params=[(key, value)])
    assert ei.value.errno == errno.EINVAL


def test_too_many_nodes_for_the_switches_is_einval():
    chain = ("switch.topology", "chain")
    with pytest.raises(OSError) as ei:
        Cluster(nodes=9, nic="myrinet", params=[chain])             # one 8-port switch
    assert ei.value.errno == errno.EINVAL
    Cluster(nodes=9, nic="myrinet", params=[chain, ("switch.hops", 2)])

"""Platform profiles (values, sources, overrides) and the kernel module loader."""
from __future__ import annotations

import errno
import math

import pytest

from kernelsim import available_modules, available_profiles, find_module, load_profile, parse_param
from libdp import Cluster
from libdp._cluster import build_profile


def _errno(excinfo):
    return excinfo.value.errno


# --------------------------------------------------------------------------- profiles


def test_p133_is_available_and_describes_the_machine():
    assert "p133" in available_profiles()
    p = load_profile("p133")
    assert p.name == "p133"
    assert p.nic == "dec21140"
    assert p.description
    assert p["cpu.hz"] == 133e6
    assert p["link.rate_bps"] == 100e6
    assert p["dp.max_message"] == 1500


def test_every_p133_value_has_a_source_and_a_unit():
    p = load_profile("p133")
    keys = list(p.keys())
    assert len(keys) >= 30
    for k in keys:
        e = p.entry(k)
        assert isinstance(e.source, str) and e.source.strip(), k
        assert isinstance(e.unit, str), k
        assert isinstance(e.value, (int, float)) and not isinstance(e.value, bool), k
        assert e.value >= 0 and math.isfinite(e.value), k
    for k in ("cpu.hz", "mem.copy_rate_Bps", "syscall.entry_s", "callgate.entry_s", "irq.entry_s",
              "pci.dma_rate_Bps", "link.rate_bps", "dp.tbp_slots", "dp.max_message"):
        assert k in p


def test_unknown_profile_is_enoent():
    with pytest.raises(OSError) as ei:
        load_profile("p6-200-nonexistent")
    assert _errno(ei) == errno.ENOENT


def test_override_unknown_key_is_einval_with_a_hint():
    p = load_profile("p133")
    with pytest.raises(OSError) as ei:
        p.override("link.rate_bp", "10e6")
    assert _errno(ei) == errno.EINVAL
    assert "link.rate_bps" in str(ei.value)          # did you mean ...
    with pytest.raises(OSError) as ei:
        p.override("no.such.key", 1)
    assert _errno(ei) == errno.EINVAL
    assert p.overrides == {}


@pytest.mark.parametrize("key,value", [
    ("cpu.hz", "fast"),
    ("cpu.hz", ""),
    ("cpu.hz", True),
    ("cpu.hz", None),
    ("cpu.hz", [133e6]),
    ("cpu.hz", -1.0),
    ("cpu.hz", "-5"),
    ("link.preamble_bytes", "8.5"),
    ("link.preamble_bytes", 8.5),
    ("dp.tbp_slots", "many"),
    ("dp.tbp_slots", False),
])
def test_override_bad_value_is_einval_and_changes_nothing(key, value):
    p = load_profile("p133")
    before = p.entry(key)
    with pytest.raises(OSError) as ei:
        p.override(key, value)
    assert _errno(ei) == errno.EINVAL
    assert p.entry(key) == before
    assert p.overrides == {}


def test_override_good_values_keep_the_type_and_record_the_source():
    p = load_profile("p133")
    old = p.entry("link.rate_bps")
    p.override("link.rate_bps", "10e6")
    assert p["link.rate_bps"] == 10e6 and isinstance(p["link.rate_bps"], float)
    e = p.entry("link.rate_bps")
    assert e.unit == old.unit
    assert "override" in e.source and old.source in e.source
    p.override("link.preamble_bytes", "7")
    assert p["link.preamble_bytes"] == 7 and isinstance(p["link.preamble_bytes"], int)
    p.override("dp.tbp_slots", 16.0)
    assert p["dp.tbp_slots"] == 16 and isinstance(p["dp.tbp_slots"], int)
    p.override("cpu.hz", 66)                          # an int for a float value
    assert p["cpu.hz"] == 66.0 and isinstance(p["cpu.hz"], float)
    assert p.overrides == {"link.rate_bps": 10e6, "link.preamble_bytes": 7, "dp.tbp_slots": 16, "cpu.hz": 66.0}
    assert p.as_dict()["link.rate_bps"] == 10e6


def test_profile_copy_is_independent():
    p = load_profile("p133")
    q = p.copy()
    q.override("cpu.hz", 66e6)
    assert p["cpu.hz"] == 133e6 and p.overrides == {}
    assert q["cpu.hz"] == 66e6
    assert load_profile("p133")["cpu.hz"] == 133e6      # nothing cached and mutated


def test_parse_param():
    assert parse_param("link.rate_bps=10e6") == ("link.rate_bps", "10e6")
    assert parse_param("  cpu.hz = 66e6 ") == ("cpu.hz", "66e6")
    assert parse_param("a=b=c") == ("a", "b=c")
    for bad in ("noequals", "=5", "  =5"):
        with pytest.raises(OSError) as ei:
            parse_param(bad)
        assert _errno(ei) == errno.EINVAL


def test_build_profile_and_cluster_apply_overrides():
    p = build_profile("p133", ["link.rate_bps=10e6", ("cpu.hz", "66e6")])
    assert p["link.rate_bps"] == 10e6 and p["cpu.hz"] == 66e6
    c = Cluster(nodes=2, params={"link.rate_bps": "10e6"})
    assert c.profile["link.rate_bps"] == 10e6
    assert all(n.profile["link.rate_bps"] == 10e6 for n in c.nodes)
    with pytest.raises(OSError) as ei:
        Cluster(nodes=2, params=[("link.speed", "10e6")])
    assert _errno(ei) == errno.EINVAL


def _build_and_use(params):
    c = Cluster(nodes=2, params=params)
    a, b = c.process(0), c.process(1)
    fa = a.sync.dp_open(1)
    a.sync.dp_target(fa, 1, 2)
    fb = b.sync.dp_open(2)
    a.sync.dp_write(fa, b"x")
    return b.sync.dp_read(fb)


@pytest.mark.parametrize("key,value", [
    ("link.rate_bps", 0),
    ("cpu.hz", 0),
    ("cpu.hz", "nan"),
    ("fault.loss", 2),
    ("dp.tbp_slots", 0),
])
def test_out_of_domain_profile_values_are_refused_with_einval(key, value):
    """A value no machine can have (a zero rate, a NaN, a probability of 2) is refused
    with OSError(EINVAL) -- not a ZeroDivisionError/ValueError from deep inside the
    model, and not silently turned into nonsense figures."""
    with pytest.raises(OSError) as ei:
        _build_and_use([(key, value)])
    assert _errno(ei) == errno.EINVAL


# --------------------------------------------------------------------------- modules


def _lsmod(node):
    return {m["name"]: m for m in node.modules.lsmod()}


def _kernel_snapshot(node):
    return {
        "netdevs": sorted(node.netdevs),
        "irq": node.irq.stats(),
        "mem": node.mem.in_use(),
        "syscalls": sorted(node.syscalls),
        "callgates": sorted(node.callgates),
        "services": sorted(node.services),
        "drivers": [d.driver for d in node.pci_devices],
        "lsmod": node.modules.lsmod(),
    }


def _bare(c, nid=0):
    """Unload everything from node `nid` in the only order the loader allows."""
    node = c.node(nid)
    node.modules.rmmod("dp")
    node.modules.rmmod("dec21140")
    return node


def test_available_modules_and_info():
    mods = available_modules()
    assert "dp" in mods and "dec21140" in mods
    info = find_module("dp").info()
    assert info["name"] == "dp" and info["description"]
    assert set(info["params"]) >= {"tbp_slots", "netdev"}
    assert "DP-C02" in info["sources"]
    dec = find_module("dec21140").info()
    assert set(dec["params"]) >= {"tx_ring", "rx_ring", "budget", "store_forward", "burst_longwords"}
    assert dec["params"]["tx_ring"]["default"] == 32
    with pytest.raises(OSError) as ei:
        find_module("no_such_module")
    assert _errno(ei) == errno.ENOENT


def test_lsmod_shows_both_modules_with_use_counts():
    c = Cluster(nodes=2)
    node = c.node(0)
    mods = _lsmod(node)
    assert set(mods) == {"dp", "dec21140"}
    assert mods["dec21140"]["use_count"] == 1          # the NIC carries DP
    assert mods["dp"]["use_count"] == 0
    assert mods["dec21140"]["params"]["tx_ring"] == 32
    a = c.process(0)
    f1 = a.sync.dp_open(1)
    f2 = c.process(0).sync.dp_open(2)
    assert _lsmod(node)["dp"]["use_count"] == 2
    a.sync.close(f1)
    assert _lsmod(node)["dp"]["use_count"] == 1
    assert _lsmod(c.node(1))["dp"]["use_count"] == 0   # per node
    del f2


def test_rmmod_busy_cases():
    c = Cluster(nodes=2)
    node = c.node(0)
    a = c.process(0)
    fd = a.sync.dp_open(1)
    with pytest.raises(OSError) as ei:
        node.modules.rmmod("dp")
    assert _errno(ei) == errno.EBUSY
    with pytest.raises(OSError) as ei:
        node.modules.rmmod("dec21140")                 # dp is loaded on it
    assert _errno(ei) == errno.EBUSY
    assert set(_lsmod(node)) == {"dp", "dec21140"}
    a.sync.close(fd)
    with pytest.raises(OSError) as ei:
        node.modules.rmmod("dec21140")                 # still: dp holds the NIC
    assert _errno(ei) == errno.EBUSY
    node.modules.rmmod("dp")
    assert _lsmod(node)["dec21140"]["use_count"] == 0
    node.modules.rmmod("dec21140")
    assert node.modules.lsmod() == []
    assert set(_lsmod(c.node(1))) == {"dp", "dec21140"}   # the other node is untouched


def test_insmod_eexist_and_enoent():
    c = Cluster(nodes=2)
    m = c.node(0).modules
    for name in ("dp", "dec21140"):
        with pytest.raises(OSError) as ei:
            m.insmod(name)
        assert _errno(ei) == errno.EEXIST
    for call in (m.insmod, m.modprobe):
        with pytest.raises(OSError) as ei:
            call("no_such_module")
        assert _errno(ei) == errno.ENOENT
    with pytest.raises(OSError) as ei:
        m.rmmod("no_such_module")
    assert _errno(ei) == errno.ENOENT
    assert m.modprobe("dp") is c.node(0).services["dp"]    # already loaded: no error


def test_rmmod_dp_unregisters_everything_it_registered():
    c = Cluster(nodes=2)
    node = c.node(1)
    eth = node.netdevs["eth0"]
    assert 0x88B5 in eth.protocols
    node.modules.rmmod("dp")
    assert "dp_open" not in node.syscalls and "dp_target" not in node.syscalls
    assert "dp_write" not in node.callgates
    assert "dp" not in node.services
    assert 0x88B5 not in eth.protocols
    # A process on that node now finds no such system call.
    with pytest.raises(OSError) as ei:
        c.process(1).sync.dp_open(1)
    assert _errno(ei) == errno.ENOSYS
    # DP frames arriving there are dropped as an unknown protocol, nothing raises.
    a = c.process(0)
    fa = a.sync.dp_open(1)
    a.sync.dp_target(fa, 1, 1)
    a.sync.dp_write(fa, b"anyone?")
    c.engine.run()
    assert eth.stats()["rx_dropped_unknown_protocol"] == 1


@pytest.mark.parametrize("params", [
    {"tx_ring": "x"},
    {"tx_ring": 1},
    {"tx_ring": 513},
    {"rx_ring": "12.5"},
    {"budget": 0},
    {"store_forward": "maybe"},
    {"burst_longwords": 64},
    {"burst_longwords": True},
    {"no_such_param": 1},
])
def test_insmod_bad_parameter_is_einval_and_leaves_the_kernel_unchanged(params):
    c = Cluster(nodes=2)
    node = _bare(c)
    before = _kernel_snapshot(node)
    assert before["netdevs"] == [] and before["irq"] == {} and before["mem"] == 0
    assert before["drivers"] == [None] and before["lsmod"] == []
    with pytest.raises(OSError) as ei:
        node.modules.insmod("dec21140", **params)
    assert _errno(ei) == errno.EINVAL
    assert _kernel_snapshot(node) == before
    # Then a good load works, with its parameters parsed and in effect.
    node.modules.insmod("dec21140", tx_ring="8", store_forward="0")
    mods = _lsmod(node)
    assert mods["dec21140"]["params"]["tx_ring"] == 8
    assert mods["dec21140"]["params"]["store_forward"] is False
    assert node.netdevs["eth0"].ntx == 8
    assert node.pci_devices[0].driver is node.netdevs["eth0"]
    assert node.mem.in_use() > 0
    node.modules.insmod("dp", tbp_slots="4")
    assert node.services["dp"].tbp_slots == 4
    b = c.process(1)
    fb = b.sync.dp_open(2)
    b.sync.dp_target(fb, 0, 3)
    a = c.process(0)
    fa = a.sync.dp_open(3)
    a.sync.dp_target(fa, 1, 2)
    a.sync.dp_write(fa, b"reloaded")
    assert b.sync.dp_read(fb) == b"reloaded"
    b.sync.dp_write(fb, b"and back")
    assert a.sync.dp_read(fa) == b"and back"


def test_insmod_dp_bad_parameters():
    c = Cluster(nodes=2)
    node = c.node(0)
    node.modules.rmmod("dp")
    before = _kernel_snapshot(node)
    for params in ({"tbp_slots": -1}, {"tbp_slots": "lots"}, {"netdev": 5}):
        with pytest.raises(OSError) as ei:
            node.modules.insmod("dp", **params)
        assert _errno(ei) == errno.EINVAL, params
        assert _kernel_snapshot(node) == before
    with pytest.raises(OSError) as ei:
        node.modules.insmod("dp", netdev="eth7")
    assert _errno(ei) == errno.ENODEV
    assert _kernel_snapshot(node) == before


def test_dp_without_a_network_device_is_enodev_and_leaves_nothing_behind():
    c = Cluster(nodes=2)
    node = _bare(c)
    before = _kernel_snapshot(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("dp")
    assert _errno(ei) == errno.ENODEV
    assert _kernel_snapshot(node) == before


def test_failed_init_unwinds_in_full():
    """The driver's init fails after allocating its rings (no IRQ line left): the
    loader's undo log gives everything back."""
    c = Cluster(nodes=2)
    node = _bare(c)

    def dummy(pending=0.0):
        return pending
        yield  # pragma: no cover

    for line in range(3, 16):
        node.irq.request_irq(line, dummy, f"other{line}")
    before = _kernel_snapshot(node)
    with pytest.raises(OSError) as ei:
        node.modules.insmod("dec21140")
    assert _errno(ei) == errno.EBUSY
    assert _kernel_snapshot(node) == before
    assert node.pci_devices[0].stats()["csr6"] == "0x0"    # the card is stopped
    for line in range(3, 16):
        node.irq.free_irq(line, f"other{line}")
    node.modules.insmod("dec21140")
    node.modules.insmod("dp")
    assert set(_lsmod(node)) == {"dp", "dec21140"}


def test_failed_init_for_lack_of_memory_unwinds_in_full():
    c = Cluster(nodes=2, params=[("mem.bytes", 1 << 20)])
    node = _bare(c)
    before = _kernel_snapshot(node)
    with pytest.raises((OSError, MemoryError)):
        node.modules.insmod("dec21140", rx_ring=1024)   # 1.5 MB of buffers in 1 MB
    assert _kernel_snapshot(node) == before
    node.modules.insmod("dec21140")
    assert node.mem.in_use() > 0


def test_rmmod_and_reload_cycles_do_not_leak():
    c = Cluster(nodes=2)
    node = c.node(0)
    mem = node.mem.in_use()
    for _ in range(3):
        node.modules.rmmod("dp")
        node.modules.rmmod("dec21140")
        assert node.mem.in_use() == 0
        node.modules.insmod("dec21140")
        node.modules.insmod("dp")
        assert node.mem.in_use() == mem
        assert list(node.netdevs) == ["eth0"]
        assert len(node.irq.stats()) == 1

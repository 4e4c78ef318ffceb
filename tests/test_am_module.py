"""The am module's life in the kernel: it takes the TB2 from an idle DP and gives it
back, refuses while DP is busy, keeps DP and raw FIFO programs off the card while
loaded, stays loaded while an endpoint lives, and a failed insmod leaves the kernel as
it was."""
from __future__ import annotations

import errno

import pytest

from libdp import Cluster
from libdp.am import AM
from nic_drivers.tb2 import open_fifos


def tb2_cluster(nodes=2, **kw):
    return Cluster(nodes=nodes, nic="tb2", **kw)


def snapshot(node):
    a = node.pci_devices[0]
    return (tuple(sorted(m["name"] for m in node.modules.lsmod())), tuple(sorted(node.syscalls)),
            tuple(sorted(node.services)), tuple(sorted(node.netdevs)), repr(a.owner),
            {m["name"]: m["use_count"] for m in node.modules.lsmod()}, node.mem.in_use())


def dp_roundtrip(cluster):
    """DP messages flow between nodes 0 and 1."""
    a, b = cluster.process(0), cluster.process(1)
    fa = a.sync.dp_open(7)
    a.sync.dp_target(fa, 1, 7)
    fb = b.sync.dp_open(7)
    a.sync.dp_write(fa, b"over DP again")
    got = b.sync.dp_read(fb, 64)
    a.sync.close(fa)
    b.sync.close(fb)
    return got


def test_load_takes_the_card_from_an_idle_dp():
    c = tb2_cluster(load=["am"])
    for node in c.nodes:
        names = [m["name"] for m in node.modules.lsmod()]
        assert "am" in names and "dp" not in names
        assert {m["name"]: m["used_by"] for m in node.modules.lsmod()}["tb2"] == ["am"]
        assert "am_open" in node.syscalls and "am" in node.services
        assert "am module" in repr(node.pci_devices[0].owner)


def test_load_is_ebusy_while_dp_has_open_endpoints_and_nothing_changes():
    c = tb2_cluster()
    node = c.nodes[0]
    dp = c.process(0)
    fd = dp.sync.dp_open(3)
    before = snapshot(node)
    with pytest.raises(OSError) as e:
        node.modules.insmod("am")
    assert e.value.errno == errno.EBUSY
    assert snapshot(node) == before
    dp.sync.close(fd)
    node.modules.insmod("am")                      # idle now: DP steps aside
    assert not node.modules.loaded("dp")


def test_displace_dp_off_refuses_while_dp_is_loaded():
    c = tb2_cluster()
    node = c.nodes[0]
    before = snapshot(node)
    with pytest.raises(OSError) as e:
        node.modules.insmod("am", displace_dp="0")
    assert e.value.errno == errno.EBUSY and "DP holds" in str(e.value)
    assert snapshot(node) == before


@pytest.mark.parametrize("params", [{"request_window": "0"}, {"reply_window": "500"}, {"nosuch": "1"},
                                    {"keepalive_polls": "abc"}, {"chunk_packets": "64", "request_window": "40"}])
def test_bad_parameters_are_einval_and_leave_the_kernel_as_it_was(params):
    c = tb2_cluster()
    node = c.nodes[0]
    before = snapshot(node)
    with pytest.raises(OSError) as e:
        node.modules.insmod("am", **params)
    assert e.value.errno == errno.EINVAL
    assert snapshot(node) == before
    assert dp_roundtrip(c) == b"over DP again"


def test_a_raw_fifo_user_makes_insmod_ebusy_and_nothing_changes():
    c = tb2_cluster()
    node = c.nodes[0]
    node.modules.rmmod("dp")
    f = open_fifos(node)
    before = snapshot(node)
    with pytest.raises(OSError) as e:
        node.modules.insmod("am")
    assert e.value.errno == errno.EBUSY
    assert snapshot(node) == before
    f.close()


def test_while_loaded_dp_and_raw_fifos_cannot_take_the_card():
    c = tb2_cluster(load=["am"])
    node = c.nodes[0]
    with pytest.raises(OSError) as e:
        node.modules.modprobe("dp")
    assert e.value.errno == errno.EBUSY
    assert not node.modules.loaded("dp") and "dp_open" not in node.syscalls
    with pytest.raises(OSError) as e:
        open_fifos(node)
    assert e.value.errno == errno.EBUSY
    with pytest.raises(OSError) as e:
        node.modules.rmmod("tb2")
    assert e.value.errno == errno.EBUSY


def test_live_endpoint_keeps_the_module_and_one_process_per_node():
    c = tb2_cluster(load=["am"])
    node = c.nodes[0]
    am = AM.open_sync(c.process(0))
    with pytest.raises(OSError) as e:
        node.modules.rmmod("am")
    assert e.value.errno == errno.EBUSY
    with pytest.raises(OSError) as e:
        AM.open_sync(c.process(0))
    assert e.value.errno == errno.EBUSY               # SP-A18: one user process per node
    with pytest.raises(OSError) as e:
        open_fifos(node)
    assert e.value.errno == errno.EBUSY
    am.sync.close()
    node.modules.rmmod("am")
    assert node.modules.loaded("dp")


def test_after_rmmod_the_nodes_carry_plain_dp_again():
    c = tb2_cluster(load=["am"])

    async def prog(dp, rank, size):
        am = await AM.open(dp)
        seen = []
        am.set_handler(1, lambda tok, x: seen.append(x))
        if rank == 0:
            await am.am_request_1(1, 1, 5)
        else:
            await am.poll_until(lambda: seen)
        await am.close()
        return seen

    assert c.run_spmd(prog) == [[], [5]]
    fresh = tb2_cluster().nodes[0].mem.in_use()         # what a node with plain DP holds
    for node in c.nodes:
        node.modules.rmmod("am")
        assert node.modules.loaded("dp")               # brought back by rmmod am
        assert node.modules.modprobe("dp") is not None  # and modprobe dp is content
        assert "am_open" not in node.syscalls and "am" not in node.services
    assert [n.mem.in_use() for n in c.nodes] == [fresh, fresh]     # FIFOs and segments all given back
    assert dp_roundtrip(c) == b"over DP again"
    for node in c.nodes:                                # and AM can come back
        node.modules.rmmod("dp")
        node.modules.insmod("am", displace_dp="0")
    assert c.run_spmd(prog) == [[], [5]]


def test_am_open_without_the_module_is_enosys():
    c = tb2_cluster()
    with pytest.raises(OSError) as e:
        AM.open_sync(c.process(0))
    assert e.value.errno == errno.ENOSYS


def test_no_tb2_no_am():
    c = Cluster(nodes=2, platform="p133")
    with pytest.raises(OSError) as e:
        c.nodes[0].modules.modprobe("am")
    assert e.value.errno in (errno.ENODEV, errno.ENOENT)
    assert not c.nodes[0].modules.loaded("am")


def test_modinfo_names_the_sources_and_derived_costs():
    from kernelsim import find_module
    info = find_module("am").info()
    assert info["depends"] == ["tb2"]
    for fid in ("SP-A28", "SP-A35", "SP-A36", "SP-A37", "SP-A38", "SP-C05", "SP-C06", "SP-C08"):
        assert fid in info["sources"]
    p = info["params"]
    assert p["request_window"]["default"] == 75 and p["reply_window"]["default"] == 76
    assert p["chunk_packets"]["default"] == 36
    assert all(p[k]["default"] > 0 for k in ("poll_cycles", "dispatch_cycles", "post_cycles", "request_cycles",
                                              "bulk_cycles"))

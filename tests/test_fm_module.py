"""The fm module: loading over DP's Myrinet driver and back, parameters, fm_open, the kernel log."""
from __future__ import annotations

import errno

import pytest

from libdp import Cluster
from libdp.fm import FM

PLATFORM = "hpvm19"


def cluster(nodes=2, load=("fm",), platform=PLATFORM):
    return Cluster(nodes=nodes, platform=platform, nic="myrinet", load=list(load))


def test_insmod_fm_takes_the_board_from_dp_and_rmmod_gives_it_back():
    c = cluster(load=())
    node = c.nodes[0]
    card = node.pci_devices[0]
    assert node.modules.loaded("dp") and card.firmware.name == "dp"
    node.modules.insmod("fm")
    assert not node.modules.loaded("dp") and not node.modules.loaded("myrinet")
    assert card.firmware.name == "fm" and card.stats()["running"]
    node.modules.rmmod("fm")
    assert node.modules.loaded("myrinet") and node.modules.loaded("dp")
    assert card.firmware.name == "dp"
    assert node.mem.in_use() == cluster(load=()).nodes[0].mem.in_use()


def test_fm_will_not_displace_dp_in_use_or_when_told_not_to():
    c = cluster(load=())
    node = c.nodes[0]
    p = c.process(0)
    p.sync.dp_open(5)
    with pytest.raises(OSError) as e:
        node.modules.insmod("fm")
    assert e.value.errno == errno.EBUSY
    assert node.modules.loaded("dp") and not node.modules.loaded("fm")
    c2 = cluster(load=())
    with pytest.raises(OSError) as e:
        c2.nodes[0].modules.insmod("fm", displace_dp=False)
    assert e.value.errno == errno.EBUSY and c2.nodes[0].modules.loaded("dp")


def test_a_failed_load_leaves_the_kernel_as_it_was():
    c = cluster(load=())
    node = c.nodes[0]
    before = (node.mem.in_use(), sorted(m["name"] for m in node.modules.lsmod()), node.pci_devices[0].firmware.name)
    with pytest.raises(OSError) as e:
        node.modules.insmod("fm", contexts=16, send_slots=256)         # 16 send rings of 256 packets: no SRAM
    assert e.value.errno == errno.ENOMEM
    after = (node.mem.in_use(), sorted(m["name"] for m in node.modules.lsmod()), node.pci_devices[0].firmware.name)
    assert after == before


@pytest.mark.parametrize("params", [{"pacing": "sometimes"}, {"pacing": "8"}, {"smt_frames": 48},
                                    {"smt_queues": 9, "smt_procs": 8}, {"notify": "irq"}, {"contexts": 0}])
def test_bad_parameters_are_einval(params):
    c = cluster(load=())
    with pytest.raises(OSError) as e:
        c.nodes[0].modules.insmod("fm", **params)
    assert e.value.errno == errno.EINVAL
    assert not c.nodes[0].modules.loaded("fm") and c.nodes[0].modules.loaded("dp")


def test_shared_memory_only_needs_no_board():
    c = cluster(load=())
    node = c.nodes[0]
    node.modules.insmod("fm", net="null")
    assert node.modules.loaded("dp") and node.pci_devices[0].firmware.name == "dp"


def test_the_pacing_choice_is_in_the_kernel_log_and_modinfo():
    lpr = cluster(platform="lpr_lanai4").nodes[0]
    info = lpr.modules.modinfo("fm")
    assert info["loaded"]["pacing"]["chunk_bytes"] == 160                       # FM-A16, from the benchmark
    assert any("PIO pacing: 160-byte chunks" in line for line in lpr.dmesg())
    kayak = cluster(platform="kayak_lanai4").nodes[0]
    assert kayak.modules.modinfo("fm")["loaded"]["pacing"]["chunk_bytes"] == 0
    assert any("none needed" in line for line in kayak.dmesg())
    fixed = Cluster(nodes=2, platform="lpr_lanai4", nic="myrinet", load=[("fm", {"pacing": "96"})]).nodes[0]
    assert fixed.modules.modinfo("fm")["loaded"]["pacing"] == {**fixed.modules.modinfo("fm")["loaded"]["pacing"],
                                                             "chunk_bytes": 96, "source": "pacing parameter"}


def test_rmmod_is_ebusy_while_a_context_is_open():
    c = cluster(nodes=2)

    async def prog(dp, rank, size):
        fm = await FM.open(dp)
        with pytest.raises(OSError) as e:
            c.node(dp.nid).modules.rmmod("fm")
        assert e.value.errno == errno.EBUSY
        await fm.close()
        return True

    assert c.run_spmd(prog) == [True, True]
    c.nodes[0].modules.rmmod("fm")
    assert c.nodes[0].modules.loaded("dp")


def test_fm_open_checks_its_job():
    c = cluster(nodes=2)
    node = c.nodes[0]
    dp = c.process(0)
    for args, err in (((1, (0, 1), 5), errno.EINVAL), ((1, (1, 1), 0), errno.EINVAL), ((1, (), 0), errno.EINVAL),
                      ((70000, (0, 1), 0), errno.EINVAL)):
        with pytest.raises(OSError) as e:
            node.run_now(node.syscall_path(dp._proc, "fm_open", args))
        assert e.value.errno == err
    node.run_now(node.syscall_path(dp._proc, "fm_open", (1, (0, 1), 0)))
    with pytest.raises(OSError) as e:
        node.run_now(node.syscall_path(c.process(0)._proc, "fm_open", (1, (0, 1), 0)))
    assert e.value.errno == errno.EADDRINUSE
    for prog in (2, 3, 4):
        node.run_now(node.syscall_path(c.process(0)._proc, "fm_open", (prog, (0, 1), 0)))
    with pytest.raises(OSError) as e:                                   # four contexts per host by default
        node.run_now(node.syscall_path(c.process(0)._proc, "fm_open", (5, (0, 1), 0)))
    assert e.value.errno == errno.EBUSY


def test_without_fm_there_is_no_fm_open():
    c = Cluster(nodes=2, platform=PLATFORM, nic="myrinet")
    dp = c.process(0)
    with pytest.raises(OSError) as e:
        FM.open_sync(dp)
    assert e.value.errno == errno.ENOSYS


def test_a_net_null_job_cannot_reach_another_host():
    c = Cluster(nodes=2, platform=PLATFORM, nic="myrinet", load=[("fm", {"net": "null"})])
    with pytest.raises(OSError) as e:
        FM.open_sync(c.process(0))
    assert e.value.errno == errno.EHOSTUNREACH

"""The EPOS communication pipeline over the Myrinet driver (EP-A01..A20, EP-C01..C08)."""
from __future__ import annotations

import errno
import math
import random

import pytest

from libdp import Cluster
from libdp._epos import bulk_bandwidth, bulk_pingpong
from nic_drivers.myrinet.pipeline import PacketSizeTable, parse_pipeline, run_op, run_op_sync

ATHLON = "athlon550_lanai4"
MB = 1 << 20


def cluster(platform=ATHLON, nodes=2, params=(), seed=0):
    return Cluster(nodes=nodes, platform=platform, nic="myrinet", params=params, seed=seed)


def rate(stats):
    return stats["bytes"] / (stats["busy_us"] * 1e-6)


def transfer(c, sizes, iters=2, pipeline="adaptive"):
    rows = bulk_bandwidth(sizes=sizes, iters=iters, pipeline=pipeline, cluster=c)
    return {r["size"]: r for r in rows}


# --------------------------------------------------------------------------- stage rates


@pytest.fixture(scope="module")
def athlon_1mb():
    """A 1 MB bulk ping-pong on the EPOS machine in 16 KB packets: every stage busy."""
    c = cluster()
    rows = transfer(c, [MB], iters=2, pipeline="fixed:16384")
    return c, rows[MB]


def test_copy_stages_run_at_about_140_mbytes_per_s(athlon_1mb):
    """EP-A06 (stages 1 and 5), measured as the bytes each CPU copied over its busy time."""
    c, _ = athlon_1mb
    for n in c.nodes:
        bulk = n.netdevs["myri0"].bulk.stats()
        assert rate(bulk["stage1"]) == pytest.approx(140e6, rel=0.05)
        assert rate(bulk["stage5"]) == pytest.approx(140e6, rel=0.05)


def test_host_dma_stages_run_at_about_130_mbytes_per_s(athlon_1mb):
    """EP-A07 (stages 2 and 4): the NI's host DMA engine on both sides."""
    c, _ = athlon_1mb
    for n in c.nodes:
        assert rate(n.pci_devices[0].stats()["host_dma"]) == pytest.approx(130e6, rel=0.02)


def test_network_stage_runs_at_about_160_mbytes_per_s(athlon_1mb):
    """EP-A08 (stage 3): the send DMA engine streaming onto the 160 MB/s link."""
    c, _ = athlon_1mb
    for n in c.nodes:
        assert rate(n.pci_devices[0].stats()["send_dma"]) == pytest.approx(160e6, rel=0.02)
    link = c.medium.stats()["links"]["sw0->n1"]
    assert link["bytes"] / (link["busy_us"] * 1e-6) == pytest.approx(160e6, rel=0.02)


def test_stages_overlap(athlon_1mb):
    """EP-C03/C04: the message takes far less than its packets' serial stage times, and
    the end-to-end rate sits just under the slowest stage (host DMA, EP-A09: 130 MB/s)."""
    c, row = athlon_1mb
    packets = MB // 16384
    per_packet = (3e-6 + 16384 / 140e6) * 2 + (0.6e-6 + 16384 / 130e6) * 2 + 16384 / 160e6
    assert row["one_way_us"] * 1e-6 < 0.3 * packets * per_packet
    assert 110 < row["mbytes_per_s"] < 130


@pytest.mark.parametrize("platform,peak", [("ppro200_lanai4", 127.2e6), ("p3_1000_lanai9", 254.3e6)])
def test_pipeline_host_dma_approaches_the_pci_peak(platform, peak):
    """LCI-A17/A18 through the pipeline: 4 KB packets lose only the per-transfer set-up."""
    c = cluster(platform)
    transfer(c, [256 * 1024], iters=1, pipeline="fixed:4096")
    r = rate(c.nodes[0].pci_devices[0].stats()["host_dma"])
    assert 0.97 * peak < r < peak


# --------------------------------------------------------------------------- packet size


def test_adaptive_pipeline_uses_4kb_packets_for_64kb_messages():
    """EP-A18: 4 KB packets were used in practice for 64 KB messages."""
    c = cluster()
    eng = c.nodes[0].netdevs["myri0"].bulk
    assert eng.packet_size(64 * 1024) == 4096
    assert 2048 < eng.table.p_optimal(64 * 1024) < 4096 * math.sqrt(2)


def test_the_ranges_follow_equation_8():
    t = PacketSizeTable(4.9e-6, 13.5e-6 / 1024, 256, 16384)
    for length in (300, 1000, 5000, 20000, 64 * 1024, 300000, MB, 8 * MB):
        p = t.choose(length)
        popt = t.p_optimal(length)
        assert p == 16384 or popt <= p * math.sqrt(2) * (1 + 1e-9)
        assert p == 256 or popt >= p / math.sqrt(2) * (1 - 1e-9)
    assert [r["packet_bytes"] for r in t.ranges()] == [256, 512, 1024, 2048, 4096, 8192, 16384]


def test_adaptive_beats_a_badly_chosen_fixed_size_for_large_messages():
    adaptive = transfer(cluster(), [256 * 1024, MB], iters=1)
    small = transfer(cluster(), [256 * 1024, MB], iters=1, pipeline="fixed:512")
    for n in (256 * 1024, MB):
        assert adaptive[n]["mbytes_per_s"] > 1.3 * small[n]["mbytes_per_s"], n
    # and one packet per message throws the pipeline away for medium sizes
    whole = transfer(cluster(), [16384], iters=2, pipeline="fixed:16384")
    mid = transfer(cluster(), [16384], iters=2)
    assert mid[16384]["mbytes_per_s"] > 1.3 * whole[16384]["mbytes_per_s"]


@pytest.mark.parametrize("spec,err", [("fast", errno.EINVAL), ("fixed:x", errno.EINVAL), ("fixed:0", errno.EINVAL),
                                      (True, errno.EINVAL)])
def test_bad_pipeline_specs_are_einval(spec, err):
    with pytest.raises(OSError) as ei:
        parse_pipeline(spec)
    assert ei.value.errno == err


def test_a_fixed_packet_larger_than_an_nic_buffer_is_einval():
    eng = cluster("ppro200_lanai4").nodes[0].netdevs["myri0"].bulk
    assert eng.packet_size(MB, "fixed:4096") == 4096
    with pytest.raises(OSError) as ei:
        eng.packet_size(MB, "fixed:8192")
    assert ei.value.errno == errno.EINVAL


# --------------------------------------------------------------------------- short messages


def test_messages_under_256_bytes_go_by_pio_without_a_send_dma():
    """EP-C08: below 256 bytes the sender PIOs the packet in 32-byte bursts."""
    c = cluster()
    rows = transfer(c, [255], iters=3)
    assert rows[255]["path"] == "pio" and rows[255]["packet_bytes"] == 255
    fw = c.nodes[0].netdevs["myri0"].fw.stats()
    assert fw["sent_pio"] == fw["sent"] > 0 and fw["sent_dma"] == 0
    c2 = cluster()
    rows = transfer(c2, [256], iters=3)
    fw = c2.nodes[0].netdevs["myri0"].fw.stats()
    assert rows[256]["path"] == "pipeline" and fw["sent_dma"] == fw["sent"] > 0 and fw["sent_pio"] == 0


def test_pio_bursts_make_the_short_path_faster():
    rows = transfer(cluster(), [64, 255, 256], iters=3)
    assert rows[64]["one_way_us"] < rows[255]["one_way_us"] < rows[256]["one_way_us"]


# --------------------------------------------------------------------------- data and flow control


@pytest.mark.parametrize("platform", [ATHLON, "ppro200_lanai4"])
def test_bulk_messages_arrive_intact(platform):
    c = cluster(platform)
    n0, n1 = c.nodes
    d0, d1 = n0.netdevs["myri0"], n1.netdevs["myri0"]
    rng = random.Random(11)
    for n, pipe in ((0, "adaptive"), (1, "adaptive"), (255, "fixed:1024"), (256, "adaptive"),
                    (5000, "fixed:1000"), (100_003, "adaptive"), (70_000, "fixed:4096")):
        msg = rng.randbytes(n)
        run_op_sync(n0, d0.bulk_send_op(1, msg, pipe))
        src, got = run_op_sync(n1, d1.bulk_recv_op())
        assert src == 0 and got == msg, (n, pipe)


def test_two_senders_to_one_receiver_reassemble_apart():
    c = cluster("ppro200_lanai4", nodes=3)
    msgs = {0: random.Random(1).randbytes(50_000), 2: random.Random(2).randbytes(30_000)}

    async def prog(dp, rank, size):
        dev = dp._node.netdevs["myri0"]
        if rank == 1:
            return dict([await run_op(dp._node, dev.bulk_recv_op()) for _ in range(2)])
        await run_op(dp._node, dev.bulk_send_op(1, msgs[rank], "fixed:2048"))
        return None

    got = c.run_spmd(prog)[1]
    assert got == msgs
    assert c.medium.stats()["links"]["sw0->n1"]["waits"] > 0        # their packets met at the port
    assert c.medium.stats()["dropped"] == 0


def test_a_late_receiver_holds_the_sender_back_without_loss():
    """Ring, SRAM and network fill; the sender blocks; nothing is lost (LCI-C25)."""
    c = cluster("ppro200_lanai4")
    msg = random.Random(3).randbytes(2 * MB)

    async def prog(dp, rank, size):
        import trio
        dev = dp._node.netdevs["myri0"]
        if rank == 0:
            await run_op(dp._node, dev.bulk_send_op(1, msg, "fixed:4096"))
            return dp._node.engine.now
        await trio.sleep(0.05)
        return await run_op(dp._node, dev.bulk_recv_op())

    t_sent, (src, got) = c.run_spmd(prog)
    assert got == msg
    assert t_sent > 0.05                       # the sender could not finish before the receiver read
    st = c.medium.stats()
    assert st["dropped"] == 0 and st["ni_wait_us"] > 0
    assert c.nodes[1].pci_devices[0].stats()["recv_dma"]["no_buffer"] == 0


def test_benchmark_program_and_rows():
    c = cluster()
    res = c.run_spmd(bulk_pingpong, [1, 4096], 2, "fixed:1024")
    assert res[0] and res[1]
    for r in res[0]:
        assert set(r) >= {"size", "mbytes_per_s", "packet_bytes"}
    assert res[0][1]["packet_bytes"] == 1024 and res[0][0]["path"] == "pio"


def test_same_seed_same_rows():
    a = transfer(cluster(seed=4), [1, 70000], iters=2)
    b = transfer(cluster(seed=4), [1, 70000], iters=2)
    assert a == b


def test_faster_network_helps_only_when_it_is_the_bottleneck():
    """On the Athlon the host DMA (130 MB/s) limits large transfers; a slower link below
    it takes over as the bottleneck, a faster one above it changes little."""
    base = transfer(cluster(), [MB], iters=1, pipeline="fixed:16384")[MB]["mbytes_per_s"]
    slow = transfer(cluster(params=[("link.rate_bps", 0.64e9)]), [MB], iters=1,
                    pipeline="fixed:16384")[MB]["mbytes_per_s"]
    fast = transfer(cluster(params=[("link.rate_bps", 2.56e9)]), [MB], iters=1,
                    pipeline="fixed:16384")[MB]["mbytes_per_s"]
    assert slow < 80 < base
    assert base <= fast < base * 1.05

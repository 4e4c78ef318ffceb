"""DP over Myrinet: the dp commands, data integrity, PIO versus DMA sends, the receive
modes (interrupt, polling watchdog, polling) and input -> output directions."""
from __future__ import annotations

import errno
import json
import random

import pytest

from libdp import Cluster, pingpong
from libdp._cli import main

EP0, EP1 = 0x1234, 0x4321


def cluster(platform="ppro200_lanai4", params=(), seed=0, **driver):
    c = Cluster(nodes=2, platform=platform, nic="myrinet", params=params, seed=seed)
    if driver:
        for n in c.nodes:
            n.modules.rmmod("dp")
            n.modules.rmmod("myrinet")
            n.modules.insmod("myrinet", **driver)
            n.modules.insmod("dp")
    return c


def rtt_us(sizes=(1,), iters=20, platform="ppro200_lanai4", params=(), **driver):
    rows = cluster(platform, params, **driver).run_spmd(pingpong, list(sizes), iters)[0]
    return {r["size"]: r["rtt_us"] for r in rows}


def endpoints(c):
    a, b = c.process(0), c.process(1)
    fa = a.sync.dp_open(EP0)
    a.sync.dp_target(fa, 1, EP1)
    fb = b.sync.dp_open(EP1)
    b.sync.dp_target(fb, 0, EP0)
    return a, fa, b, fb


# --------------------------------------------------------------------------- the commands


def test_dp_pingpong_over_myrinet_from_the_command_line(capsys):
    assert main(["pingpong", "--nic", "myrinet", "--sizes", "1,64,1500,4095", "--iters", "50", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["platform"] == "ppro200_lanai4" and doc["nic"] == "myrinet"
    lat = [r["one_way_us"] for r in doc["results"]]
    assert lat == sorted(lat) and lat[0] > 0


def test_dp_bandwidth_over_myrinet_from_the_command_line(capsys):
    assert main(["bandwidth", "--nic", "myrinet", "--sizes", "1500,4095", "--iters", "4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["results"]
    assert all(r["delivered"] > 0 and r["mbytes_per_s"] > 0 for r in rows)
    # never above the 160 MB/s link (LCI-A19)
    assert all(r["mbytes_per_s"] < 160 for r in rows)


# --------------------------------------------------------------------------- data


def test_random_messages_arrive_intact_up_to_the_largest():
    c = cluster()
    a, fa, b, fb = endpoints(c)
    rng = random.Random(7)
    sizes = [0, 1, 7, 200, 247, 248, 249, 1000, 1500, 2048, 4000, 4095]
    for n in sizes:
        msg = rng.randbytes(n)
        a.sync.dp_write(fa, msg)
        got = b.sync.dp_read(fb, 5000)
        assert got == msg, n
        b.sync.dp_write(fb, got[::-1])
        assert a.sync.dp_read(fa, 5000) == msg[::-1]
    dev = c.nodes[0].netdevs["myri0"]
    assert dev.tx_pio > 0 and dev.tx_dma > 0          # both send paths carried data


def test_dp_refuses_a_message_longer_than_one_packet():
    c = cluster()
    a, fa, b, fb = endpoints(c)
    with pytest.raises(OSError) as ei:
        a.sync.dp_write(fa, bytes(4096))
    assert ei.value.errno == errno.EMSGSIZE
    assert c.nodes[0].services["dp"].max_message == 4095


def test_a_node_without_a_route_is_unreachable():
    c = cluster()
    a, fa, b, fb = endpoints(c)
    del c.nodes[0].netdevs["myri0"].routes[1]
    with pytest.raises(OSError) as ei:
        a.sync.dp_write(fa, b"x")
    assert ei.value.errno == errno.EHOSTUNREACH


def test_short_frames_go_by_pio_long_ones_by_dma():
    c = cluster()
    a, fa, b, fb = endpoints(c)
    dev = c.nodes[0].netdevs["myri0"]
    a.sync.dp_write(fa, bytes(200))                    # 1 + 4 + 8 + 200 = 213 bytes: PIO
    b.sync.dp_read(fb)
    assert (dev.tx_pio, dev.tx_dma) == (1, 0)
    a.sync.dp_write(fa, bytes(300))                    # 313 bytes: DMA
    b.sync.dp_read(fb)
    assert (dev.tx_pio, dev.tx_dma) == (1, 1)
    fw = dev.fw.stats()
    assert fw["sent_pio"] == 1 and fw["sent_dma"] == 1


def test_pio_wins_for_small_frames_and_dma_for_large_ones():
    base = rtt_us((1, 4095))
    dma = rtt_us((1, 4095), pio_max=0)
    pio = rtt_us((1, 4095), pio_max=65535)
    assert base[1] == pytest.approx(pio[1]) and base[4095] == pytest.approx(dma[4095])
    assert dma[1] > base[1]                            # a DMA costs the NI more than 13 bytes of PIO
    assert pio[4095] > base[4095]                      # 4 KB of 82 MB/s PIO loses to 127 MB/s DMA


# --------------------------------------------------------------------------- receive modes


def test_polling_watchdog_interrupts_only_after_its_timeout():
    """LCI-C09: nobody polls, so every delivery waits out the watchdog, then interrupts."""
    irq = rtt_us()[1]
    wd = rtt_us(rx_mode="watchdog")[1]
    poll_cycles_s = 12 / 33e6
    assert wd - irq == pytest.approx(2 * (70 + poll_cycles_s * 1e6), rel=1e-6)
    short = rtt_us(rx_mode="watchdog", watchdog_us=10)[1]
    assert short - irq == pytest.approx(2 * (10 + poll_cycles_s * 1e6), rel=1e-6)


def test_a_host_that_polls_in_time_gets_no_watchdog_interrupt():
    c = cluster(rx_mode="watchdog")
    a, fa, b, fb = endpoints(c)
    node1 = c.nodes[1]
    dev1 = node1.netdevs["myri0"]
    a.sync.dp_write(fa, b"in time")
    c.engine.run(c.engine.now + 30e-6)                  # delivered to the ring, timer running
    assert dev1.dev.stats()["interrupts_raised"] == 0
    node1.run_now(dev1.poll_path())                     # the host polls before 70 us
    c.engine.run()
    assert b.sync.dp_read(fb) == b"in time"
    assert dev1.dev.stats()["interrupts_raised"] == 0
    assert dev1.fw.stats()["watchdog_interrupts"] == 0
    a.sync.dp_write(fa, b"late")                        # nobody polls this one
    c.engine.run()
    assert dev1.fw.stats()["watchdog_interrupts"] == 1 and b.sync.dp_read(fb) == b"late"


def test_poll_mode_delivers_only_when_the_host_polls():
    c = cluster(rx_mode="poll")
    a, fa, b, fb = endpoints(c)
    a.sync.dp_write(fa, b"polled")
    c.engine.run()
    b.sync.set_blocking(fb, False)
    with pytest.raises(BlockingIOError):
        b.sync.dp_read(fb)
    node1 = c.nodes[1]
    assert node1.irq.stats()[f"irq{node1.netdevs['myri0'].irq_line}"]["interrupts"] == 0
    node1.run_now(node1.netdevs["myri0"].poll_path())
    assert b.sync.dp_read(fb) == b"polled"
    assert node1.pci_devices[0].stats()["interrupts_raised"] == 0


# --------------------------------------------------------------------------- directions


def test_same_inputs_same_figures():
    r1 = cluster(seed=3).run_spmd(pingpong, [1, 3000], 10)
    r2 = cluster(seed=3).run_spmd(pingpong, [1, 3000], 10)
    assert r1 == r2


def test_each_switch_adds_its_delay_its_cable_and_a_route_byte():
    chain = ("switch.topology", "chain")
    one, three = rtt_us(params=[chain, ("switch.hops", 1)])[1], rtt_us(params=[chain, ("switch.hops", 3)])[1]
    per_switch = 0.1 + 0.05 + 8 / 1.28e9 * 1e6      # LCI-A29 hop, cable, one route byte on the wire
    assert three - one == pytest.approx(2 * 2 * per_switch, rel=1e-6)


@pytest.mark.parametrize("key,slower,faster,size", [
    ("lanai.hz", 16.5e6, 66e6, 1),
    ("link.rate_bps", 0.64e9, 2.56e9, 4095),
    ("pci.dma_rate_Bps", 63.6e6, 254.4e6, 4095),
    ("mem.copy_rate_Bps", 26e6, 104e6, 4095),
    ("switch.hop_s", 0.5e-6, 0.0, 1),
    ("pci.pio_burst_clocks", 10, 2, 200),
])
def test_costlier_hardware_never_lowers_the_round_trip(key, slower, faster, size):
    base = rtt_us((size,), iters=10)[size]
    slow = rtt_us((size,), iters=10, params=[(key, slower)])[size]
    fast = rtt_us((size,), iters=10, params=[(key, faster)])[size]
    assert fast < base < slow, (key, fast, base, slow)


def test_the_faster_machine_has_the_lower_latency():
    """LCI-style 1-byte one-way figures of DP on both LCI platforms (for comparison only,
    LCI I-sdma measured 15.1 us on PPro and 8.8 us on P3, LCI-T3)."""
    ppro = rtt_us(iters=50)[1] / 2
    p3 = rtt_us(iters=50, platform="p3_1000_lanai9")[1] / 2
    assert p3 < ppro

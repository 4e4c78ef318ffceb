"""The modeled TB2 figures: the raw FIFO ping-pong of SP-B03, how it moves when an
input changes (in the direction, and where the mechanism is exact, by the amount the
hardware would), and DP over TB2 through the `dp` command. All times are modeled.
"""
from __future__ import annotations

import functools

import json

import pytest

from libdp import Cluster, bandwidth, pingpong
from libdp._cli import main as dp_main
from libdp._tb2_raw import raw_pingpong

PAPER_LOW, PAPER_HIGH = 46.6, 47.0          # SP-B03, µs
ITERS = 200                                 # a multiple of the lazy-pop interval (8)


def raw_rtt(params=(), sizes=(0,), iters=ITERS, pop_every=None) -> dict:
    c = Cluster(nodes=2, nic="tb2", params=list(params))
    rows = raw_pingpong(c, iters=iters, sizes=sizes, pop_every=pop_every)
    return {r["size"]: r["rtt_us"] for r in rows}


@pytest.fixture(scope="module")
def base():
    return raw_rtt(sizes=(0, 224))


# --------------------------------------------------------------------------- the figure


def test_raw_round_trip_matches_the_paper(base):
    mid = (PAPER_LOW + PAPER_HIGH) / 2
    assert base[0] == pytest.approx(mid, rel=0.05)
    assert PAPER_LOW <= base[0] <= PAPER_HIGH


def test_the_command_prints_the_figure(capsys):
    assert dp_main(["pingpong", "--nic", "tb2", "--raw", "--iters", "100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rtt = doc["results"][0]["rtt_us"]
    assert doc["results"][0]["size"] == 0 and PAPER_LOW * 0.95 <= rtt <= PAPER_HIGH * 1.05
    assert dp_main(["pingpong", "--nic", "tb2", "--raw", "--iters", "50", "--sizes", "0,224"]) == 0
    out = capsys.readouterr().out
    assert "raw TB2 FIFO pingpong" in out and out.count("\n") >= 4


def test_same_inputs_same_figure(base):
    assert raw_rtt(sizes=(0, 224)) == base


# --------------------------------------------------------------------------- directions


def test_slower_microchannel_access_raises_the_raw_rtt_by_what_it_costs(base):
    """One length store per send and one pop per 8 receives per direction: a round trip
    has 2 x (1 + 1/8) MicroChannel accesses."""
    slow = raw_rtt(params=[("pci.write_s", 2e-6)])[0]
    fast = raw_rtt(params=[("pci.write_s", 0.5e-6)])[0]
    assert fast < base[0] < slow
    assert slow - base[0] == pytest.approx(2 * (1 + 1 / 8) * 1.0, rel=1e-6)


def test_switch_latency_adds_twice_per_round_trip(base):
    longer = raw_rtt(params=[("switch.latency_s", 0.5e-6 + 3e-6)])[0]
    assert longer - base[0] == pytest.approx(6.0, rel=1e-6)


@pytest.mark.parametrize("key,slower,faster", [
    ("switch.link_Bps", 20e6, 80e6),
    ("pci.dma_rate_Bps", 27.5e6, 80e6),
    ("mem.copy_rate_Bps", 75e6, 300e6),
])
def test_data_rates_matter_more_for_full_packets(base, key, slower, faster):
    slow = raw_rtt(params=[(key, slower)], sizes=(0, 224))
    fast = raw_rtt(params=[(key, faster)], sizes=(0, 224))
    assert fast[224] < base[224] < slow[224]
    assert fast[0] <= base[0] <= slow[0]
    assert slow[224] - base[224] > slow[0] - base[0]


@pytest.mark.parametrize("key,slower,faster", [
    ("cpu.hz", 33e6, 132e6),
    ("tb2.i860_tx_s", 8e-6, 4e-6),
    ("tb2.i860_rx_s", 8e-6, 4e-6),
    ("tb2.notice_s", 2e-6, 0.5e-6),
    ("cache.flush_line_s", 0.3e-6, 0.05e-6),
    ("mem.miss_s", 0.4e-6, 0.1e-6),
])
def test_costlier_hardware_raises_the_raw_rtt(base, key, slower, faster):
    assert raw_rtt(params=[(key, faster)])[0] < base[0] < raw_rtt(params=[(key, slower)])[0]


def test_lazier_pops_lower_the_raw_rtt(base):
    eager = raw_rtt(pop_every=1)[0]
    lazy = raw_rtt(pop_every=40)[0]
    assert lazy < base[0] < eager
    assert eager - base[0] == pytest.approx(2 * (1 - 1 / 8) * 1.0, rel=1e-6)   # pops cost 1 us each


def test_more_data_takes_longer(base):
    got = raw_rtt(sizes=(0, 32, 128, 224))
    assert got[0] < got[32] < got[128] < got[224]


async def _stream(dp, rank, size, n):
    """Rank 0 streams `n` full packets over the raw FIFOs (bulk sends of 4); rank 1 polls."""
    from nic_drivers.tb2 import open_fifos
    f = open_fifos(dp._proc)
    try:
        if rank == 0:
            sent = 0
            while sent < n:
                sent += await f.bulk_send(dp, 1, [bytes(224)] * min(4, n - sent))
            await f.recv(dp)
            return None
        await f.recv(dp)
        t0 = dp.now()                                  # steady state: first packet to last
        for _ in range(n - 1):
            await f.recv(dp)
        t = dp.now() - t0
        await f.send(dp, 0, b"done")
        return (n - 1) * 224 / t / 1e6, f.adapter.stats()["rx_overflow"]
    finally:
        f.close()


def test_raw_streaming_runs_at_the_switch_link_rate():
    """Firmware, DMA and link overlap: a stream of full packets runs at the link's
    224/6.4 us = 35 MB/s, which leaves room for SP AM's 34.3 MB/s (SP-B08)."""
    c = Cluster(nodes=2, nic="tb2")
    for n in c.nodes:
        n.modules.rmmod("dp")
    mbs, overflow = c.run_spmd(_stream, 300)[1]
    assert 34.3 <= mbs <= 224 / 6.4 * 1.001           # (first and last detections differ by a poll)
    assert overflow == 0


# --------------------------------------------------------------------------- DP over TB2


def test_dp_pingpong_command_over_tb2(capsys):
    assert dp_main(["pingpong", "--nic", "tb2", "--sizes", "1,64,200", "--iters", "200", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["platform"] == "sp_thin" and doc["nic"] == "tb2"
    rtt = {r["size"]: r["rtt_us"] for r in doc["results"]}
    assert rtt[1] < rtt[64] < rtt[200]
    raw = raw_rtt(iters=40)[0]
    # DP adds kernel entry, an interrupt per message and the TBP on top of the raw FIFOs.
    assert raw < rtt[1] < 3 * raw


def test_dp_bandwidth_command_over_tb2(capsys):
    assert dp_main(["bandwidth", "--nic", "tb2", "--sizes", "64,200", "--iters", "8", "--json"]) == 0
    rows = {r["size"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    for n, r in rows.items():
        link_limit = n / ((32 + 8 + n) / 40e6) / 1e6       # TB2 + DM headers on a 40 MB/s link
        assert 0 < r["mbytes_per_s"] <= link_limit
        assert r["delivered"] > 0.7 * r["messages"]      # DP is unreliable: a full TBP drops
    assert rows[64]["delivered"] == rows[64]["messages"] == 8 * 64
    assert rows[64]["mbytes_per_s"] < rows[200]["mbytes_per_s"]


def test_dp_message_too_big_for_a_packet_fails_the_command(capsys):
    assert dp_main(["pingpong", "--nic", "tb2", "--sizes", "217", "--iters", "5"]) == 1
    assert "216" in capsys.readouterr().err


def test_without_interrupt_holdoff_a_streaming_dp_receiver_livelocks():
    """Arrivals faster than interrupt-per-packet can take them: the handler runs back to
    back and the reader starves (what the driver's holdoff is for)."""
    def run(holdoff):
        c = Cluster(nodes=2, nic="tb2")
        for n in c.nodes:
            n.modules.rmmod("dp")
            n.modules.rmmod("tb2")
            n.modules.insmod("tb2", irq_holdoff_us=holdoff)
            n.modules.insmod("dp")
        stream = functools.partial(bandwidth, iters=1, window=300, warmup=0)
        return c.run_spmd(stream, [200])[0][0]["delivered"], c

    starved, _ = run(0.0)
    fine, c = run(40.0)
    assert starved <= 70 < fine
    assert c.nodes[1].netdevs["tb0"].holdoffs > 0


def test_holdoff_does_not_touch_the_dp_round_trip():
    def rtt(holdoff):
        c = Cluster(nodes=2, nic="tb2")
        for n in c.nodes:
            n.modules.rmmod("dp")
            n.modules.rmmod("tb2")
            n.modules.insmod("tb2", irq_holdoff_us=holdoff)
            n.modules.insmod("dp")
        return c.run_spmd(pingpong, [1, 200], 50)[0]
    assert rtt(0.0) == rtt(40.0)


@pytest.mark.parametrize("param", ["pci.dma_rate_Bps=0", "switch.link_Bps=0", "cache.line_bytes=0",
                                   "tb2.send_fifo_entries=0", "tb2.send_fifo_entries=257", "tb2.fifo_bytes=100",
                                   "switch.routes=0", "tb2.recv_fifo_entries_per_node=0"])
def test_impossible_tb2_values_are_einval_not_a_traceback(capsys, param):
    assert dp_main(["pingpong", "--nic", "tb2", "--sizes", "1", "--iters", "5", "--param", param]) == 1
    assert capsys.readouterr().err.startswith("dp: ")
    assert dp_main(["pingpong", "--nic", "tb2", "--raw", "--iters", "5", "--param", param]) == 1

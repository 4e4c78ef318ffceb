"""DP over the ATM model: the figures and what must move them.

Nothing here is a number looked up: every bound is what the cell line allows for the
message size at hand -- a DP message of n bytes is one AAL5 PDU of 2 (link protocol
id) + 8 (Directed Message header) + n bytes, padded with its 8-byte trailer to whole
48-byte cell payloads, each cell 53 bytes on a 149.76 Mb/s line.
"""
from __future__ import annotations

import functools

import json

import pytest
import trio

from libdp import Cluster, bandwidth, pingpong
from libdp._cli import main
from nic_drivers.atm import _model as hw

CELL_RATE = 149.76e6
CELL_S = 53 * 8 / CELL_RATE
PAYLOAD_CEILING_MBS = CELL_RATE / 8 / 53 * 48 / 1e6        # 16.955 MB/s
OVERHEAD = 2 + 8                                            # vcmux header + Directed Message header


def cells(n, overhead=OVERHEAD):
    return hw.aal5_cell_count(n + overhead)


def line_limit_mbs(n, cell_rate=CELL_RATE, overhead=OVERHEAD):
    return n / (cells(n, overhead) * 53 * 8 / cell_rate) / 1e6


def reload(c, **params):
    for n in c.nodes:
        n.modules.rmmod("dp")
        n.modules.rmmod("atm")
        n.modules.insmod("atm", **params)
        n.modules.insmod("dp")


def rtt_us(sizes, iters=20, params=(), driver=None, nodes=2):
    c = Cluster(nodes=nodes, nic="atm", params=params)
    if driver is not None:
        reload(c, **driver)
    rows = c.run_spmd(pingpong, list(sizes), iters)[0]
    return {r["size"]: r["rtt_us"] for r in rows}


def bw_mbs(sizes, iters=150, params=()):
    stream = functools.partial(bandwidth, iters=1, window=iters, warmup=0)
    rows = Cluster(nodes=2, nic="atm", params=params).run_spmd(stream, list(sizes))[0]
    return {r["size"]: r["mbytes_per_s"] for r in rows}


# --------------------------------------------------------------------------- bandwidth


def test_bandwidth_stays_under_the_cell_payload_ceiling_and_nears_it_at_1500():
    got = bw_mbs((30, 31, 500, 1024, 1500))
    for n, mbs in got.items():
        assert 0 < mbs <= line_limit_mbs(n) <= PAYLOAD_CEILING_MBS, n
    # 1500 bytes are 32 cells: 16.56 MB/s of message data at most; the host keeps up.
    assert got[1500] >= 0.9 * line_limit_mbs(1500)


def test_half_the_cell_rate_halves_large_message_bandwidth():
    fast = bw_mbs((1500,), iters=100)[1500]
    slow = bw_mbs((1500,), iters=100, params=[("link.cell_rate_bps", CELL_RATE / 2)])[1500]
    assert slow <= line_limit_mbs(1500, CELL_RATE / 2)
    assert 0.45 <= slow / fast <= 0.55


# --------------------------------------------------------------------------- the cell steps


STEP_SIZES = (1, 2, 29, 30, 31, 32, 77, 78, 79, 80)


def _steps(rtt):
    """RTT differences between neighbouring sizes, split by whether a cell is added."""
    jumps, flat = [], []
    sizes = sorted(rtt)
    for a, b in zip(sizes, sizes[1:]):
        if b != a + 1:
            continue
        (jumps if cells(b) > cells(a) else flat).append(rtt[b] - rtt[a])
    return jumps, flat


def test_latency_rises_in_cell_steps():
    rtt = rtt_us(STEP_SIZES)
    assert [cells(n) for n in STEP_SIZES] == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3]
    jumps, flat = _steps(rtt)
    assert len(jumps) == 2 and len(flat) == 5
    # One more cell each way: about two cell times on the round trip ...
    for j in jumps:
        assert 1.7 * CELL_S * 1e6 <= j <= 2.4 * CELL_S * 1e6
    # ... while a byte more within the same cell count costs only the per-byte copies.
    for f in flat:
        assert 0 <= f <= 0.5
    # Across a whole cell count the per-byte slope stays well below the step.
    assert rtt[30] - rtt[1] < jumps[0]


def test_the_step_follows_the_cell_time():
    slow = rtt_us((30, 31, 78, 79), params=[("link.cell_rate_bps", CELL_RATE / 3)])
    base = rtt_us((30, 31, 78, 79))
    for a, b in ((30, 31), (78, 79)):
        assert (slow[b] - slow[a]) == pytest.approx(3 * (base[b] - base[a]), rel=0.15)


def test_llc_encapsulation_moves_the_steps_by_its_six_extra_bytes():
    rtt = rtt_us((23, 24, 25, 26), driver={"encap": "llc"})
    assert cells(24, 16) == 1 and cells(25, 16) == 2
    assert rtt[25] - rtt[24] > 1.7 * CELL_S * 1e6
    assert rtt[24] - rtt[23] < 0.5 and rtt[26] - rtt[25] < 0.5


def test_a_cell_switch_adds_its_latency_and_a_cell_time_each_way():
    direct = rtt_us((1, 1500))
    switched = rtt_us((1, 1500), params=[("link.switched", "true")])
    hop = 2 * (7e-6 + CELL_S + 0.1e-6) * 1e6                    # fabric + re-serialisation + fiber
    for n in (1, 1500):
        assert switched[n] - direct[n] == pytest.approx(hop, rel=0.1), n


def test_a_costlier_i960_raises_latency_and_a_faster_one_lowers_it():
    base = rtt_us((1, 1500))
    slow = rtt_us((1, 1500), params=[("atm.cp_hz", 12.5e6)])
    fast = rtt_us((1, 1500), params=[("atm.cp_hz", 50e6)])
    for n in base:
        assert fast[n] < base[n] < slow[n]


# --------------------------------------------------------------------------- faults


async def _stream(dp, rank, size, count, n):
    """Rank 0 sends `count` numbered messages to rank 1, paced so no TBP overflows."""
    fd = await dp.dp_open(21)
    await dp.dp_target(fd, 1 - rank, 21)
    if rank == 0:
        await trio.sleep(1e-3)
        for i in range(count):
            await dp.dp_write(fd, _message(i, n))
            await trio.sleep(400e-6)
        return None
    got = []
    while True:
        with trio.move_on_after(5e-3):
            got.append(await dp.dp_read(fd, 4096))
            continue
        return got


def _message(i, n):
    seed = i.to_bytes(4, "big")
    return (seed + bytes((i * 7 + k) & 0xFF for k in range(n)))[:n]


def test_corrupted_cells_are_caught_and_dp_data_stays_intact():
    c = Cluster(nodes=2, nic="atm", params=[("fault.corrupt", 0.05)], seed=3)
    got = c.run_spmd(_stream, 120, 1000)[1]
    sent = {_message(i, 1000) for i in range(120)}
    assert got and all(m in sent for m in got)                  # nothing corrupted got through
    assert len(got) < 120                                       # 22 cells at 5%: most PDUs hit
    dev = c.nodes[1].pci_devices[0].stats()
    corrupted = c.medium.stats()["faults"]["corrupted"]
    caught = dev["phy"]["hec_errors"] + dev["aal5"]["crc_errors"] + dev["aal5"]["protocol_errors"]
    assert corrupted > 0 and dev["phy"]["hec_errors"] > 0 and dev["aal5"]["crc_errors"] > 0
    assert caught <= corrupted
    # Every PDU is delivered or dropped by a check -- two at once when the HEC dropped
    # the cell that ended the first, so that it ran into the next.
    accounted = dev["aal5"]["pdus_received"] + dev["aal5"]["crc_errors"] + dev["aal5"]["protocol_errors"] \
        + dev["aal5"]["too_long"]
    assert 120 - dev["phy"]["hec_errors"] <= accounted <= 120
    assert dev["aal5"]["pdus_received"] == len(got)


def test_lost_duplicated_and_reordered_cells_never_deliver_a_wrong_message():
    params = [("fault.loss", 0.01), ("fault.duplicate", 0.01), ("fault.reorder", 0.01), ("fault.reorder_delay_s", 5e-6)]
    c = Cluster(nodes=2, nic="atm", params=params, seed=5)
    got = c.run_spmd(_stream, 80, 600)[1]
    sent = {_message(i, 600) for i in range(80)}
    assert got and all(m in sent for m in got)
    f = c.medium.stats()["faults"]
    assert f["lost"] and f["duplicated"] and f["reordered"]


def test_the_cli_reports_crc_and_hec_drops(capsys):
    assert main(["bandwidth", "--nic", "atm", "--sizes", "1500", "--iters", "1", "--window", "100",
                 "--param", "fault.corrupt=0.05",
                 "--json", "--stats"]) == 0
    doc = json.loads(capsys.readouterr().out)
    dev = doc["stats"]["node1"]["atm0"]["device"]
    assert doc["platform"] == "p133_atm" and doc["params"]["fault.corrupt"] == 0.05
    assert dev["phy"]["hec_errors"] > 0 and dev["aal5"]["crc_errors"] > 0
    row = doc["results"][0]
    assert row["delivered"] < row["messages"] == 100
    assert row["dropped_corrupt"] > 0        # the receiver's HEC and CRC counters place the drops


# --------------------------------------------------------------------------- many nodes


async def _all_to_one(dp, rank, size, count, gap_s):
    fd = await dp.dp_open(30)
    await dp.dp_target(fd, 0, 30)
    if rank:
        await trio.sleep(1e-3)
        for i in range(count):
            await dp.dp_write(fd, bytes([rank, i]) * 300)
            if gap_s:
                await trio.sleep(gap_s)
        return None
    got = []
    while True:
        with trio.move_on_after(5e-3):
            got.append(await dp.dp_read(fd, 4096))
            continue
        return got


EXPECTED = sorted(bytes([r, i]) * 300 for r in (1, 2, 3) for i in range(10))


def test_senders_converging_on_one_node_never_mix_their_cells():
    c = Cluster(nodes=4, nic="atm")
    got = c.run_spmd(_all_to_one, 10, 150e-6)[0]
    assert c.medium.stats()["topology"].startswith("switch")
    dev = c.nodes[0].pci_devices[0].stats()
    assert dev["aal5"]["crc_errors"] == 0 and dev["aal5"]["protocol_errors"] == 0
    assert sorted(got) == EXPECTED
    # Each sender's cells reached node 0 on that sender's own VCI.
    assert sorted(c.nodes[0].netdevs["atm0"].vcs_in) == [(0, 32 + k) for k in range(4)]


def test_a_converging_burst_overflows_and_what_is_lost_is_caught():
    c = Cluster(nodes=4, nic="atm")
    got = c.run_spmd(_all_to_one, 10, 0.0)[0]
    sw = c.medium.stats()
    dev = c.nodes[0].pci_devices[0].stats()
    # Three fibers' worth of cells into one: the switch's output buffer or the card's
    # receive FIFO (the i960's per-PDU work bunches up when three PDUs end together) overflows.
    lost = sw["output_overflow"] + dev["phy"]["rx_fifo_overflow"]
    assert lost > 0
    assert all(m in EXPECTED for m in got) and len(got) < 30
    assert 0 < dev["aal5"]["crc_errors"] + dev["aal5"]["protocol_errors"] + dev["aal5"]["too_long"] <= lost

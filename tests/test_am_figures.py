"""The SP AM paper's figures, modeled: the one-word round trip (SP-B01) and the
asymptotic bandwidth of stores and gets (SP-B08), through the measurement programs
and the ``am-pingpong`` / ``am-bandwidth`` commands -- and how they move when an input
changes, which says the figure comes from the mechanism."""
from __future__ import annotations

import json

import pytest

from libdp import Cluster
from libdp._cli import main as dp_main
from libdp._am_bench import PAPER_R_INF, PAPER_RTT_US, am_bandwidth, am_pingpong, summarize

ITERS = 200                     # a multiple of the lazy-pop interval


def rtt(params=(), load=None, words=(1,), iters=ITERS, seed=0):
    c = Cluster(nodes=2, nic="tb2", params=list(params), seed=seed, load=[("am", dict(load or {}))])
    return {r["words"]: r["rtt_us"] for r in am_pingpong(c, words=words, iters=iters)}


def r_inf(op, mode, params=()):
    c = Cluster(nodes=2, nic="tb2", params=list(params), load=["am"])
    rows, (r, _nh) = am_bandwidth(c, op, mode, sizes=(1 << 20,))
    return r


@pytest.fixture(scope="module")
def base():
    return rtt(words=(1, 2, 3, 4))


def run_cli(capsys, argv):
    rc = dp_main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


# ------------------------------------------------------------------------- round trip


def test_one_word_round_trip_matches_the_paper(base):
    assert base[1] == pytest.approx(PAPER_RTT_US, rel=0.05)          # SP-B01: 51.0 µs


def test_more_words_cost_a_little_more(base):
    assert base[1] < base[2] < base[3] < base[4] < base[1] + 4


def test_am_costs_about_4us_above_the_raw_fifos(base):
    """SP-B04: SP AM is only about 4 µs above the raw FIFO round trip (46.6-47.0)."""
    from libdp._tb2_raw import raw_pingpong
    raw = raw_pingpong(Cluster(nodes=2, nic="tb2"), iters=ITERS)[0]["rtt_us"]
    assert 2.0 <= base[1] - raw <= 6.0


def test_same_seed_same_figure(base):
    assert rtt() == {1: base[1]}


def test_header_work_is_on_the_critical_path_and_bookkeeping_is_not(base):
    """AM's header is built before the length store (on the round trip's critical path,
    twice: request and reply); its retransmission copy and bookkeeping run while the
    packet crosses the switch -- they do not move the round trip (SP-B04)."""
    hz = 66e6
    plus_hdr = rtt(load={"hdr_cycles": str(25 + 66)})[1]
    assert plus_hdr - base[1] == pytest.approx(2 * 66 / hz * 1e6, abs=0.02)
    plus_post = rtt(load={"post_cycles": str(59.54 + 66), "request_cycles": str(158.4 + 66)})[1]
    assert plus_post == pytest.approx(base[1], abs=0.01)


def test_a_dearer_microchannel_slows_the_round_trip_by_its_accesses(base):
    """Per round trip: two length stores and 2/8 lazy pops -- 2.25 MicroChannel writes."""
    slow = rtt(params=[("pci.write_s", 2e-6)])[1]
    assert slow - base[1] == pytest.approx(2.25, abs=0.1)


# ------------------------------------------------------------------------- bandwidth


@pytest.mark.parametrize("op,mode", [("store", "async"), ("store", "blocking"), ("get", "async"),
                                     ("get", "blocking")])
def test_asymptotic_bandwidth_matches_the_paper(op, mode):
    assert r_inf(op, mode) == pytest.approx(PAPER_R_INF, rel=0.05)     # SP-B08: 34.3 MB/s


def test_a_slower_adapter_lowers_the_asymptote():
    """The i860's per-packet firmware time bounds the stream (it also takes each ack)."""
    base = r_inf("store", "async")
    slow = r_inf("store", "async", params=[("tb2.i860_tx_s", 8e-6), ("tb2.i860_rx_s", 8e-6)])
    assert slow < base * 0.85
    assert slow == pytest.approx(224 / (8e-6 * 37 / 36) / 1e6, rel=0.05)


def test_pipelining_wins_for_small_transfers_and_not_for_large():
    """SP-C06: for very large transfers blocking and non-blocking stores behave the same."""
    sizes = (256, 4096, 1 << 20)
    rows = {}
    for mode in ("async", "blocking"):
        c = Cluster(nodes=2, nic="tb2", load=["am"])
        rows[mode] = [r["mbytes_per_s"] for r in am_bandwidth(c, "store", mode, sizes=sizes, max_transfers=64)[0]]
    a, b = rows["async"], rows["blocking"]
    assert a[0] > 2 * b[0] and a[1] > b[1]
    assert a == sorted(a) and b == sorted(b)
    assert b[-1] == pytest.approx(a[-1], rel=0.01)


def test_summarize_interpolates_the_half_power_point():
    rows = [{"size": 64, "mbytes_per_s": 5.0}, {"size": 256, "mbytes_per_s": 15.0},
            {"size": 1024, "mbytes_per_s": 25.0}, {"size": 4096, "mbytes_per_s": 30.0}]
    r, nh = summarize(rows)
    assert r == 30.0 and nh == pytest.approx(256, rel=1e-9)
    assert summarize(rows[:1]) == (5.0, 64.0)


# ------------------------------------------------------------------------- commands


def test_am_pingpong_command_json(capsys):
    rc, out, err = run_cli(capsys, ["am-pingpong", "--iters", "100", "--sizes", "1,4", "--json", "--stats"])
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["benchmark"] == "am-pingpong" and doc["platform"] == "sp_thin"
    assert [r["words"] for r in doc["results"]] == [1, 4]
    one = doc["results"][0]["rtt_us"]
    assert one == pytest.approx(PAPER_RTT_US, rel=0.05)
    assert doc["results"][1]["rtt_us"] > one
    assert doc["stats"]["node0"]["am"]["closed_totals"]["requests"] >= 2 * 110


def test_am_pingpong_command_table_and_module_params(capsys):
    rc, out, _ = run_cli(capsys, ["am-pingpong", "--iters", "50", "--sizes", "1", "--param", "am.hdr_cycles=91",
                                  "--param", "pci.read_s=1e-6"])
    assert rc == 0
    assert "SP-B01" in out and "am.hdr_cycles=91" in out and "RTT (us)" in out
    line = [ln for ln in out.splitlines() if ln.startswith("1 ")][0]
    assert float(line.split()[-1]) > PAPER_RTT_US * 0.95 + 1.5


def test_am_bandwidth_command_json(capsys):
    rc, out, err = run_cli(capsys, ["am-bandwidth", "--op", "get", "--mode", "async", "--sizes", "256,1048576",
                                    "--json"])
    assert rc == 0, err
    doc = json.loads(out)
    assert [r["size"] for r in doc["results"]] == [256, 1048576]
    assert all(set(r) >= {"size", "mbytes_per_s"} for r in doc["results"])
    assert doc["r_inf_mbytes_per_s"] == pytest.approx(PAPER_R_INF, rel=0.05)
    assert 256 < doc["n_half_bytes"] < 1048576
    assert doc["op"] == "get" and doc["mode"] == "async"


def test_am_bandwidth_command_table(capsys):
    rc, out, _ = run_cli(capsys, ["am-bandwidth", "--sizes", "64,4096", "--total", "65536", "--iters", "50"])
    assert rc == 0
    assert "SP-B08" in out and "r_inf" in out and "n_1/2" in out and "Bandwidth (MB/s)" in out


@pytest.mark.parametrize("argv", [["am-pingpong", "--param", "no.such=1"], ["am-pingpong", "--param", "am.nosuch=1"],
                                  ["am-bandwidth", "--sizes", "4096", "--total", "1024"],
                                  ["am-pingpong", "--param", "am.request_window=0"]])
def test_bad_options_exit_1_with_a_message(capsys, argv):
    rc, out, err = run_cli(capsys, argv + ["--iters", "5"] if argv[0] == "am-pingpong" else argv)
    assert rc == 1 and err.startswith("dp: ") and not out

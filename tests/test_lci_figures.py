"""LCI's measurements, modeled: I-sdma's LogP values within 5% of the paper on both
platforms (LCI-T3), every variant measured the same way, the JSON the issue asks for,
and the pingpong/bandwidth commands."""
from __future__ import annotations

import json

import pytest

from libdp._cli import main
from libdp._lci_bench import PAPER_LOGP

KEYS = ("os_us", "or_us", "L_us", "g_us", "end_to_end_us")


def run_json(capsys, *argv):
    assert main(list(argv) + ["--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("platform", ["ppro200_lanai4", "p3_1000_lanai9"])
def test_isdma_logp_within_five_percent_of_the_paper(capsys, platform):
    doc = run_json(capsys, "lci-logp", "--variant", "I-sdma", "--platform", platform)
    (row,) = doc["results"]
    assert (row["variant"], row["platform"], row["size"]) == ("I-sdma", platform, 16)
    paper = PAPER_LOGP[platform]
    for k in KEYS:
        assert row[k] == pytest.approx(paper[k], rel=0.05), k
    assert row["L_us"] == pytest.approx(row["end_to_end_us"] - row["os_us"] - row["or_us"], abs=0.02)


def test_every_variant_is_measured_and_the_mechanisms_move_the_figures(capsys):
    doc = run_json(capsys, "lci-logp", "--variant", "all", "--platform", "ppro200_lanai4")
    rows = {r["variant"]: r for r in doc["results"]}
    assert set(rows) == {"I-sdma", "I-pio", "I-rcpy", "I-nirx", "I-hrx", "I-1k", "I-4k"}
    for r in rows.values():
        assert all(r[k] > 0 for k in KEYS)
    # PIO skips the host's copy and the NI's fetch DMA: shorter latency (LCI-C15) ...
    assert rows["I-pio"]["L_us"] < rows["I-sdma"]["L_us"]
    # ... the host library's go-back-N costs host time in both calls (LCI-C12) ...
    assert rows["I-hrx"]["os_us"] > rows["I-sdma"]["os_us"] and rows["I-hrx"]["or_us"] > rows["I-sdma"]["or_us"]
    # ... the NI's go-back-N costs NI time on the critical path (LCI-C13), not host time.
    assert rows["I-nirx"]["L_us"] > rows["I-sdma"]["L_us"]
    assert rows["I-nirx"]["os_us"] == pytest.approx(rows["I-sdma"]["os_us"], rel=0.02)


def test_a_slower_lanai_moves_latency_not_host_overhead(capsys):
    base = run_json(capsys, "lci-logp", "--variant", "I-sdma", "--platform", "ppro200_lanai4")["results"][0]
    slow = run_json(capsys, "lci-logp", "--variant", "I-sdma", "--platform", "ppro200_lanai4",
                    "--param", "lci.ni_recv_cycles=400")["results"][0]
    assert slow["L_us"] > base["L_us"] + 1.0
    assert slow["os_us"] == pytest.approx(base["os_us"], rel=0.01)


def test_pingpong_and_bandwidth_with_and_without_a_receiver_copy(capsys):
    pp = run_json(capsys, "lci-pingpong", "--variant", "I-sdma", "--sizes", "0,16,4096", "--iters", "5")
    assert pp["variant"] == "I-sdma" and pp["platform"]
    ows = [r["one_way_us"] for r in pp["results"]]
    assert [r["size"] for r in pp["results"]] == [0, 16, 4096] and ows[0] <= ows[1] < ows[2]
    assert all(r["rtt_us"] == pytest.approx(2 * r["one_way_us"], rel=1e-6) for r in pp["results"])
    plain = run_json(capsys, "lci-bandwidth", "--sizes", "2048", "--total", "200000")["results"][0]
    copy = run_json(capsys, "lci-bandwidth", "--sizes", "2048", "--total", "200000", "--copy")["results"][0]
    assert plain["size"] == 2048 and 0 < copy["mbytes_per_s"] <= plain["mbytes_per_s"]


def test_bad_variant_is_one_line_and_status_1(capsys):
    assert main(["lci-logp", "--variant", "I-nope"]) == 1
    err = capsys.readouterr().err.strip()
    assert "I-nope" in err and len(err.splitlines()) == 1

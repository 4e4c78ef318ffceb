"""``dp fm-pingpong`` and ``dp fm-bandwidth``: documents, tables, options and errors."""
from __future__ import annotations

import json

import pytest

from cli_run import run


def test_pingpong_json(capsys):
    rc, out, _ = run(capsys, ["fm-pingpong", "--sizes", "0,8", "--iters", "20", "--json"])
    doc = json.loads(out)
    assert rc == 0 and doc["benchmark"] == "fm-pingpong" and doc["platform"] == "hpvm19"
    assert [r["size"] for r in doc["results"]] == [0, 8]
    assert set(doc["results"][0]) == {"size", "one_way_us", "rtt_us"}
    assert doc["notify"] == "memory" and doc["pacing"]["chunk_bytes"] == 160
    assert any("PIO pacing" in line for line in doc["dmesg"])


def test_bandwidth_json_has_r_inf_and_n_half(capsys):
    rc, out, _ = run(capsys, ["fm-bandwidth", "--sizes", "64,2048", "--total", "65536", "--json"])
    doc = json.loads(out)
    assert rc == 0 and set(doc["results"][0]) >= {"size", "mbytes_per_s"}
    assert doc["r_inf_mbytes_per_s"] == doc["results"][-1]["mbytes_per_s"] and doc["n_half_bytes"] > 0


def test_notify_and_pacing_show_in_the_table(capsys):
    rc, out, _ = run(capsys, ["fm-pingpong", "--sizes", "0", "--iters", "10", "--notify", "pci", "--pacing", "off",
                              "--platform", "lpr_lanai4"])
    assert rc == 0 and "notify=pci" in out and "PIO pacing: none (pacing=off)" in out
    rc, out, _ = run(capsys, ["fm-bandwidth", "--sizes", "2048", "--total", "65536", "--transport", "smt"])
    assert rc == 0 and "shared memory, two processes of one host" in out and "r_inf" in out


def test_module_parameters_through_param_and_load(capsys):
    rc, out, _ = run(capsys, ["fm-pingpong", "--sizes", "0", "--iters", "10", "--json", "--param", "fm.credits=3",
                              "--load", "fm:send_slots=4", "--param", "chipset.retry_clocks=2"])
    doc = json.loads(out)
    assert doc["fm_params"]["credits"] == 3 and doc["fm_params"]["send_slots"] == 4
    assert doc["overrides"] == {"chipset.retry_clocks": 2}


def test_stats(capsys):
    rc, out, _ = run(capsys, ["fm-pingpong", "--sizes", "0", "--iters", "10", "--stats", "--notify", "pci"])
    assert rc == 0 and "pci_polls" in out and "pci_bus" in out


@pytest.mark.parametrize("argv, text", [
    (["fm-pingpong", "--real", "--transport", "myrinet"], "shared-memory transport"),
    (["fm-bandwidth", "--sizes", "0,64"], "at least one byte"),
    (["fm-pingpong", "--pacing", "sometimes", "--iters", "1"], "pacing"),
    (["fm-pingpong", "--param", "fm.nonsense=1", "--iters", "1"], "unknown parameter"),
])
def test_errors_are_one_line(capsys, argv, text):
    rc, out, err = run(capsys, argv)
    assert rc == 1 and text in err and len(err.strip().splitlines()) == 1


def test_the_papers_figure_is_shown_only_for_the_module_settings_it_was_measured_with(capsys):
    base = ["fm-pingpong", "--sizes", "0", "--iters", "10"]
    _, out, _ = run(capsys, base)
    assert "paper (FM-B01)" in out                                       # memory notification, as measured
    _, out, _ = run(capsys, base + ["--notify", "pci"])
    assert "paper (FM-B01)" not in out                                   # not HPVM 1.9's notification
    _, out, _ = run(capsys, base + ["--param", "fm.lcp_send_cycles=100"])
    assert "paper (FM-B01)" not in out                                   # a changed module is not the paper's
    pii = ["fm-pingpong", "--platform", "pii300_lanai4", "--sizes", "0", "--iters", "10"]
    _, out, _ = run(capsys, pii + ["--notify", "pci"])
    assert "paper (FM-B16)" in out                                       # FM 2.1 polled a LANai register
    _, out, _ = run(capsys, pii)
    assert "paper (FM-B16)" not in out


def test_real_pingpong_and_bandwidth_between_two_processes(capsys):
    rc, out, _ = run(capsys, ["fm-pingpong", "--real", "--transport", "smt", "--sizes", "8", "--iters", "200",
                              "--json"])
    doc = json.loads(out)
    assert rc == 0 and doc["time"] == "real" and doc["results"][0]["size"] == 8
    assert 0 < doc["results"][0]["rtt_median_us"] and 0 < doc["results"][0]["rtt_us"]
    rc, out, _ = run(capsys, ["fm-bandwidth", "--real", "--transport", "smt", "--sizes", "64,3000", "--iters", "300",
                              "--json"])
    doc = json.loads(out)
    assert rc == 0 and [r["size"] for r in doc["results"]] == [64, 3000]
    assert all(r["mbytes_per_s"] > 0 and r["messages"] == 300 for r in doc["results"])
    assert doc["r_inf_mbytes_per_s"] == doc["results"][-1]["mbytes_per_s"]
    rc, _, err = run(capsys, ["fm-bandwidth", "--real", "--sizes", "64"])
    assert rc == 1 and "--real --transport smt" in err

"""The `dp` command, driven through `libdp._cli.main(argv)` with captured output."""
from __future__ import annotations

import json

import pytest

from kernelsim import load_profile
from libdp._cli import main

from cli_run import run, run_json


# --------------------------------------------------------------------------- benchmarks


def test_pingpong_json(capsys):
    doc = run_json(capsys, ["pingpong", "--sizes", "1,64", "--iters", "50"])
    assert doc["time"] == "modeled"
    assert doc["platform"] == "p133"
    assert doc["nic"] == "dec21140"
    assert doc["params"]["link.rate_bps"] == 100e6
    assert doc["params"]["cpu.hz"] == 133e6
    assert [r["size"] for r in doc["results"]] == [1, 64]
    for r in doc["results"]:
        assert set(r) >= {"size", "rtt_us", "one_way_us"}
        assert r["rtt_us"] > 0
        assert r["one_way_us"] == pytest.approx(r["rtt_us"] / 2)
    assert doc["results"][0]["rtt_us"] == pytest.approx(46.6, rel=0.05)
    assert doc["results"][0]["rtt_us"] < doc["results"][1]["rtt_us"]


def test_bandwidth_json(capsys):
    doc = run_json(capsys, ["bandwidth", "--sizes", "512,1500", "--iters", "4"])
    assert doc["time"] == "modeled"
    assert [r["size"] for r in doc["results"]] == [512, 1500]
    for r in doc["results"]:
        assert set(r) >= {"size", "mbytes_per_s", "messages", "delivered", "dropped", "dropped_tbp_full",
                          "dropped_ring_full", "dropped_corrupt"}
        assert r["messages"] == 4 * 64 and 0 < r["delivered"] <= r["messages"]
        assert r["dropped"] == r["messages"] - r["delivered"]
        assert r["mbytes_per_s"] > 0
    assert doc["results"][1]["mbytes_per_s"] == pytest.approx(12.2, rel=0.05)


def test_param_override_shows_in_the_json_and_in_the_figures(capsys):
    base = run_json(capsys, ["bandwidth", "--sizes", "1500", "--iters", "2"])
    slow = run_json(capsys, ["bandwidth", "--sizes", "1500", "--iters", "2", "--param", "link.rate_bps=10e6"])
    assert slow["params"]["link.rate_bps"] == 10e6
    assert slow["overrides"] == {"link.rate_bps": 10e6}
    assert base["overrides"] == {}
    ratio = slow["results"][0]["mbytes_per_s"] / base["results"][0]["mbytes_per_s"]
    assert 0.08 <= ratio <= 0.12


def test_pingpong_table_output(capsys):
    rc, out, err = run(capsys, ["pingpong", "--sizes", "1,1500", "--iters", "10"])
    assert rc == 0 and err == ""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines[0].startswith("# DP pingpong")
    data = [ln.split() for ln in lines if not ln.startswith("#")]
    assert [int(d[0]) for d in data] == [1, 1500]
    for d in data:
        assert float(d[2]) == pytest.approx(2 * float(d[1]), rel=1e-3)


def test_bandwidth_table_output(capsys):
    rc, out, err = run(capsys, ["bandwidth", "--sizes", "1500", "--iters", "2"])
    assert rc == 0
    assert out.startswith("# DP bandwidth")
    assert any(ln.split()[0] == "1500" for ln in out.splitlines() if ln and not ln.startswith("#"))


@pytest.mark.parametrize("param", ["no.such.key=1", "link.rate_bp=10e6", "noequals", "cpu.hz=abc",
                                   "link.preamble_bytes=8.5"])
def test_bad_param_exits_1_with_a_message(capsys, param):
    rc, out, err = run(capsys, ["pingpong", "--sizes", "1", "--iters", "5", "--param", param])
    assert rc == 1
    assert err.startswith("dp: ") and err.strip() != "dp:"
    assert out == ""


def test_unknown_key_message_names_the_key(capsys):
    rc, _out, err = run(capsys, ["bandwidth", "--param", "link.rate_bp=10e6"])
    assert rc == 1
    assert "link.rate_bp" in err


@pytest.mark.parametrize("param", ["link.rate_bps=0", "cpu.hz=0", "dp.tbp_slots=0", "fault.loss=2"])
def test_impossible_param_value_exits_1_with_a_message(capsys, param):
    """Not a traceback: a value no machine can have is a usage error like any other."""
    rc, out, err = run(capsys, ["pingpong", "--sizes", "1", "--iters", "5", "--param", param])
    assert rc == 1
    assert err.startswith("dp: ")


@pytest.mark.parametrize("argv", [
    ["pingpong", "--nic", "no-such-nic", "--iters", "5", "--sizes", "1"],
    ["pingpong", "--platform", "no-such-platform", "--iters", "5", "--sizes", "1"],
    ["bandwidth", "--load", "no_such_module", "--iters", "5", "--sizes", "1"],
    ["modinfo", "no_such_module"],
    ["profile", "no-such-platform"],
])
def test_unknown_names_exit_1(capsys, argv):
    rc, _out, err = run(capsys, argv)
    assert rc == 1
    assert err.startswith("dp: ")


@pytest.mark.parametrize("argv", [
    ["pingpong", "--sizes", "a,b"],
    ["pingpong", "--sizes", "-1"],
    ["pingpong", "--iters", "0"],
    ["bandwidth", "--iters", "many"],
    ["no-such-command"],
])
def test_argument_errors_are_usage_errors(capsys, argv):
    with pytest.raises(SystemExit) as ei:
        main(argv)
    assert ei.value.code == 2
    assert "usage" in capsys.readouterr().err


def test_no_command_prints_help(capsys):
    rc, out, _err = run(capsys, [])
    assert rc == 2
    assert "pingpong" in out and "bandwidth" in out


# --------------------------------------------------------------------------- --stats


def _keys(tree, acc=None):
    acc = set() if acc is None else acc
    if isinstance(tree, dict):
        for k, v in tree.items():
            acc.add(str(k))
            _keys(v, acc)
    return acc


def test_stats_json_includes_ring_counters(capsys):
    doc = run_json(capsys, ["pingpong", "--sizes", "1", "--iters", "10", "--stats"])
    st = doc["stats"]
    assert {"node0", "node1", "engine", "medium"} <= set(st)
    eth = st["node0"]["eth0"]
    for k in ("tx_ring", "rx_ring", "tx_ring_full", "tx_queued", "rx_frames", "tx_frames"):
        assert k in eth, k
    assert eth["tx_frames"] > 0 and eth["rx_frames"] > 0
    assert "dp" in st["node0"]


def test_stats_json_includes_tbp_counters(capsys):
    """--stats prints "the counters of every ring, pool and queue": the Token Buffer
    Pools' counters (deposited, dropped_full, ...) are among them."""
    doc = run_json(capsys, ["bandwidth", "--sizes", "64", "--iters", "100", "--stats"])
    keys = _keys(doc["stats"])
    assert "dropped_full" in keys and "deposited" in keys


def test_stats_text_output(capsys):
    rc, out, _err = run(capsys, ["pingpong", "--sizes", "1", "--iters", "10", "--stats"])
    assert rc == 0
    assert "# statistics" in out
    for word in ("tx_ring", "rx_ring", "tx_ring_full", "rx_malformed", "interrupts"):
        assert word in out, word


def test_no_stats_without_the_flag(capsys):
    doc = run_json(capsys, ["pingpong", "--sizes", "1", "--iters", "5"])
    assert "stats" not in doc


# --------------------------------------------------------------------------- info commands


def test_modules_lists_dp_and_the_driver(capsys):
    rc, out, _err = run(capsys, ["modules"])
    assert rc == 0
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.strip()}
    assert "dp" in lines and "Directed Point" in lines["dp"]
    assert "dec21140" in lines and "21140" in lines["dec21140"]


def test_modinfo_dp(capsys):
    rc, out, _err = run(capsys, ["modinfo", "dp"])
    assert rc == 0
    fields = {}
    for ln in out.splitlines():
        k, _, v = ln.partition(":")
        fields.setdefault(k.strip(), []).append(v.strip())
    assert fields["name"] == ["dp"]
    assert fields["description"][0]
    assert any(p.startswith("tbp_slots:") for p in fields["parm"])
    assert any(p.startswith("netdev:") for p in fields["parm"])
    assert "DP-C02" in fields["sources"][0]


def test_modinfo_dec21140(capsys):
    rc, out, _err = run(capsys, ["modinfo", "dec21140"])
    assert rc == 0
    for p in ("tx_ring", "rx_ring", "budget", "store_forward", "burst_longwords"):
        assert f"parm:        {p}:" in out


def test_profile_text_lists_every_key_with_its_source(capsys):
    rc, out, _err = run(capsys, ["profile"])
    assert rc == 0
    p = load_profile("p133")
    lines = {ln.split()[0]: ln for ln in out.splitlines() if ln.strip() and not ln.startswith("#")}
    assert set(lines) == set(p.keys())
    for k in p.keys():
        assert p.entry(k).source in lines[k]


def test_profile_json(capsys):
    rc, out, _err = run(capsys, ["profile", "p133", "--json"])
    assert rc == 0
    doc = json.loads(out)
    p = load_profile("p133")
    assert set(doc) == set(p.keys())
    for k, v in doc.items():
        assert v["value"] == p[k] and v["source"] == p.entry(k).source and "unit" in v


def test_errors_of_several_ranks_are_one_line_without_traceback(capsys):
    rc, out, err = run(capsys, ["pingpong", "--sizes", "1", "--iters", "5", "--param", "dp.max_message=0"])
    assert rc == 1 and out == ""
    assert err.startswith("dp: ") and err.count("\n") == 1 and "Traceback" not in err


def test_debug_shows_the_error_itself(capsys):
    with pytest.raises((ValueError, OSError, BaseExceptionGroup)):
        main(["pingpong", "--debug", "--sizes", "1", "--iters", "5", "--param", "dp.max_message=0"])

"""``dp am-bandwidth --window W`` (issue 12): the OSU window benchmark over SP AM."""
from __future__ import annotations

import json

import pytest

from libdp import Cluster
from libdp._am_bench import am_window_program
from libdp._cli import main


def _rows(op, sizes, window, iters=2, full=False):
    c = Cluster(nodes=2, nic="tb2", load=["am"])
    rows = c.run_spmd(am_window_program, op, sizes, window, iters, 1, full)[0]
    stats = rows[-1].pop("am_stats")
    return rows, stats


@pytest.mark.parametrize("op", ["store", "get"])
def test_windows_move_every_transfer_and_the_rate_grows_with_size(op):
    rows, stats = _rows(op, (16, 2048), 8, iters=3, full=True)
    assert [r["size"] for r in rows] == [16, 2048]
    for r in rows:
        assert r["messages"] == r["delivered"] == 24 and r["dropped"] == 0 and r["windows"] == 3
        assert r["min_mbytes_per_s"] <= r["mbytes_per_s"] * 1.0001 and r["max_mbytes_per_s"] >= r["min_mbytes_per_s"]
    assert 0 < rows[0]["mbytes_per_s"] < rows[1]["mbytes_per_s"] < 40      # under the switch link's 40 MB/s
    done = stats["stores_completed"] if op == "store" else stats["gets_completed"]
    assert done == 8 * 4 * 2                                                # warm-up window included


def test_a_larger_window_hides_more_of_the_round_trip():
    """Small stores: each window pays one round trip for its closing request, so W=1 is
    latency-bound and W=32 streams."""
    one, _ = _rows("store", (256,), 1, iters=8)
    many, _ = _rows("store", (256,), 32, iters=2)
    assert many[0]["mbytes_per_s"] > 2 * one[0]["mbytes_per_s"]


def test_dp_am_bandwidth_window_cli(capsys):
    assert main(["am-bandwidth", "--window", "4", "--sizes", "64,1024", "--iters", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mode"] == "window" and doc["window"] == 4 and doc["iters"] == 2 and doc["warmup_windows"] == 1
    assert [r["size"] for r in doc["results"]] == [64, 1024]
    assert all(r["delivered"] == 8 for r in doc["results"])
    assert main(["am-bandwidth", "--window", "4", "--sizes", "64", "--iters", "1", "--full"]) == 0
    out = capsys.readouterr().out
    assert "OSU window" in out and "Stddev (MB/s)" in out
    for bad, why in ((["--mode", "blocking"], "not --mode blocking"), (["--total", "4096"], "--total is the paper's")):
        assert main(["am-bandwidth", "--window", "4", "--sizes", "64", *bad]) == 1
        assert why in capsys.readouterr().err
    assert main(["am-bandwidth", "--sizes", "64", "--full"]) == 1      # the paper's mode has no windows
    assert "use it with --window" in capsys.readouterr().err

"""``dp reproduce``, ``--plot`` / ``dp plot`` and ``--sweep`` (local, process pool, Dask)."""
from __future__ import annotations

import json

import pytest

from libdp import targets as targets_mod
from libdp._cli import main

from cli_run import run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- reproduce


def test_reproduce_quick_covers_every_registered_target(capsys, tmp_path):
    md = tmp_path / "report.md"
    rc, out, err = run(capsys, ["reproduce", "--quick", "--json", "--markdown", str(md)])
    assert rc == 0, err
    doc = json.loads(out)
    ids = {r["id"] for r in doc["results"]}
    assert ids == {t.id for t in targets_mod.targets()}
    assert {"DP-B01", "DP-B02", "SP-B03", "SP-B01", "SP-B08", "EP-A18"} <= ids
    for r in doc["results"]:
        assert r["model"] > 0 and r["published"] > 0
        assert r["rel_error_pct"] == pytest.approx(100 * (r["model"] - r["published"]) / r["published"])
    marks = {r["id"]: r["pass"] for r in doc["results"]}
    assert marks["DP-B01"] and marks["SP-B03"] and marks["EP-A18"]
    assert marks["DP-B04"] is None                     # shown for reference (contradicts DP-B01, N4)
    assert doc["passed"] + doc["failed"] == sum(m is not None for m in marks.values())
    text = md.read_text()
    assert "| DP-B01 |" in text and "Within 5%" in text


def test_reproduce_only_and_unknown_ids(capsys):
    rc, out, _ = run(capsys, ["reproduce", "--quick", "--only", "SP-B03"])
    assert rc == 0 and "SP-B03" in out and "DP-B01" not in out
    rc, _, err = run(capsys, ["reproduce", "--only", "XX-B99"])
    assert rc == 1 and "XX-B99" in err


def test_a_target_passes_within_its_tolerance_or_range():
    t = targets_mod.Target(id="T", what="t", unit="us", argv=(), model=lambda d: 0.0, published=46.8,
                           published_range=(46.6, 47.0))
    assert t.passes(46.6) and t.passes(49.0) and not t.passes(49.2)


def test_registering_a_different_target_twice_is_refused():
    t = targets_mod.targets()[0]
    with pytest.raises(OSError, match="twice"):
        targets_mod.register(targets_mod.Target(id=t.id, what="other", unit="", argv=(), model=len,
                                                published=1.0))


# --------------------------------------------------------------------------- plots


def test_plot_on_a_benchmark(capsys, tmp_path):
    png, svg = tmp_path / "pp.png", tmp_path / "bw.svg"
    assert main(["pingpong", "--sizes", "1,64", "--iters", "5", "--plot", str(png)]) == 0
    assert png.read_bytes().startswith(PNG_MAGIC)
    assert main(["bandwidth", "--sizes", "1500", "--iters", "2", "--plot", str(svg), "--json"]) == 0
    text = svg.read_text()
    assert "<svg" in text and "DP-B02" in text             # the published point, with its source id
    capsys.readouterr()


def test_dp_plot_redraws_saved_documents(capsys, tmp_path):
    files = []
    for rate in ("100e6", "10e6"):
        assert main(["bandwidth", "--sizes", "64,1500", "--iters", "2", "--param", f"link.rate_bps={rate}",
                     "--json"]) == 0
        f = tmp_path / f"bw{rate}.json"
        f.write_text(capsys.readouterr().out)
        files.append(str(f))
    out = tmp_path / "both.svg"
    rc, _, err = run(capsys, ["plot", *files, "-o", str(out), "--label", "100 Mb/s", "--label", "10 Mb/s"])
    assert rc == 0, err
    assert "100 Mb/s" in out.read_text() and "10 Mb/s" in out.read_text()


@pytest.mark.parametrize("make_argv", [
    lambda d: ["plot", str(d / "missing.json"), "-o", str(d / "x.png")],
    lambda d: ["plot", str(d / "bad.json"), "-o", str(d / "x.png")],
    lambda d: ["plot", str(d / "lat.json"), str(d / "bw.json"), "-o", str(d / "x.png")],
])
def test_plot_errors_are_one_line(capsys, tmp_path, make_argv):
    (tmp_path / "bad.json").write_text("{not json")
    assert main(["pingpong", "--sizes", "1", "--iters", "2", "--json"]) == 0
    (tmp_path / "lat.json").write_text(capsys.readouterr().out)
    assert main(["bandwidth", "--sizes", "64", "--iters", "1", "--json"]) == 0
    (tmp_path / "bw.json").write_text(capsys.readouterr().out)
    rc, _, err = run(capsys, make_argv(tmp_path))
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("argv", [["pingpong", "--sizes", "1", "--iters", "2", "--plot", "x.gif"],
                                  ["plot", "missing.json", "-o", "x.gif"]])
def test_a_file_plots_cannot_draw_is_refused_before_anything_runs(capsys, tmp_path, monkeypatch, argv):
    """The name is a usage error (exit status 2, one line), found by the parser: no table was
    printed first, no document read, no file written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == "" and not (tmp_path / "x.gif").exists()
    assert err.strip().splitlines() == [err.strip()] and "draws .png, .svg, .pdf files, not 'x.gif'" in err


# --------------------------------------------------------------------------- sweeps

SWEEP = ["bandwidth", "--sizes", "1500", "--iters", "2", "--sweep", "link.rate_bps=10e6,100e6",
         "--sweep", "dp.tbp_slots=16,64"]


def _check_sweep(doc):
    assert doc["benchmark"] == "sweep" and doc["schema_version"]
    assert [p["params"] for p in doc["points"]] == [
        {"link.rate_bps": "10e6", "dp.tbp_slots": "16"}, {"link.rate_bps": "10e6", "dp.tbp_slots": "64"},
        {"link.rate_bps": "100e6", "dp.tbp_slots": "16"}, {"link.rate_bps": "100e6", "dp.tbp_slots": "64"}]
    bw = [p["document"]["results"][0]["mbytes_per_s"] for p in doc["points"]]
    for p in doc["points"]:
        assert p["document"]["params"]["link.rate_bps"] == float(p["params"]["link.rate_bps"])
    assert 0.08 < bw[0] / bw[2] < 0.12                     # a tenth of the link, a tenth of the bandwidth


def test_sweep_runs_every_combination_into_one_document(capsys, tmp_path):
    plot = tmp_path / "sweep.svg"
    rc, out, err = run(capsys, SWEEP + ["--json", "--plot", str(plot)])
    assert rc == 0, err
    _check_sweep(json.loads(out))
    assert plot.read_text().count("link.rate_bps=") >= 4        # one curve per point
    rc, out, _ = run(capsys, SWEEP)
    rows = [ln.split() for ln in out.splitlines() if ln and not ln.startswith("#")]
    assert [r[:3] for r in rows] == [["10e6", "16", "1500"], ["10e6", "64", "1500"],
                                     ["100e6", "16", "1500"], ["100e6", "64", "1500"]]


def test_sweep_on_a_process_pool_gives_the_same_document(capsys):
    rc, out, _ = run(capsys, SWEEP + ["--json"])
    here = json.loads(out)
    rc, out, err = run(capsys, SWEEP + ["--json", "--jobs", "2"])
    assert rc == 0, err
    assert json.loads(out)["points"] == here["points"]     # deterministic: the same figures anywhere


def test_sweep_on_a_dask_cluster(capsys):
    distributed = pytest.importorskip("distributed", reason="the cluster extra: pip install 'dp[cluster]'")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster:
        rc, out, err = run(capsys, SWEEP + ["--json", "--scheduler", cluster.scheduler_address])
    assert rc == 0, err
    _check_sweep(json.loads(out))


@pytest.mark.parametrize("extra, words", [
    (["--sweep", "link.rate_bps"], "KEY=V1,V2"),
    (["--sweep", "no.such.key=1,2"], "no.such.key"),
    (["--sweep", "link.rate_bps=1e6", "--sweep", "link.rate_bps=2e6"], "once"),
])
def test_bad_sweeps_are_one_line(capsys, extra, words):
    rc, _, err = run(capsys, ["bandwidth", "--sizes", "64", "--iters", "1"] + extra)
    assert rc == 1 and words in err and len(err.strip().splitlines()) == 1

"""The benchmarks as a user of OSU's tools expects them: window bandwidth with drops
counted and placed, size ranges, --full, tables, schema versions, plots, the
reproduction report, sweeps, progress, and options refused where they do not apply."""
from __future__ import annotations

import argparse

import pytest

from libdp import _report
from libdp._argtypes import size_list

from cli_run import run, run_json


def data_lines(out):
    return [ln.split() for ln in out.splitlines() if ln.strip() and not ln.startswith("#")]


# --------------------------------------------------------------------------- sizes


@pytest.mark.parametrize("text, sizes", [
    ("1:16", [1, 2, 4, 8, 16]),
    ("1:1500", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 1500]),
    ("0:4,1500", [0, 1, 2, 4, 1500]),
    ("64,1,8", [64, 1, 8]),
])
def test_sizes_are_lists_doubling_ranges_or_both(text, sizes):
    assert size_list(text) == sizes


@pytest.mark.parametrize("text", ["", "a", "16:1", "-1", "-4:4", "1:x"])
def test_bad_sizes_are_argument_errors(text):
    with pytest.raises(argparse.ArgumentTypeError):
        size_list(text)


def test_default_sizes_stop_at_the_nics_largest_message(capsys):
    doc = run_json(capsys, ["pingpong", "--nic", "tb2", "--iters", "5"])
    sizes = [r["size"] for r in doc["results"]]
    assert sizes == [1, 2, 4, 8, 16, 32, 64, 128, 216]      # DP carries at most 216 bytes a TB2 packet


def test_a_size_above_the_limit_is_one_line_naming_it(capsys):
    rc, _, err = run(capsys, ["pingpong", "--nic", "tb2", "--sizes", "256", "--iters", "5"])
    assert rc == 1 and "216" in err and len(err.strip().splitlines()) == 1


# --------------------------------------------------------------------------- tables and documents


def test_tables_are_osu_like_and_documents_carry_a_schema_version(capsys):
    rc, out, _ = run(capsys, ["pingpong", "--sizes", "1:8", "--iters", "20"])
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].startswith("# DP pingpong") and lines[1].split()[:3] == ["#", "Size", "Latency"]
    assert [int(d[0]) for d in data_lines(out)] == [1, 2, 4, 8]
    assert any("paper (DP-B01)" in ln for ln in lines)            # the published figure beside it
    doc = run_json(capsys, ["pingpong", "--sizes", "1", "--iters", "20"])
    assert doc["schema_version"] == _report.SCHEMA_VERSION


def test_full_adds_min_max_stddev(capsys):
    doc = run_json(capsys, ["pingpong", "--sizes", "1,1500", "--iters", "30", "--full"])
    for r in doc["results"]:
        assert r["min_us"] <= r["one_way_us"] <= r["max_us"] and r["stddev_us"] >= 0
    rc, out, _ = run(capsys, ["bandwidth", "--sizes", "1500", "--iters", "3", "--full"])
    assert "Min (MB/s)" in out and "Stddev (MB/s)" in out
    rc, out, _ = run(capsys, ["pingpong", "--sizes", "1", "--iters", "5"])
    assert "Min (us)" not in out


def test_a_table_is_data(capsys):
    t = _report.Table("T", [_report.Column("a", "A"), _report.Column("b", "B", ".1f"),
                            _report.Column("c", "C", full=True)], rows=[{"a": 1, "b": 2.25}, {"a": 10}])
    t.render()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "# T" and out[1].split() == ["#", "A", "B"]
    assert out[2].split() == ["1", "2.2"] and out[3].split() == ["10", "-"]


# --------------------------------------------------------------------------- window bandwidth


def test_window_bandwidth_counts_what_it_sends(capsys):
    doc = run_json(capsys, ["bandwidth", "--sizes", "64,1500", "--iters", "3", "--window", "32"])
    assert doc["window"] == 32 and doc["mode"] == "window"
    for r in doc["results"]:
        assert r["messages"] == 3 * 32 and r["delivered"] + r["dropped"] == r["messages"]
        assert r["windows"] == 3 and r["unacked_windows"] == 0
    # osu_bw figure: delivered payload over the time, MB = 10^6 bytes, near DP-B02 at 1500 bytes
    assert doc["results"][1]["mbytes_per_s"] == pytest.approx(12.2, rel=0.05)


def test_a_window_larger_than_the_pool_drops_and_the_pool_is_named(capsys):
    # 1-byte messages arrive faster than the reader takes them: the 64-slot TBP overflows.
    doc = run_json(capsys, ["bandwidth", "--sizes", "64", "--iters", "1", "--window", "400"])
    r = doc["results"][0]
    assert r["dropped"] > 0 and r["dropped_tbp_full"] >= r["dropped"]
    assert r["dropped_other"] == 0


def test_losses_on_the_medium_are_counted_not_waited_for(capsys):
    doc = run_json(capsys, ["bandwidth", "--sizes", "1500", "--iters", "4", "--param", "fault.loss=0.3",
                            "--stats"])
    r = doc["results"][0]
    assert 0 < r["dropped"] < r["messages"] and r["dropped_medium"] > 0
    assert doc["stats"]["engine"]["now_s"] < 10                   # modeled seconds: no retry loop


def test_bibw_sends_both_ways(capsys):
    one = run_json(capsys, ["bandwidth", "--sizes", "1500", "--iters", "3"])["results"][0]
    both = run_json(capsys, ["bibw", "--sizes", "1500", "--iters", "3"])["results"][0]
    assert both["messages"] == 2 * one["messages"]
    assert 1.5 * one["mbytes_per_s"] < both["mbytes_per_s"] <= 2.05 * one["mbytes_per_s"]


def test_bandwidth_mode_pingpong_is_size_over_half_a_round_trip(capsys):
    doc = run_json(capsys, ["bandwidth", "--mode", "pingpong", "--sizes", "1500", "--iters", "20"])
    r = doc["results"][0]
    assert doc["mode"] == "pingpong"
    assert r["mbytes_per_s"] == pytest.approx(1500 / r["one_way_us"])


# --------------------------------------------------------------------------- lossy ping-pong


def test_a_lost_ping_is_a_lost_sample(capsys):
    doc = run_json(capsys, ["pingpong", "--sizes", "1", "--iters", "20", "--param", "fault.loss=0.5", "--stats"])
    r = doc["results"][0]
    assert r["samples"] + r["lost"] == 20 and r["lost"] > 0
    assert doc["stats"]["engine"]["now_s"] < 30                   # lost pings wait at most 1 s each


@pytest.mark.parametrize("param", ["fault.loss=1", "fault.corrupt=1"])
def test_an_unreachable_peer_ends_the_handshake_with_one_line(capsys, param):
    rc, out, err = run(capsys, ["pingpong", "--sizes", "1", "--iters", "3", "--param", param])
    assert rc == 1 and out == ""
    assert len(err.strip().splitlines()) == 1 and "100 hellos" in err


# --------------------------------------------------------------------------- refused options


@pytest.mark.parametrize("argv, words", [
    (["pingpong", "--transport", "udp"], "--real"),
    (["bandwidth", "--mode", "pingpong", "--window", "8"], "--window"),
    (["pingpong", "--nic", "tb2", "--raw", "--full"], "--full"),
    (["bandwidth", "--nic", "myrinet", "--pipeline", "adaptive", "--mode", "window"], "--mode"),
    (["pingpong", "--raw"], "tb2"),
    (["pingpong", "--jobs", "2"], "--sweep"),
    (["bibw", "--full"], "--full"),
])
def test_options_that_do_not_apply_are_refused(capsys, argv, words):
    rc, out, err = run(capsys, argv + ["--sizes", "1", "--iters", "2"])
    assert rc == 1 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1


def test_a_profile_value_that_breaks_the_model_is_refused_by_name(capsys):
    rc, _, err = run(capsys, ["pingpong", "--param", "dp.max_message=0"])
    assert rc == 1 and "dp.max_message" in err


# --------------------------------------------------------------------------- progress


def test_progress_only_on_a_terminal(monkeypatch, capsys):
    args = argparse.Namespace(json=False, quiet=False)
    with _report.progress(args, 3, "x") as bar:          # stderr is captured: not a terminal
        assert isinstance(bar, _report._NoProgress)
    monkeypatch.setattr(_report, "_isatty", lambda f: True)
    monkeypatch.setattr(_report, "PROGRESS_DELAY_S", 0.0)
    for quiet in (argparse.Namespace(json=True, quiet=False), argparse.Namespace(json=False, quiet=True)):
        with _report.progress(quiet, 3, "x") as bar:
            assert isinstance(bar, _report._NoProgress)
    with _report.progress(args, 3, "sizes") as bar:
        assert isinstance(bar, _report._Bar)
        for n in (1, 2, 4):
            bar.advance(f"{n} B")


# --------------------------------------------------------------------------- modules


def test_lsmod_names_dp_as_the_user_of_the_nic_driver():
    from libdp import Cluster
    mods = Cluster(nodes=2).node(0).modules
    rows = {m["name"]: m for m in mods.lsmod()}
    assert rows["dec21140"]["used_by"] == ["dp"] and rows["dec21140"]["use_count"] == 1
    with pytest.raises(OSError, match="in use by dp"):
        mods.rmmod("dec21140")
    mods.rmmod("dp")
    assert {m["name"]: m for m in mods.lsmod()}["dec21140"]["used_by"] == []
    mods.rmmod("dec21140")
    assert mods.lsmod() == []


def _traced_dp():
    """A DP whose dp_write and dp_read are overridden (so awaited the Python way), counting
    its calls in ``calls``."""
    from libdp import DP

    class Traced(DP):
        calls = 0

        def dp_write(self, fd, data):
            Traced.calls += 1
            return super().dp_write(fd, data)

        def dp_read(self, fd, nbytes=65536):
            Traced.calls += 1
            return super().dp_read(fd, nbytes)

    return Traced


def test_the_compiled_ping_pong_loops_are_the_python_ones():
    """`pingpong`'s loops on a lossless medium are compiled (libdp._calls.pingpong_rounds,
    echo_rounds) and make the calls by C for a plain DP; a DP whose calls are overridden is
    awaited as Python would. Both give the same rows, to the last bit."""
    from libdp import Cluster, pingpong
    Traced = _traced_dp()

    def run(traced):
        async def program(dp, rank, size):
            if traced:
                dp.__class__ = Traced
            return await pingpong(dp, rank, size, [1, 200], 25, 3, full=True)

        return Cluster(nodes=2).run_spmd(program)[0]

    plain = run(False)
    assert Traced.calls == 0
    assert run(True) == plain
    assert Traced.calls >= 4 * 2 * 28                # every measured call went through Python
    assert set(plain[0]) >= {"size", "rtt_us", "one_way_us", "min_us", "max_us", "stddev_us"}


def test_the_compiled_ping_pong_loops_give_trio_its_passes():
    """Beside a task of the rank's own that wakes on trio timers, the compiled loops' calls
    (run by C, `kernelsim._trio.call_now`) must often park or give trio a pass, and are then
    awaited: the rows are still the Python way's, to the last bit."""
    import trio

    from libdp import Cluster, pingpong
    Traced = _traced_dp()

    def run(traced):
        async def program(dp, rank, size):
            if traced:
                dp.__class__ = Traced

            async def ticker():
                for _ in range(300):
                    await trio.sleep(7e-6)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticker)
                rows = await pingpong(dp, rank, size, [1, 200], 25, 3, full=True)
            return rows

        return Cluster(nodes=2).run_spmd(program)[0]

    plain = run(False)
    assert Traced.calls == 0
    assert run(True) == plain
    assert Traced.calls >= 4 * 2 * 28


def _run_am_program(am_class, program, *args):
    """Rank 0's result of `program` on two modeled TB2 nodes with `am` loaded, each rank's
    AM object made an `am_class` (None: the plain AM)."""
    from libdp import Cluster
    from libdp import _am_bench
    from libdp.am import AM
    opened = AM.open

    async def open_as(dp):
        am = await opened(dp)
        am.__class__ = am_class
        return am

    if am_class is not None:
        _am_bench.AM = type("_AM", (), {"open": staticmethod(open_as)})
    try:
        return Cluster(nodes=2, nic="tb2", load=[("am", {})]).run_spmd(program, *args)[0]
    finally:
        _am_bench.AM = AM


def test_the_compiled_am_ping_pong_loops_are_the_python_ones():
    """`am_pingpong_program`'s loops are compiled (libdp._am_call.request_rounds,
    serve_rounds) and call the endpoint by C for a plain AM; an AM whose calls are
    overridden is awaited through them. Both give the same rows, to the last bit."""
    from libdp import _am_bench
    from libdp.am import AM

    class Traced(AM):
        calls = 0

        def am_request(self, dest, handler, *args):
            Traced.calls += 1
            return super().am_request(dest, handler, *args)

        def poll_until(self, pred):
            Traced.calls += 1
            return super().poll_until(pred)

    def run(traced):
        return _run_am_program(Traced if traced else None, _am_bench.am_pingpong_program, (1, 3), 20, 2)

    plain = run(False)
    assert Traced.calls == 0
    assert run(True) == plain
    assert Traced.calls >= 2 * 2 * 22                 # every round trip's calls went through Python
    assert [r["words"] for r in plain] == [1, 3]


def test_the_compiled_am_store_loop_starts_a_plain_am_s_stores_by_c():
    """`store_rounds` starts a plain AM's async stores by C (`_store_start`, no coroutine
    per transfer); an AM whose `am_store_async` is overridden is awaited the Python way.
    Both give the same rows, to the last bit."""
    from libdp import _am_bench
    from libdp.am import AM

    class Traced(AM):
        calls = 0

        async def am_store_async(self, *args):
            Traced.calls += 1
            return await super().am_store_async(*args)

    def run(traced):
        return _run_am_program(Traced if traced else None, _am_bench.am_bandwidth_program, "store", "async",
                               (16, 4096), 64 * 1024)

    plain = run(False)
    assert Traced.calls == 0
    assert run(True) == plain
    assert Traced.calls == 64 * 1024 // 16 + 64 * 1024 // 4096
    assert [r["size"] for r in plain] == [16, 4096]

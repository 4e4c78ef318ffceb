"""Nothing hangs and nothing escapes as a traceback (issue 11, the command's side).

Every benchmark command of the ``dp`` parser -- found from the parser, so commands a
family adds later are covered too -- ends under loss and corruption from 0 to 100%, in
bounded modeled time, with results or one line on stderr. Every subcommand, given bad
input, ends with status 1 or 2 and one line on stderr.
"""
from __future__ import annotations

import argparse
import json
import signal
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from libdp._cli import build_parser, main

WALL_LIMIT_S = 60            # a run still going by then has hung: the test fails
MODELED_LIMIT_S = 120        # modeled seconds a tiny run may take, retries and timeouts included


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError("the dp parser has no subcommands")


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {s for a in p._actions for s in a.option_strings}


SUBCOMMANDS = _subcommands()
# A benchmark: a command that runs a modeled measurement over sizes with profile parameters.
BENCHMARKS = sorted(n for n, p in SUBCOMMANDS.items() if {"--sizes", "--iters", "--param"} <= _options(p))


def test_the_benchmarks_are_found_from_the_parser():
    assert {"pingpong", "bandwidth", "bibw", "am-pingpong", "am-bandwidth"} <= set(BENCHMARKS)


@contextmanager
def wall_limit(seconds):
    def hung(*_):
        raise TimeoutError(f"still running after {seconds} s of wall time")
    old = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _one_line_error(err: str) -> bool:
    return len(err.strip().splitlines()) == 1 and err.startswith("dp") and "Traceback" not in err


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.sampled_from(BENCHMARKS), loss=st.floats(0, 1), corrupt=st.floats(0, 1))
@example(command="pingpong", loss=1.0, corrupt=0.0)
@example(command="pingpong", loss=0.0, corrupt=1.0)
@example(command="pingpong", loss=0.8, corrupt=0.0)
@example(command="bandwidth", loss=1.0, corrupt=0.0)
@example(command="bandwidth", loss=0.7, corrupt=0.2)
@example(command="bibw", loss=0.5, corrupt=0.5)
def test_every_benchmark_ends_under_any_loss_and_corruption(capsys, command, loss, corrupt):
    argv = [command, "--sizes", "1", "--iters", "2", "--param", f"fault.loss={loss}",
            "--param", f"fault.corrupt={corrupt}", "--json", "--stats"]
    with wall_limit(WALL_LIMIT_S):
        rc = main(argv)
    out, err = capsys.readouterr()
    if rc == 0:
        doc = json.loads(out)
        assert doc["results"]
        assert doc["stats"]["engine"]["now_s"] < MODELED_LIMIT_S
    else:
        assert rc == 1 and out == "" and _one_line_error(err), (argv, err)


def test_the_tb2_pingpong_of_the_issue_ends(capsys):
    with wall_limit(WALL_LIMIT_S):
        rc = main(["pingpong", "--nic", "tb2", "--iters", "3", "--sizes", "1", "--param", "fault.loss=1"])
    assert rc == 1 and _one_line_error(capsys.readouterr().err)


# --------------------------------------------------------------------------- bad input

# Bad values for options, used wherever a subcommand has the option.
BAD_OPTION_VALUES = [
    ("--sizes", "a,b"), ("--sizes", "-1"), ("--sizes", "64:1"), ("--iters", "0"), ("--iters", "many"),
    ("--warmup", "-1"), ("--window", "0"), ("--param", "noequals"), ("--param", "no.such.key=1"),
    ("--param", "cpu.hz=-1"), ("--param", "dp.max_message=0"), ("--param", "fault.loss=2"),
    ("--platform", "no-such-platform"), ("--nic", "no-such-nic"), ("--load", "no_such_module"),
    ("--load", "dp:no_such_param=1"), ("--seed", "x"), ("--plot", "figure.gif"), ("--sweep", "nokeyvalues"),
    ("--jobs", "0"), ("--mode", "sideways"), ("--transport", "carrier-pigeon"), ("--op", "fetch"),
    ("--total", "0"), ("--only", "XX-B99"), ("--pipeline", "sometimes"),
]
BAD_POSITIONALS = {"profile": [["no-such-platform"]], "modinfo": [["no_such_module"], []],
                   "insmod": [["no_such_module"], ["dp", "noequals"], ["dp", "no_such_param=1"], []],
                   "rmmod": [["no_such_module"], ["dec21140"], []],
                   "plot": [["/no/such/result.json", "-o", "x.png"], ["-o", "x.png"]]}


def _bad_inputs():
    for name, p in sorted(SUBCOMMANDS.items()):
        opts = _options(p)
        yield pytest.param(name, ["--no-such-option"], id=f"{name}-unknown-option")
        for opt, value in BAD_OPTION_VALUES:
            if opt in opts:
                yield pytest.param(name, [opt, value], id=f"{name}{opt}={value}")
        for args in BAD_POSITIONALS.get(name, []):
            yield pytest.param(name, args, id=f"{name}-{'-'.join(args) or 'nothing'}")


def _runnable(name, bad):
    """Keep a benchmark's run short when the bad input is not caught before it starts."""
    p = SUBCOMMANDS[name]
    extra = []
    if "--sizes" in _options(p) and "--sizes" not in bad:
        extra += ["--sizes", "1"]
    if "--iters" in _options(p) and "--iters" not in bad:
        extra += ["--iters", "2"]
    if name == "plot" and "-o" not in bad:
        extra += ["-o", "x.png"]
    return [name, *bad, *extra]


@pytest.mark.parametrize("name, bad", list(_bad_inputs()))
def test_every_subcommand_answers_bad_input_with_one_line(capsys, tmp_path, monkeypatch, name, bad):
    monkeypatch.chdir(tmp_path)
    argv = _runnable(name, bad)
    with wall_limit(WALL_LIMIT_S):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
    out, err = capsys.readouterr()
    assert rc in (1, 2), (argv, rc, out[:200])
    assert _one_line_error(err), (argv, err)

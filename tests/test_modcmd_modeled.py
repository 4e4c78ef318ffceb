"""``dp lsmod``, ``dp insmod``, ``dp rmmod`` without ``--node``: a modeled node's module table.

The node is booted as a benchmark's nodes are (NIC driver, dp, ``--load``), so the
answers (use counts, parameter checks, EBUSY, ENODEV) are the kernel's own."""
import json

import pytest

from cli_run import run


def table(capsys, argv) -> dict:
    rc, out, err = run(capsys, [*argv, "--json"])
    assert rc == 0, err
    (mods,) = json.loads(out).values()
    return {m["name"]: m for m in mods}


def test_lsmod_shows_the_boot_modules_of_the_platform(capsys):
    mods = table(capsys, ["lsmod"])
    assert set(mods) == {"dec21140", "dp"}
    assert mods["dec21140"]["used_by"] == ["dp"]          # dp holds its driver, nothing else does
    mods = table(capsys, ["lsmod", "--platform", "p3_1000_lanai9", "--load", "lci:variant=I-hrx"])
    assert {"myrinet", "lci"} <= set(mods) and "dp" not in set(mods)     # lci displaces DP on the NI
    assert mods["lci"]["params"]["variant"] == "I-hrx"


def test_insmod_loads_with_its_parameters_and_prints_the_table(capsys):
    rc, out, _ = run(capsys, ["insmod", "am", "--nic", "tb2"])
    assert rc == 0
    assert "# a modeled node" in out and any(ln.startswith("am ") for ln in out.splitlines())
    mods = table(capsys, ["insmod", "fm", "notify=pci", "--platform", "hpvm19"])
    assert mods["fm"]["params"]["notify"] == "pci"


@pytest.mark.parametrize("argv, says", [
    (["insmod", "am", "no_such_param=1", "--nic", "tb2"], "no_such_param"),
    (["insmod", "lci"], "myrinet"),                               # LCI needs a Myrinet NIC
    (["insmod", "no_such_module"], "no_such_module"),
    (["insmod", "am", "noequals", "--nic", "tb2"], "KEY=VALUE"),
    (["rmmod", "am", "--nic", "tb2"], "am"),                        # not loaded
    (["rmmod", "dec21140"], "dp"),                                 # in use by dp: EBUSY
    (["lsmod", "--cluster", "/nonexistent.toml"], "--node"),
    (["lsmod", "--node", "0", "--platform", "p133"], "modeled node"),
])
def test_refusals_are_one_line_errors(capsys, argv, says):
    rc, out, err = run(capsys, argv)
    assert rc == 1 and out == ""
    assert err.startswith("dp: ") and err.count("\n") == 1 and says in err, err


def test_rmmod_unloads_what_was_loaded(capsys):
    mods = table(capsys, ["rmmod", "am", "--nic", "tb2", "--load", "am"])
    assert "am" not in mods and "tb2" in mods

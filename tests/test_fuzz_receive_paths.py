"""`dp fuzz`: hostile frames into each NIC's receive path. Short runs here; the 1,000,000-frame
runs per NIC are `dp fuzz` itself (reported in the issue notes)."""
from __future__ import annotations

import json

import pytest

from libdp._cli import main
from libdp._fuzz import NIC_FRAMERS, fuzz_nic


@pytest.mark.parametrize("nic", sorted(NIC_FRAMERS))
def test_hostile_frames_crash_nothing_are_counted_and_dp_still_delivers(nic):
    r = fuzz_nic(nic, 1500, seed=11)
    assert r["crashes"] == 0, r["first_crash"]
    assert r["still_delivers"]
    assert r["counters"], "frames went somewhere, and some layer counted them"
    assert any(k for k in r["counters"] if "drop" in k or "error" in k or "bad" in k
               or "malformed" in k or "crc" in k or "hec" in k or "runt" in k or "unknown" in k)


def test_same_seed_same_counters():
    a, b = fuzz_nic("dec21140", 400, seed=3), fuzz_nic("dec21140", 400, seed=3)
    assert a["counters"] == b["counters"] and a["messages_read"] == b["messages_read"]


def test_the_command_reports_json(capsys):
    assert main(["fuzz", "--nic", "tb2", "--frames", "300", "--json", "--quiet"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (row,) = doc["results"]
    assert row["nic"] == "tb2" and row["frames"] == 300 and row["crashes"] == 0


def test_an_unknown_nic_is_one_line(capsys):
    assert main(["fuzz", "--nic", "ne2000", "--frames", "10"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ne2000" in err[0]

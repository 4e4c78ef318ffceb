"""LCI on real nodes: node processes on a real transport, attached scripts that drive
the NI themselves (LCI-A54), ``rmmod lci`` refused while a script has it open."""
from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import time

import pytest

from libdp._attach import attach
from libdp._cli import main
from libdp._realnode import cluster_down, cluster_up
from libdp.lci import LCI

TIMEOUT = 60.0
EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "examples", "lci_exchange.py")


@pytest.fixture
def myri(tmp_path, monkeypatch):
    """Two Myrinet nodes over shared memory with lci (I-nirx) loaded; down at the end."""
    monkeypatch.setenv("DP_RUN_BASE", str(tmp_path))
    c = cluster_up(2, name=f"lci{os.getpid()}", nic="myrinet", tied=True)
    try:
        assert main(["insmod", "lci", "variant=I-nirx", "--node", "all", "--cluster", c.path]) == 0
        yield c
    finally:
        cluster_down(c)
    assert not os.path.exists(c.run_dir)


def test_attached_scripts_exchange_lci_packets_in_order(myri, capsys):
    out = subprocess.run([sys.executable, "-m", "libdp._cli", "run", "-n", "2", "--cluster", myri.path, EXAMPLE, "40"],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert out.returncode == 0, out.stderr
    reports = dict(re.findall(r"node (\d): (40 packets from 1 peers, [a-zA-Z ]+),", out.stdout))
    assert reports == {"0": "40 packets from 1 peers, all in order", "1": "40 packets from 1 peers, all in order"}, \
        (out.stdout, out.stderr)
    assert main(["rmmod", "lci", "--node", "all", "--cluster", myri.path]) == 0     # nobody holds it now
    capsys.readouterr()


def test_rmmod_lci_is_ebusy_while_a_script_has_it_and_a_second_open_too(myri, capsys):
    a = attach(node=0, run_dir=myri.run_dir)
    try:
        lci = LCI.open_sync(a)
        assert lci.variant == "I-nirx"
        with pytest.raises(OSError) as e:
            a.rmmod("lci")
        assert e.value.errno == errno.EBUSY
        assert main(["rmmod", "lci", "--node", "0", "--cluster", myri.path]) == 1
        assert "in use" in capsys.readouterr().err
        b = attach(node=0, run_dir=myri.run_dir)
        try:
            with pytest.raises(OSError) as e:
                LCI.open_sync(b)                      # one LCI process per node (LCI-A54)
            assert e.value.errno == errno.EBUSY
        finally:
            b.detach()
        lci.sync.close()
    finally:
        a.detach()                                    # the node takes its board back
    end = time.monotonic() + 10
    while main(["rmmod", "lci", "--node", "0", "--cluster", myri.path]) != 0:
        assert time.monotonic() < end, capsys.readouterr().err
        time.sleep(0.05)

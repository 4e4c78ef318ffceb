"""The `dp` command run in the test's process (`libdp._cli.main`), its output captured."""
from __future__ import annotations

import json

from libdp._cli import main


def run(capsys, argv):
    """(exit status, stdout, stderr) of ``dp ARGV``."""
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, argv):
    """The document ``dp ARGV --json`` prints; the run must succeed."""
    rc, out, err = run(capsys, argv + ["--json"])
    assert rc == 0, err
    return json.loads(out)

"""Golden outputs: every modeled benchmark reproduces what was recorded before a refactor.

The cases and the recorder are in ``tests/golden``. Integers and strings must match
exactly; floats to a relative 1e-9. That tolerance is far below any change of the
model (one cycle of a P-133 in a 47 us round trip is 1.6e-4 relative) and only admits
the last bits that summing the same costs in another order changes: a path that
yields a + b as one segment lands on now + (a + b), not (now + a) + b.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.golden.cases import CASES, pinned, run_case

GOLDEN = Path(__file__).parent / "golden"
REL_TOL = 1e-9


def _diff(path: str, want, got, out: list) -> None:
    if isinstance(want, dict) and isinstance(got, dict):
        for k in sorted(set(want) | set(got)):
            if k not in want or k not in got:
                out.append(f"{path}.{k}: {'missing' if k not in got else 'unexpected'}")
            else:
                _diff(f"{path}.{k}", want[k], got[k], out)
    elif isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            out.append(f"{path}: {len(got)} items, recorded {len(want)}")
        for i, (w, g) in enumerate(zip(want, got)):
            _diff(f"{path}[{i}]", w, g, out)
    elif isinstance(want, float) or isinstance(got, float):
        if not (isinstance(got, (int, float)) and math.isclose(want, got, rel_tol=REL_TOL, abs_tol=1e-12)):
            out.append(f"{path}: {got!r}, recorded {want!r}")
    elif want != got:
        out.append(f"{path}: {got!r}, recorded {want!r}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    want = json.loads((GOLDEN / f"{name}.json").read_text())
    got = json.loads(json.dumps(pinned(run_case(CASES[name])), sort_keys=True))
    problems: list = []
    _diff(name, want, got, problems)
    assert not problems, f"dp {' '.join(CASES[name])} no longer reproduces its golden output:\n  " + \
        "\n  ".join(problems[:20])


def test_diff_finds_a_changed_figure():
    """The comparison itself: a change beyond the tolerance, or of an int, is caught."""
    out: list = []
    _diff("x", {"a": 1.0, "b": [1, 2], "c": "s"}, {"a": 1.0 + 1e-6, "b": [1, 3], "c": "s"}, out)
    assert len(out) == 2
    out.clear()
    _diff("x", {"a": 47.05}, {"a": 47.05 * (1 + 1e-12)}, out)
    assert out == []

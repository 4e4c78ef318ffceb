"""Record the golden outputs: ``python -m tests.golden.record [NAME ...]`` (all by default)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.golden.cases import CASES, pinned, run_case

HERE = Path(__file__).parent


def main(names: list[str]) -> int:
    for name in names or list(CASES):
        t0 = time.perf_counter()
        doc = pinned(run_case(CASES[name]))
        (HERE / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"{name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

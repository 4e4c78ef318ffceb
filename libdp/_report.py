"""What every `dp` command prints: one JSON document, or a table and optional statistics.

A command builds its document (stable keys, units in the key names) and a function
that prints its table; `emit` does the rest, the same way for every command family.
"""
from __future__ import annotations

import json
import sys

__all__ = ["emit", "print_tree", "overrides_note"]


def emit(args, doc: dict, stats, print_table) -> int:
    """Print `doc` as JSON (``--json``) or through `print_table`; add `stats` with ``--stats``."""
    if getattr(args, "stats", False):
        doc["stats"] = stats() if callable(stats) else stats
    if getattr(args, "json", False):
        json.dump(doc, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
        return 0
    print_table()
    if getattr(args, "stats", False):
        print("# statistics")
        print_tree(doc["stats"], "#   ")
    return 0


def print_tree(d: dict, indent: str) -> None:
    for k, v in d.items():
        if isinstance(v, dict):
            print(f"{indent}{k}:")
            print_tree(v, indent + "  ")
        else:
            print(f"{indent}{k}: {v}")


def overrides_note(overrides: dict, prefix: str = "") -> str:
    """``; key=value, ...`` for a table's title line, or nothing."""
    over = [f"{prefix}{k}={v}" for k, v in overrides.items()]
    return ("; " + ", ".join(over)) if over else ""

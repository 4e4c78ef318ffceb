"""Argument types shared by the `dp` command's subcommands."""
from __future__ import annotations

import argparse

__all__ = ["int_list", "positive_int"]


def int_list(text: str, what: str = "values", lo: int = 0, hi: int | None = None) -> list[int]:
    """``1,64,1500`` -> [1, 64, 1500], each within lo..hi."""
    try:
        vals = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} are comma-separated whole numbers, not {text!r}") from None
    if not vals or any(v < lo or (hi is not None and v > hi) for v in vals):
        span = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
        raise argparse.ArgumentTypeError(f"{what} must be {span}")
    return vals


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return v

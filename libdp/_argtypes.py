"""Argument types shared by the `dp` command's subcommands."""
from __future__ import annotations

import argparse
import os

__all__ = ["int_list", "non_negative_int", "plot_file", "positive_int", "size_list"]


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


def size_list(text: str, what: str = "sizes", lo: int = 0, hi: int | None = None) -> list[int]:
    """OSU-style sizes: ``1,64,1500``, a doubling range ``1:4096`` (1, 2, 4, ..., 4096), or both
    (``1:64,1500``). A range ends at its upper bound even when that is no power of two
    (``1:1500`` ends 512, 1024, 1500). Each size within lo..hi; the order given is kept."""
    out: list[int] = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        first, sep, last = item.partition(":")
        try:
            a = int(first)
            b = int(last) if sep else a
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} are whole numbers or ranges A:B, not {item!r}") from None
        if b < a:
            raise argparse.ArgumentTypeError(f"{what}: the range {item!r} runs backwards")
        if a < lo or (hi is not None and b > hi):
            span = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
            raise argparse.ArgumentTypeError(f"{what} must be {span}")
        n = a
        while n <= b:
            out.append(n)
            n = 1 if n <= 0 else n * 2
        if sep and out[-1] != b:
            out.append(b)
    if not out or any(v < lo or (hi is not None and v > hi) for v in out):
        span = f"{lo}..{hi}" if hi is not None else f"at least {lo}"
        raise argparse.ArgumentTypeError(f"{what} must be {span}" if out else f"no {what} given")
    return out


def non_negative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if v < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return v


def plot_file(text: str) -> str:
    """A file ``--plot``/``-o`` can draw, refused by its name before any run starts (a
    benchmark that ran for seconds must not end in a refusal of its output's name)."""
    from libdp._plot import FORMATS
    if os.path.splitext(text)[1].lower() not in FORMATS:
        raise argparse.ArgumentTypeError(f"draws {', '.join(FORMATS)} files, not {text!r}")
    return text

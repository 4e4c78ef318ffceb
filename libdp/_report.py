"""What every `dp` command prints: one JSON document, or an OSU-like table, optional
statistics, an optional plot -- the same way for every command family.

A command builds two things and hands them to `emit`:

- its **document**: a dict with stable keys and units in the key names (``rtt_us``,
  ``mbytes_per_s`` with MB = 10^6 bytes), its rows under ``"results"``. `emit` stamps
  it with ``schema_version`` (`SCHEMA_VERSION`) before printing it with ``--json``.
- its **table**: a declarative `Table` -- a title, the columns (which row key, what
  header, what format), notes -- drawn with rich as an OSU-style table on stdout::

      # DP pingpong: p133 + dec21140, modeled time, 1000 per size
      # Size      Latency (us)    RTT (us)
      1                  23.53       47.05

  A family that still passes a function that prints its own table works too; it loses
  what a `Table` brings (``--full`` columns, sweeps' merged table).

Around the run, `progress` gives the bar on stderr (rich; off when stderr is not a
terminal, with ``--json`` or ``--quiet``), and ``--plot FILE`` draws the document
through `libdp._plot` with the published figures of `libdp.targets` beside it.
`capture` lets a caller (sweeps, ``dp reproduce``) take the document and table of a
command instead of printing them.
"""
from __future__ import annotations

import contextlib
import json
import sys
import threading
from dataclasses import dataclass, field
from typing import Callable, Sequence

__all__ = ["SCHEMA_VERSION", "Column", "Table", "emit", "progress", "capture", "print_tree", "overrides_note"]

# The version of the JSON documents' layout: bumped when a key changes meaning or goes
# away (adding keys is compatible). Version 2: schema_version itself, OSU-style window
# bandwidth rows (sent / delivered / dropped and where), lost samples in ping-pong rows.
SCHEMA_VERSION = 2

# Where `capture` collects (doc, table) pairs instead of printing; per thread, so that a
# Dask worker running several points in threads keeps them apart.
_captured = threading.local()


@dataclass(frozen=True)
class Column:
    """One column: the row key it shows, its header, a format spec (``".2f"``).

    ``full``: shown only with ``--full`` (min/max/stddev columns). A row without the
    key shows ``-``.
    """
    key: str
    header: str
    fmt: str = ""
    full: bool = False

    def cell(self, row: dict) -> str:
        v = row.get(self.key)
        if v is None:
            return "-"
        if callable(self.fmt):
            return self.fmt(v, row)
        return format(v, self.fmt) if self.fmt else str(v)


@dataclass
class Table:
    """A table as data: what `emit` draws, what a sweep merges, what a test reads.

    ``title``: the first line (``# `` is added); ``columns``: `Column` s, the first one
    left-aligned (the size), the others right-aligned; ``rows``: dicts (default: the
    document's ``results``); ``notes``: lines printed after the table (``# `` added).
    """
    title: str
    columns: Sequence[Column]
    rows: list | None = None
    notes: list[str] = field(default_factory=list)
    header_notes: list[str] = field(default_factory=list)

    def visible(self, full: bool) -> list[Column]:
        return [c for c in self.columns if full or not c.full]

    def render(self, file=None, full: bool = False) -> None:
        """Draw the table with rich, OSU-like: ``# `` lines, aligned columns, no box."""
        from rich.console import Console
        from rich.table import Table as RichTable

        file = file or sys.stdout
        cols = self.visible(full)
        console = Console(file=file, width=4096, highlight=False, color_system=None,
                          soft_wrap=False, emoji=False, markup=False)
        print(f"# {self.title}", file=file)
        for line in self.header_notes:
            print(f"# {line}", file=file)
        t = RichTable(box=None, show_edge=False, pad_edge=False, padding=(0, 0, 0, 2), show_header=True,
                      header_style=None)
        for i, c in enumerate(cols):
            header = ("# " + c.header) if i == 0 else c.header
            t.add_column(header, justify="left" if i == 0 else "right", no_wrap=True,
                         min_width=10 if i == 0 else None)
        for row in self.rows or []:
            t.add_row(*(c.cell(row) for c in cols))
        console.print(t)
        for line in self.notes:
            print(f"# {line}", file=file)


def emit(args, doc: dict, stats, table: "Table | Callable[[], None]") -> int:
    """Print `doc` as JSON (``--json``) or as `table`; add `stats` with ``--stats``; plot with ``--plot``.

    `table` is a `Table` (its rows default to ``doc["results"]``) or, for families not
    yet converted, a function printing the table itself. Returns the exit status (0).
    """
    if getattr(args, "stats", False):
        doc["stats"] = stats() if callable(stats) else stats
    doc.setdefault("schema_version", SCHEMA_VERSION)
    if isinstance(table, Table) and table.rows is None:
        table.rows = doc.get("results") or []
    sink = getattr(_captured, "sink", None)
    if sink is not None:
        sink.append((doc, table if isinstance(table, Table) else None))
        return 0
    if getattr(args, "plot", None):
        from libdp._plot import plot_docs
        plot_docs([doc], args.plot)
    if getattr(args, "json", False):
        json.dump(doc, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
        return 0
    if isinstance(table, Table):
        table.render(full=getattr(args, "full", False))
    else:
        table()
    if getattr(args, "stats", False):
        print("# statistics")
        print_tree(doc["stats"], "#   ")
    return 0


@contextlib.contextmanager
def capture():
    """Collect the (document, table) of every `emit` in this thread instead of printing.

    ``with capture() as got: main(argv)`` -- then ``got`` is a list of pairs.
    """
    previous = getattr(_captured, "sink", None)
    _captured.sink = got = []
    try:
        yield got
    finally:
        _captured.sink = previous


def capturing() -> bool:
    """Is a caller collecting documents (no progress bars, no plots wanted)?"""
    return getattr(_captured, "sink", None) is not None


# --------------------------------------------------------------------------- progress

PROGRESS_DELAY_S = 1.0      # runs shorter than this show no bar


class _NoProgress:
    def advance(self, label: str = "") -> None:
        pass


class _Bar:
    """A rich progress bar on stderr that appears only after PROGRESS_DELAY_S."""

    def __init__(self, total: int, description: str):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                  TextColumn("{task.fields[label]}"), TimeRemainingColumn(),
                                  console=Console(file=sys.stderr), transient=True)
        self._task = self._progress.add_task(description, total=total, label="")
        self._lock = threading.Lock()
        self._started = False
        self._timer = threading.Timer(PROGRESS_DELAY_S, self._start)
        self._timer.daemon = True
        self._timer.start()

    def _start(self) -> None:
        with self._lock:
            if not self._started:
                self._started = True
                self._progress.start()

    def advance(self, label: str = "") -> None:
        self._progress.update(self._task, advance=1, label=label)

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            if self._started:
                self._progress.stop()
            self._started = True


@contextlib.contextmanager
def progress(args, total: int, description: str):
    """A progress bar of `total` steps (one per size) on stderr, with ETA.

    Yields an object with ``advance(label)``. No bar (a no-op object) when stderr is
    not a terminal, with ``--json``, ``--quiet``, or while a caller captures output.
    """
    quiet = (getattr(args, "json", False) or getattr(args, "quiet", False) or capturing()
             or not _isatty(sys.stderr) or total <= 0)
    if quiet:
        yield _NoProgress()
        return
    bar = _Bar(total, description)
    try:
        yield bar
    finally:
        bar.close()


def _isatty(f) -> bool:
    try:
        return f.isatty()
    except (AttributeError, ValueError):
        return False


# --------------------------------------------------------------------------- helpers


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


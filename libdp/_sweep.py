"""Sweeps: one benchmark command run once per point of a parameter grid.

``dp bandwidth --sweep link.rate_bps=10e6,100e6 --sweep cpu.hz=133e6,266e6`` runs the
command at every combination (Cartesian product) with the point's values given as
``--param KEY=VALUE`` -- any profile parameter, or a module parameter where the family
takes ``--param MODULE.KEY`` (AM's ``am.*``). The points run in this process, on a local
process pool (``--jobs N``) or on an existing Dask cluster (``--scheduler ADDRESS``,
the ``cluster`` extra); each point is `libdp._cli.run_captured`, so every command
family sweeps without doing anything for it. The results merge into one JSON document
(``benchmark: "sweep"``, one entry per point), one table (the swept keys as leading
columns) and, with ``--plot``, one figure with a curve per point.
"""
from __future__ import annotations

import concurrent.futures
import errno
import itertools
import multiprocessing

from libdp._cli import run_captured
from libdp._report import Column, Table, emit, progress

__all__ = ["run_sweep", "parse_axis", "run_points"]


def parse_axis(text: str) -> tuple[str, list[str]]:
    """``KEY=V1,V2,...`` -> (KEY, [V1, V2, ...])."""
    key, sep, values = text.partition("=")
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not key.strip() or not vals:
        raise OSError(errno.EINVAL, f"--sweep takes KEY=V1,V2,..., not {text!r}")
    return key.strip(), vals


def run_points(argvs: list[list[str]], jobs: int = 1, scheduler: str | None = None, bar=None) -> list:
    """(document, table) of every command, in order: here, in `jobs` processes, or on Dask."""
    advance = bar.advance if bar is not None else (lambda label="": None)
    if scheduler:
        try:
            from distributed import Client
        except ImportError:
            raise OSError(errno.ENOENT, "--scheduler needs Dask: pip install 'dp[cluster]'") from None
        with Client(scheduler, set_as_default=False) as client:
            futures = client.map(run_captured, argvs, pure=False)
            for _ in concurrent.futures.as_completed([_as_cf(f) for f in futures]):
                advance()
            return client.gather(futures)
    if jobs > 1 and len(argvs) > 1:
        ctx = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(max_workers=min(jobs, len(argvs)), mp_context=ctx) as pool:
            futures = [pool.submit(run_captured, a) for a in argvs]
            for _ in concurrent.futures.as_completed(futures):
                advance()
            return [f.result() for f in futures]
    out = []
    for a in argvs:
        out.append(run_captured(a))
        advance()
    return out


def _as_cf(future):
    """A Dask future as a concurrent.futures one (for as_completed)."""
    cf = concurrent.futures.Future()
    future.add_done_callback(lambda f: cf.set_result(None))
    return cf


def run_sweep(args, argv: list[str]) -> int:
    axes = [parse_axis(s) for s in args.sweep]
    keys = [k for k, _ in axes]
    if len(set(keys)) != len(keys):
        raise OSError(errno.EINVAL, "each --sweep key may be given once (list its values instead)")
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(v for _, v in axes))]
    argvs = [list(argv) + [x for k, v in p.items() for x in ("--param", f"{k}={v}")] for p in points]
    with progress(args, len(argvs), f"sweep of {len(argvs)} points") as bar:
        got = run_points(argvs, args.jobs, args.scheduler, bar)
    docs = [d for d, _ in got]
    doc = {"benchmark": "sweep", "command": [a for a in argv], "sweep": dict(axes),
           "points": [{"params": p, "document": d} for p, d in zip(points, docs)]}
    if getattr(args, "plot", None):
        from libdp._plot import plot_docs
        plot_docs([doc], args.plot)
        args.plot = None
    return emit(args, doc, None, merged_table(argv, points, got))


def merged_table(argv, points, got) -> Table:
    """One table for every point: the swept values first, then the command's own columns."""
    first = next((t for _, t in got if t is not None), None)
    if first is not None:
        columns = list(first.columns)
    else:                                   # a family printing its own table: show the row keys
        keys = list(dict.fromkeys(k for d, _ in got for r in d.get("results", []) for k in r))
        columns = [Column(k, k) for k in keys]
    rows = []
    for p, (d, t) in zip(points, got):
        for r in (t.rows if t is not None else d.get("results", [])):
            rows.append({**r, **{f"sweep:{k}": v for k, v in p.items()}})
    lead = [Column(f"sweep:{k}", k) for k in points[0]] if points else []
    return Table(title=f"sweep: dp {' '.join(a for a in argv if a)} ({len(points)} points)",
                 columns=lead + columns, rows=rows, notes=list(first.notes) if first is not None else [])

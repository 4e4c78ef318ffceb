"""``dp reproduce`` and ``dp plot``: the model beside the papers, and figures of saved results.

    dp reproduce [--quick] [--only ID,...] [--markdown FILE] [--jobs N] [--json] [--quiet]
    dp plot RESULT.json... -o FILE.png|svg [--title TEXT]

``reproduce`` runs the command of every calibration target in `libdp.targets` (each
command family registers its own) and prints, per target, the model's figure, the
published one, the relative error and a pass mark (within ±5% unless the target says
otherwise). ``plot`` redraws documents saved with ``--json`` (also sweeps) on one figure.
"""
from __future__ import annotations

import errno
import json
import sys

from libdp._argtypes import plot_file, positive_int
from libdp._report import Column, Table, emit, progress
from libdp.targets import relative_error, targets

__all__ = ["add_commands", "reproduce"]


def add_commands(sub, common) -> None:
    p = sub.add_parser("reproduce", help="the model vs every published figure it is calibrated against",
                       description="Run every calibration target (docs/sources.md ids) and print model vs "
                                   "published, the relative error and a pass mark (±5%%).")
    p.add_argument("--quick", action="store_true",
                   help="shorter runs (fewer iterations): what the test suite runs; figures move a little")
    p.add_argument("--only", default=None, metavar="ID,...", help="only these targets (e.g. DP-B01,SP-B08)")
    p.add_argument("--markdown", default=None, metavar="FILE", help="also write the table as Markdown to FILE")
    p.add_argument("--jobs", type=positive_int, default=1, metavar="N", help="run the targets in N processes")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=_reproduce)
    p = sub.add_parser("plot", help="draw saved --json results on one figure",
                       description="Draw documents saved with --json (any benchmark, also sweeps) on one "
                                   "figure, with the published figures beside the model's curves.")
    p.add_argument("files", nargs="+", metavar="RESULT.json")
    p.add_argument("-o", "--output", required=True, metavar="FILE.png|svg", type=plot_file)
    p.add_argument("--title", default=None)
    p.add_argument("--label", action="append", default=None, metavar="TEXT",
                   help="a legend label per file, in order (default: benchmark, platform, NIC, overrides)")
    p.set_defaults(func=_plot)


def reproduce(quick: bool = False, only=None, jobs: int = 1, bar=None) -> list[dict]:
    """Rows of model vs published for every registered target (or those named in `only`)."""
    from libdp._sweep import run_points

    chosen = [t for t in targets() if not only or t.id in only]
    if only and len(chosen) != len(set(only)):
        known = {t.id for t in targets()}
        raise OSError(errno.ENOENT, f"no calibration target {', '.join(sorted(set(only) - known))} "
                                    f"(known: {', '.join(sorted(known))})")
    argvs = list(dict.fromkeys(tuple((t.quick_argv or t.argv) if quick else t.argv) for t in chosen))
    docs = dict(zip(argvs, (d for d, _ in run_points([list(a) for a in argvs], jobs, None, bar))))
    rows = []
    for t in chosen:
        value = t.model(docs[tuple((t.quick_argv or t.argv) if quick else t.argv)])
        rows.append({"id": t.id, "what": t.what, "model": value, "published": t.published,
                     "published_range": list(t.published_range) if t.published_range else None,
                     "unit": t.unit, "rel_error_pct": 100 * relative_error(value, t.published),
                     "tolerance_pct": 100 * t.tolerance,
                     "pass": t.passes(value) if t.checked else None,
                     "command": "dp " + " ".join((t.quick_argv or t.argv) if quick else t.argv)})
    return rows


def _reproduce(args) -> int:
    only = [s.strip() for s in args.only.split(",") if s.strip()] if args.only else None
    n = len(only) if only else len(targets())
    with progress(args, n, "reproduce") as bar:
        rows = reproduce(args.quick, only, args.jobs, bar)
    passed = sum(r["pass"] is True for r in rows)
    failed = sum(r["pass"] is False for r in rows)
    doc = {"benchmark": "reproduce", "quick": args.quick, "passed": passed, "failed": failed, "results": rows}
    display = [dict(r, mark={True: "pass", False: "FAIL", None: "ref"}[r["pass"]],
                    published_text=(f"{r['published_range'][0]:g}-{r['published_range'][1]:g}"
                                    if r["published_range"] else f"{r['published']:g}")) for r in rows]
    table = Table(title=f"dp reproduce: the model vs the published figures{' (quick runs)' if args.quick else ''}",
                  columns=[Column("id", "Id"), Column("model", "Model", ".4g"),
                           Column("published_text", "Published"), Column("unit", "Unit"),
                           Column("rel_error_pct", "Error (%)", "+.1f"), Column("mark", "Within 5%"),
                           Column("what", "What")],
                  rows=display,
                  notes=[f"{passed} pass, {failed} fail, {len(rows) - passed - failed} for reference only; "
                         "ids are explained in docs/sources.md; each row's command is in --json"])
    if args.markdown:
        _write_markdown(args.markdown, table)
    return emit(args, doc, None, table)


def _write_markdown(path: str, table: Table) -> None:
    cols = table.columns
    lines = [f"# {table.title}", "", "| " + " | ".join(c.header for c in cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(c.cell(r) for c in cols) + " |" for r in table.rows]
    lines += [""] + table.notes
    try:
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
    except OSError as exc:
        raise OSError(exc.errno, f"cannot write {path}: {exc.strerror}") from None


def _plot(args) -> int:
    from libdp._plot import plot_docs

    docs = []
    for name in args.files:
        try:
            with open(name) as f:
                docs.append(json.load(f))
        except OSError as exc:
            raise OSError(exc.errno, f"{name}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{name} is not a dp --json document ({exc.msg}, line {exc.lineno})") from None
        if not isinstance(docs[-1], dict) or "results" not in docs[-1] and "points" not in docs[-1]:
            raise ValueError(f"{name} is not a dp --json document (no results)")
    if args.label is not None and len(args.label) != len(args.files):
        raise OSError(errno.EINVAL, f"give one --label per file ({len(args.files)}), or none")
    plot_docs(docs, args.output, args.label, args.title)
    print(f"dp: wrote {args.output}", file=sys.stderr)
    return 0

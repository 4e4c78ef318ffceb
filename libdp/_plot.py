"""Plots of `dp` results: the model's curve per document, the published figures beside it.

`plot_docs` draws one or more JSON documents of the same kind (latency or bandwidth)
on one figure: message size on a log axis (base 2), the documents' main figure on the
other, and, for every calibration target of `libdp.targets` that belongs to a
document, the published point with its source id. ``--plot FILE`` on any benchmark and
``dp plot RESULT.json...`` come here. matplotlib is an optional dependency (the
``plot`` extra); its Agg backend draws without a display.
"""
from __future__ import annotations

import errno
import os

__all__ = ["plot_docs", "expand", "FORMATS"]

FORMATS = (".png", ".svg", ".pdf")
# The figure a document of each benchmark shows, and its axis label; other benchmarks
# get the first of these keys their rows have.
Y_KEYS = (("mbytes_per_s", "Bandwidth (MB/s, MB = 10^6 bytes)"), ("one_way_us", "One-way latency (us)"),
          ("rtt_us", "Round trip (us)"))
BY_BENCHMARK = {"pingpong": "one_way_us", "am-pingpong": "one_way_us"}


def expand(docs: list[dict], labels: list[str] | None = None) -> tuple[list[dict], list[str | None]]:
    """Sweep documents become their points (labelled by their parameters)."""
    out, names = [], []
    for i, doc in enumerate(docs):
        if doc.get("benchmark") == "sweep":
            for p in doc["points"]:
                out.append(p["document"])
                names.append(", ".join(f"{k}={v}" for k, v in p["params"].items()))
        else:
            out.append(doc)
            names.append(labels[i] if labels else None)
    return out, names


def _y_key(doc: dict) -> str:
    rows = doc.get("results") or []
    if not isinstance(rows, list) or not rows or not isinstance(rows[0], dict):
        raise ValueError(f"a {doc.get('benchmark', 'dp')} document has no result rows to plot")
    want = BY_BENCHMARK.get(doc.get("benchmark"))
    if want and want in rows[0]:
        return want
    for key, _ in Y_KEYS:
        if key in rows[0]:
            return key
    raise ValueError(f"nothing to plot in a {doc.get('benchmark', 'dp')} document (no latency or bandwidth)")


def _x_key(doc: dict) -> str:
    return "words" if "words" in doc["results"][0] and "size" not in doc["results"][0] else "size"


def _label(doc: dict) -> str:
    over = {**doc.get("overrides", {}), **{f"am.{k}": v for k, v in doc.get("am_overrides", {}).items()}}
    text = f"{doc.get('benchmark', '')}: {doc.get('platform', '')} + {doc.get('nic', '')}"
    if doc.get("time") == "real":
        text += " (real)"
    return text + ("" if not over else " (" + ", ".join(f"{k}={v}" for k, v in over.items()) + ")")


def plot_docs(docs: list[dict], path: str, labels: list[str] | None = None, title: str | None = None) -> None:
    """Draw `docs` into `path` (.png, .svg or .pdf); EINVAL for documents that do not share a figure."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise OSError(errno.EINVAL, f"--plot draws {', '.join(FORMATS)} files, not {path!r}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise OSError(errno.ENOENT, "plots need matplotlib: pip install 'dp[plot]'") from None
    from libdp.targets import matching

    docs, names = expand(docs, labels)
    if not docs:
        raise OSError(errno.EINVAL, "nothing to plot")
    y = _y_key(docs[0])
    ylabel = dict(Y_KEYS)[y]
    for d in docs[1:]:
        if _y_key(d) != y:
            raise OSError(errno.EINVAL, f"cannot draw {ylabel.split(' (')[0].lower()} and "
                                        f"{dict(Y_KEYS)[_y_key(d)].split(' (')[0].lower()} on one figure")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    xs_all, drawn = [], set()
    for doc, name in zip(docs, names):
        xk = _x_key(doc)
        rows = [r for r in doc["results"] if r.get(y) is not None]
        xs = [r[xk] for r in rows]
        xs_all += xs
        ax.plot(xs, [r[y] for r in rows], marker="o", markersize=3, label=name or _label(doc))
        for t in matching(doc):
            if y in t.points and t.id not in drawn:
                drawn.add(t.id)
                ax.plot([t.size], [t.points[y]], marker="*", markersize=12, linestyle="none",
                        label=f"published: {t.id} ({t.points[y]:g})")
                ax.annotate(t.id, (t.size, t.points[y]), textcoords="offset points",
                            xytext=(8, 4 + 10 * (len(drawn) - 1)), fontsize=8)
    if any(x <= 0 for x in xs_all):
        ax.set_xscale("symlog", base=2, linthresh=1)
    else:
        ax.set_xscale("log", base=2)
    xlabel = "Argument words" if _x_key(docs[0]) == "words" else "Message size (bytes)"
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    kinds = ", ".join(dict.fromkeys(d.get("benchmark", "dp") for d in docs))
    times = " and ".join(dict.fromkeys("real time" if d.get("time") == "real" else "modeled" for d in docs))
    ax.set_title(title or f"dp {kinds} ({times})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(path)
    finally:
        plt.close(fig)

"""The published figures the model is calibrated against: a registry every family adds to.

A `Target` is one figure a paper published (a class B result of docs/sources.md, or a
class A figure the model computes rather than takes as input) together with the ``dp``
command that measures it in the model and how to read the model's figure out of that
command's JSON document. Three things use the registry:

- ``dp reproduce`` runs every target's command and prints model vs published, the
  relative error and a pass mark (within ``tolerance``, ±5% by default);
- ``--plot`` draws each target's published point beside the model's curve when the
  plotted document is of the target's benchmark, platform and NIC;
- the tables of the DP family print a ``paper (ID): ...`` line under such runs.

A command family adds its figures where it defines its commands, one call each::

    from libdp.targets import Target, register

    register(Target(
        id="FM-B01", what="FM one-way latency, 0-byte message", unit="us",
        argv=("fm-pingpong", "--sizes", "0"),              # the dp command (--json is added)
        quick_argv=("fm-pingpong", "--sizes", "0", "--iters", "50"),   # for the test suite
        model=lambda doc: doc["results"][0]["one_way_us"],  # the model's figure in the document
        published=8.8,
        benchmark="fm-pingpong", platform="...", nic="myrinet", size=0,
        points={"one_way_us": 8.8}))                       # where it is drawn on a plot

The id must resolve in docs/sources.md (a test checks every id the repository cites).
"""
from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Target", "register", "targets", "matching", "notes_for", "relative_error"]


@dataclass(frozen=True)
class Target:
    """One published figure and how the model measures it.

    ``id``: its source id (docs/sources.md). ``what``: a line a reader understands.
    ``argv``: the ``dp`` command measuring it; ``quick_argv``: a shorter run of the same
    (fewer iterations), for tests (default: ``argv``). ``model``: the model's figure
    from the command's document. ``published``: the paper's value in ``unit``;
    ``published_range``: (low, high) where the paper prints a range (the published value
    is then its middle, and anything within the range passes). ``tolerance``: the pass
    mark, relative. ``checked=False``: shown for reference, not passed or failed (a
    figure the papers contradict, e.g. DP-B04 against DP-B01).

    Plot placement: ``benchmark``, ``platform``, ``nic`` select the documents it
    belongs to, and ``settings`` the module settings it was measured with (e.g.
    ``{"notify": "pci"}``: a run with other settings, or other module overrides, is not
    the paper's); ``size`` is its x; ``points`` maps a row key (the y a plot shows) to
    the published value in that key's unit.
    """
    id: str
    what: str
    unit: str
    argv: tuple
    model: Callable[[dict], float]
    published: float
    quick_argv: tuple | None = None
    published_range: tuple | None = None
    tolerance: float = 0.05
    checked: bool = True
    benchmark: str = ""
    platform: str = ""
    nic: str = ""
    size: float | None = None
    points: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)

    def passes(self, value: float) -> bool:
        if self.published_range and self.published_range[0] <= value <= self.published_range[1]:
            return True
        return abs(relative_error(value, self.published)) <= self.tolerance

    def published_text(self) -> str:
        if self.published_range:
            return f"{self.published_range[0]:g}-{self.published_range[1]:g} {self.unit}"
        return f"{self.published:g} {self.unit}"


_REGISTRY: dict[str, Target] = {}


def register(target: Target) -> Target:
    """Add a figure; EEXIST if its id is registered already (one entry per figure)."""
    if target.id in _REGISTRY and _REGISTRY[target.id] != target:
        raise OSError(errno.EEXIST, f"calibration target {target.id} is registered twice")
    _REGISTRY[target.id] = target
    return target


def targets() -> list[Target]:
    """Every registered target, after loading every command family (which register theirs)."""
    from libdp._cli import FAMILIES
    import importlib
    for family in FAMILIES:
        importlib.import_module(family)
    return sorted(_REGISTRY.values(), key=lambda t: t.id)


def matching(doc: dict) -> list[Target]:
    """The targets drawn beside `doc`: same benchmark, platform and NIC, the module
    settings the figure was measured with, and no other overrides (a published figure is
    for the paper's machine, not for a changed one)."""
    if doc.get("overrides") or doc.get("am_overrides"):
        return []
    return [t for t in targets() if t.benchmark == doc.get("benchmark") and t.platform == doc.get("platform")
            and t.nic == doc.get("nic") and _settings_match(t, doc)]


def _settings_match(t: Target, doc: dict) -> bool:
    """Does `doc` run the module as `t` was measured? Each of ``t.settings`` must be the
    document's (its top-level key, else its module parameters), and the module may have
    no override beyond them (``fm_overrides``)."""
    over = dict(doc.get("fm_overrides") or {})
    params = doc.get("fm_params") or {}
    for key, want in t.settings.items():
        have = doc.get(key, params.get(key))
        if str(have) != str(want):
            return False
        over.pop(key, None)
    return not over


def notes_for(doc: dict) -> list[str]:
    """``paper (ID): what = value`` lines for a table under a run the papers measured."""
    return [f"paper ({t.id}): {t.what}: {t.published_text()}" for t in matching(doc)
            if any(r.get("size") == t.size for r in doc.get("results", []))]


def relative_error(model: float, published: float) -> float:
    return (model - published) / published


# --------------------------------------------------------------------------- figures of families
# that do not register their own yet (the AM family may move these next to its commands)

def _am_rtt(doc):
    for r in doc["results"]:
        if r.get("words") == 1:
            return r["rtt_us"]
    raise ValueError("no one-word row in the am-pingpong result")


register(Target(
    id="SP-B01", what="SP AM one-word round trip (am_request_1 / am_reply_1), SP thin node", unit="us",
    argv=("am-pingpong", "--sizes", "1"), quick_argv=("am-pingpong", "--sizes", "1", "--iters", "100"),
    model=_am_rtt, published=51.0,
    benchmark="am-pingpong", platform="sp_thin", nic="tb2", size=1, points={"rtt_us": 51.0, "one_way_us": 25.5}))
register(Target(
    id="SP-B08", what="SP AM asymptotic bandwidth r_inf (am_store_async, 1 MB transfers), SP thin node",
    unit="MB/s", argv=("am-bandwidth", "--op", "store", "--mode", "async", "--sizes", "1048576"),
    model=lambda doc: doc["r_inf_mbytes_per_s"], published=34.3,
    benchmark="am-bandwidth", platform="sp_thin", nic="tb2", size=1048576, points={"mbytes_per_s": 34.3}))

"""The documentation a user has: every cited source id resolves in docs/sources.md, the
repository points to no file a user does not have, and the examples of docs/ run."""
from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ROOT / "docs" / "sources.md"
# A source id: a paper's figure or mechanism (DP-B01, LCI-A22, FM-C06, EP-A18, SP-B08), a
# hardware fact (HW-21140), an LCI table (LCI-T3), or a note on the papers (N4, cited as "N4").
ID = re.compile(r"\b(?:(?:LCI|SP|FM|DP|EP)-[ABCT]\d+[a-z]?|HW-[A-Z0-9]+)\b")
NOTE = re.compile(r"(?:see |\(|; )(N\d{1,2})\b")
TEXT_SUFFIXES = {".py", ".pyx", ".pxd", ".toml", ".md", ".txt", ".cfg"}


def _repo_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / f for f in out if Path(f).suffix in TEXT_SUFFIXES and (ROOT / f).is_file()]


def _anchors() -> set[str]:
    return set(re.findall(r'<a id="([^"]+)"></a>', SOURCES.read_text()))


def test_every_cited_id_resolves_in_sources_md():
    anchors = _anchors()
    missing = {}
    for f in _repo_files():
        text = f.read_text(errors="replace")
        for rid in set(ID.findall(text)) | set(NOTE.findall(text)):
            if rid not in anchors:
                missing.setdefault(rid, f.relative_to(ROOT).as_posix())
    assert not missing, f"ids cited but not in docs/sources.md: {missing}"


def test_sources_md_names_the_papers_and_every_class():
    text = SOURCES.read_text()
    for needle in ("Directed Point", "Low-Latency Communication on the IBM RISC System/6000 SP",
                   "Cluster Communication Protocols", "HPVM", "EPOS and Myrinet"):
        assert needle in text
    anchors = _anchors()
    for prefix in ("DP-A", "DP-B", "DP-C", "SP-A", "SP-B", "SP-C", "LCI-A", "LCI-C", "FM-A", "FM-B", "FM-C",
                   "EP-A", "EP-B", "EP-C", "HW-"):
        assert any(a.startswith(prefix) for a in anchors), prefix


def test_profile_sources_resolve():
    from kernelsim import available_profiles, load_profile
    anchors = _anchors()
    for name in available_profiles():
        prof = load_profile(name)
        for key in prof.keys():
            src = prof.entry(key).source
            assert src.strip(), (name, key)
            assert set(ID.findall(src)) <= anchors, (name, key, src)


def test_nothing_points_outside_the_repository():
    shared, facts, hardware = "../" + "shared", "FACTS" + ".md", "HARDWARE" + ".md"
    bad = [f.relative_to(ROOT).as_posix() for f in _repo_files()
           if any(s in f.read_text(errors="replace") for s in (shared, facts, hardware))]
    assert not bad, bad


def test_markdown_links_point_to_files_in_the_repository():
    broken = []
    for f in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", f.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (f.parent / target).exists():
                broken.append(f"{f.name}: {target}")
    assert not broken, broken


def _python_blocks(path: Path) -> list[str]:
    return [textwrap.dedent(b) for b in re.findall(r"```python\n(.*?)```", path.read_text(), re.S)]


@pytest.mark.parametrize("page", ["api.md", "tutorial.md"])
def test_the_examples_of_the_docs_run(page, capsys):
    blocks = _python_blocks(ROOT / "docs" / page)
    assert blocks
    for code in blocks:
        exec(compile(code, f"docs/{page}", "exec"), {"__name__": "__doc_example__"})
    out = capsys.readouterr().out
    if page == "api.md":
        assert "b'ping'" in out and "modeled deadlock" in out and "[1, 0]" in out

"""docs/README.md names every page of docs/, and docs/architecture.md's lines
fit a screen (at most 110 characters)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def test_the_docs_map_lists_every_page():
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if p.name != "README.md" or p.parent != DOCS)
    assert len(pages) >= 20
    text = (DOCS / "README.md").read_text()
    assert [p for p in pages if f"]({p})" not in text] == []


def test_the_architecture_page_has_no_line_over_110_characters():
    lines = (DOCS / "architecture.md").read_text().splitlines()
    assert len(lines) > 50
    assert [(n, len(ln)) for n, ln in enumerate(lines, 1) if len(ln) > 110] == []

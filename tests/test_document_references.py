"""Every document a comment, docstring or doc cites is in the repository: no citation of notes
that live elsewhere (the design notes and reference files the project was written from), every
`*.md` named exists here, and every `docs/architecture.md, <section>` names a real section.
Public issue references (`Project-HAMi/HAMi#1741`, `HAMi#1494`) are fine: anyone can read them."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SKIPPED_DIRS = {".git", ".venv", "hami_dcu.egg-info", "__pycache__", ".pytest_cache", ".pytest-kind", "build", "dist"}
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".tpl", ".txt", ".json", ".sh", ".toml", ".proto", ".cfg", ".ini"}
TEXT_NAMES = {"Dockerfile", ".helmignore", ".dockerignore"}

# Citations of documents that are not in the repository, each with what to write instead.
FORBIDDEN = {
    r"DESIGN\.md": "the design notes: cite docs/architecture.md",
    # ../shared/peers holds the peers' source tarballs (HAMi, Volcano) that the builds read: an
    # input, like the Go module proxy, not a document.
    r"\.\./shared(?!/peers)|shared/reference": "files outside the repository",
    r"hami-wire-protocol|k8s-protocols|hami-since-v2\.10|volcano-hcu-fork|user-pain-points|style-anchors"
    r"|hami-dcu-spec|kind-offline\.md|real-control-plane\.md": "a reference file outside the repository",
    r"\bpain[- ]points?\b": "a table outside the repository: cite the public issue instead",
    r"\bissue \d+ note\b": "a note outside the repository: state the fact",
    r"§": "a section of some document: name a section of docs/architecture.md instead",
    r"\bthe reference\b|\breference's\b|\breference:": "a reference document outside the repository",
}
SECTION = re.compile(r"docs/architecture\.md, ([^).;:]+)")
MARKDOWN = re.compile(r"(?<![\w/.-])([\w./-]+\.md)\b")


def text_files() -> Iterator[Path]:
    for folder, dirs, names in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS]  # never walked into
        for name in names:
            path = Path(folder) / name
            if path.suffix in TEXT_SUFFIXES or name in TEXT_NAMES:
                yield path


def flowed(text: str) -> str:
    """The text with line breaks (and the comment marks that continue a comment) as spaces, so
    a citation wrapped over two lines reads as one."""
    return re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)


def sections() -> list[str]:
    text = (ROOT / "docs" / "architecture.md").read_text()
    return [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]


FILES = {p: p.read_text(errors="replace") for p in text_files() if p != Path(__file__).resolve()}


def test_the_scan_sees_the_tree():
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert {"common/protocol/keys.py", "chart/values.yaml", "docs/architecture.md", "README.md",
            "bench/webhook.py"} <= names


@pytest.mark.parametrize("pattern", FORBIDDEN)
def test_no_citation_of_a_document_outside_the_repository(pattern):
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()[:100]}" for p, text in FILES.items()
             for n, line in enumerate(text.splitlines(), 1) if re.search(pattern, line)]
    assert not found, f"{FORBIDDEN[pattern]}:\n" + "\n".join(found)


def test_every_markdown_file_named_is_in_the_repository():
    missing = []
    for path, text in FILES.items():
        for name in MARKDOWN.findall(text):
            if not ((ROOT / name).is_file() or (path.parent / name).is_file()):
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, "\n".join(missing)


def test_every_cited_section_of_the_architecture_exists():
    titles = sections()
    assert {"Components", "Layers", "Wire formats", "The node lock", "Trust model", "DRA mode", "Volcano mode"} \
        <= set(titles)
    cited = [(path, found) for path, text in FILES.items() for found in SECTION.findall(flowed(text))]
    assert len(cited) >= 10
    unknown = [f"{path.relative_to(ROOT)}: {found}" for path, found in cited
               if not any(found.startswith(title) for title in titles)]
    assert not unknown, "\n".join(unknown)

"""The README is an operator's guide that stays short and true to its links, and README.zh-CN.md
is the same guide in Chinese, kept in step by what can be compared without reading Chinese: the
same sections in the same order, the same commands and code, the same files linked (issue 39)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
ZH = ROOT / "README.zh-CN.md"
# The first screen's two commands, as they have always been.
DEMO = "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && hami-dcu demo"
TESTS = "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest -q"
MAX_LINES = 450
LINKED = ["README.md", "README.zh-CN.md", "docs/operations.md", "docs/development.md", "chart/README.md",
          "SECURITY.md", "CHANGELOG.md"]
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```\n", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Inline code that is a command or a flag: the same in both languages.
COMMAND = re.compile(r"`((?:helm|kubectl|hami-dcu|docker|pip|pytest|python|mkdir) [^`]*|--[a-z][^`]*)`")
TABLE = re.compile(r"<!-- BEGIN values table.*?<!-- END values table -->", re.S)


def fences(text: str) -> list[tuple[str, str]]:
    return [(lang, re.sub(r"^" + indent, "", body, flags=re.M)) for indent, lang, body in FENCE.findall(text)]


def prose(text: str) -> str:
    return FENCE.sub("", text)


def headings(text: str) -> list[tuple[int, str]]:
    return [(len(m.group(1)), m.group(2).strip()) for m in re.finditer(r"^(#{1,6}) (.+)$", prose(text), re.M)]


def slug(title: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (letters of any script
    kept), spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for _, title in headings(path.read_text()):
        base, n = slug(title), 0
        while (anchor := base if n == 0 else f"{base}-{n}") in found:
            n += 1
        found.add(anchor)
    return found


def code_without_comments(body: str) -> str:
    """A code block with its `#` comments and blank lines left out: translated comments are fine."""
    lines = [re.sub(r"(^|\s)#(?![{]).*$", "", line).rstrip() for line in body.splitlines()]
    return "\n".join(line for line in lines if line)


def test_the_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= MAX_LINES, f"README.md has {lines} lines: move what an operator does not need first to docs/"


@pytest.mark.parametrize("path", [README, ZH], ids=lambda p: p.name)
def test_the_first_screen_is_the_two_commands(path):
    text = path.read_text()
    first_screen = text[:text.index("\n## ")]
    assert fences(first_screen) == [("sh", DEMO + "\n"), ("sh", TESTS + "\n")]
    assert first_screen.count("\n") <= 30


@pytest.mark.parametrize("path", [README, ZH], ids=lambda p: p.name)
def test_every_section_is_in_the_contents(path):
    text = path.read_text()
    titles = [title for level, title in headings(text) if level == 2]
    contents = prose(text).split(f"## {titles[0]}\n", 1)[1].split("\n## ", 1)[0]
    assert titles[0] in ("Contents", "目录")
    missing = [t for t in titles[1:] if f"(#{slug(t)})" not in contents]
    assert not missing, f"{path.name}: sections not in the contents: {missing}"


@pytest.mark.parametrize("name", LINKED)
def test_every_relative_link_and_anchor_resolves(name):
    path = ROOT / name
    broken = []
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
            broken.append(target)
    assert not broken, f"{name}: links to nothing: {broken}"


def test_every_readme_citation_names_a_section():
    """Code and docs cite the README as `README, <section>`: each names a section it has."""
    titles = [title for _, title in headings(README.read_text())]
    cited = []
    for path in ROOT.rglob("*"):
        if (path.suffix not in {".py", ".md", ".yaml", ".tpl", ".txt"} or not path.is_file()
                or {".git", ".venv", "node_modules", ".tools"} & set(path.parts)):
            continue
        flowed = re.sub(r"\s*\n\s*(?:#\s*)?", " ", path.read_text(errors="replace"))
        cited += [(path, c.strip()) for c in re.findall(r"(?<![/\w])README(?:\.md)?, ([A-Z][^).;:,\"\]]{2,})", flowed)]
    assert len(cited) >= 10
    unknown = [f"{p.relative_to(ROOT)}: {c}" for p, c in cited if not any(t.startswith(c) for t in titles)]
    assert not unknown, "\n".join(unknown)


def test_the_chinese_readme_has_the_same_sections_in_the_same_order():
    english, chinese = headings(README.read_text()), headings(ZH.read_text())
    assert [level for level, _ in english] == [level for level, _ in chinese], (
        f"README.md: {[t for _, t in english]}; README.zh-CN.md: {[t for _, t in chinese]}")
    # Names that are not translated stay, in the same section.
    for (_, en), (_, zh) in zip(english, chinese, strict=True):
        for word in re.findall(r"`[^`]+`|HAMi v2\.10|DRA|Volcano|HAMi|Webhook|Chart", en):
            assert word in zh, f"{en!r} -> {zh!r}: {word}"


def test_the_chinese_readme_has_the_same_code():
    english, chinese = fences(README.read_text()), fences(ZH.read_text())
    assert [lang for lang, _ in english] == [lang for lang, _ in chinese]
    for (lang, en), (_, zh) in zip(english, chinese, strict=True):
        assert code_without_comments(en) == code_without_comments(zh), f"a {lang or 'text'} block differs:\n{en}"


def test_the_chinese_readme_has_the_same_commands_and_links():
    def commands(text: str) -> set[str]:
        return set(COMMAND.findall(re.sub(r"\s*\n\s*", " ", TABLE.sub("", prose(text)))))

    def files(text: str) -> set[str]:
        return {t.partition("#")[0] for t in LINK.findall(TABLE.sub("", prose(text)))
                if not t.startswith("#")} - {"README.md", "README.zh-CN.md"}

    english, chinese = README.read_text(), ZH.read_text()
    assert len(commands(english)) >= 20
    assert commands(english) == commands(chinese), (
        f"only in README.md: {sorted(commands(english) - commands(chinese))}; "
        f"only in README.zh-CN.md: {sorted(commands(chinese) - commands(english))}")
    assert files(english) == files(chinese)


def test_the_readmes_link_each_other():
    assert "(README.zh-CN.md)" in README.read_text() and "(README.md)" in ZH.read_text()


@pytest.mark.parametrize("name", LINKED)
def test_an_upgrade_keeps_the_new_defaults(name):
    """`helm upgrade --reuse-values` leaves the values a new chart adds unset; the documents
    upgrade with --reset-then-reuse-values (issue 39)."""
    text = re.sub(r"\\\n\s*", " ", (ROOT / name).read_text())
    upgrades = re.findall(r"helm upgrade[^`\n]*", text)
    assert not [u for u in upgrades if re.search(r"--reuse-values\b", u)], upgrades
    if name in ("README.md", "README.zh-CN.md"):
        assert any("--reset-then-reuse-values" in u for u in upgrades)


# What the README tells an operator to look for when a pod waits or fails: our event reasons and
# /filter's reasons, each as the code writes it.
REASONS = ["FilteringFailed", "DCUAllocationFailed", "NodeNumaInsufficient", "UnknownDCUModel", "NamingMismatch",
           "QuotaExceeded", "insufficient card memory", "card slots exhausted",
           "card type mismatch", "device plugin not reporting", "namespace DCU quota exceeded"]


@pytest.mark.parametrize("reason", REASONS)
def test_every_reason_the_readme_names_is_one_the_code_gives(reason):
    code = "\n".join(p.read_text() for folder in ("scheduler", "deviceplugin", "common", "webhook")
                     for p in (ROOT / folder).rglob("*.py"))
    assert reason in code
    for readme in (README, ZH):
        assert f"`{reason}`" in readme.read_text(), readme.name

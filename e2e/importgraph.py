"""Print the import graph between hami_dcu's top-level packages, read from the sources.

    python e2e/importgraph.py [REPO_ROOT]

Each top-level folder of the repository that holds an `__init__.py` is a package: a product
folder is `hami_dcu.<folder>` (pyproject's package-dir maps them so), the test harness (e2e/,
not installed) is imported by its folder name alone; an import spelt either way counts for the
folder. This script reads no pyproject, so it runs with nothing installed. Every `import` and
`from ... import` in a package's modules, at any depth (imports inside functions count: they are
dependencies all the same), that names another package is one edge; the output is one line per
pair, "a -> b (n imports)", sorted.

Module names in string literals (`"hami_dcu.cli.demo"`, loaded with importlib at run time)
are dependencies no static import shows: they follow, as "a -> b (n by name)".

Self-contained on purpose: it imports nothing from the project, so a broken import anywhere
cannot hide the graph.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

ROOT_PACKAGE = "hami_dcu"
_NAME_IN_STRING = re.compile(rf"^{ROOT_PACKAGE}\.(\w+)(\.\w+)*$")


def packages(root: Path) -> list[str]:
    """The top-level folders that are packages: each has an `__init__.py`."""
    return sorted(p.parent.name for p in root.glob("*/__init__.py"))


def modules(root: Path, package: str) -> Iterator[tuple[str, Path]]:
    """(dotted module name, source path) of every module in the package, subpackages included."""
    for path in sorted((root / package).rglob("*.py")):
        relative = path.relative_to(root).with_suffix("")
        parts = list(relative.parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield ".".join([ROOT_PACKAGE, *parts]), path


def _absolute(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module a `from` import names (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = module.split(".")
    drop = node.level - 1 if is_package else node.level
    base = base[: len(base) - drop] if drop else base
    return ".".join(base + ([node.module] if node.module else []))


def imported(module: str, is_package: bool, tree: ast.AST) -> Iterator[str]:
    """Every module name an import statement in the tree names."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(module, is_package, node)
            if target == ROOT_PACKAGE:  # `from hami_dcu import common`
                yield from (f"{ROOT_PACKAGE}.{alias.name}" for alias in node.names)
            else:
                yield target


def named(tree: ast.AST) -> Iterator[str]:
    """Module names of ours written as whole string literals (loaded by name at run time)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _NAME_IN_STRING.match(node.value):
            yield node.value


def top_level(name: str, known: set[str]) -> str | None:
    """The folder a module name is in: `hami_dcu.<folder>...`, or `<folder>...` (the harness)."""
    parts = name.split(".")
    if len(parts) >= 2 and parts[0] == ROOT_PACKAGE and parts[1] in known:
        return parts[1]
    if parts[0] in known:
        return parts[0]
    return None


def graph(root: Path) -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
    """(static imports, names in strings) between distinct top-level packages."""
    known = set(packages(root))
    static: Counter[tuple[str, str]] = Counter()
    by_name: Counter[tuple[str, str]] = Counter()
    for package in sorted(known):
        for module, path in modules(root, package):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            is_package = path.name == "__init__.py"
            for target, counter in ((imported(module, is_package, tree), static), (named(tree), by_name)):
                for name in target:
                    other = top_level(name, known)
                    if other and other != package:
                        counter[package, other] += 1
    return static, by_name


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent
    static, by_name = graph(root)
    for (source, target), count in sorted(static.items()):
        print(f"{source} -> {target} ({count} imports)")
    for (source, target), count in sorted(by_name.items()):
        print(f"{source} -> {target} ({count} by name)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

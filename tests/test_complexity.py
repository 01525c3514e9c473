"""No function or method of the product code is above radon's grade C (cyclomatic complexity
20; issue 38): past that a function is a chain of cases no one reads whole, split it into
helpers with one job each. The product packages are pyproject's package-dir folders; the test
harness (tests/, e2e/, bench/) is not held to it."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("radon")
from radon.complexity import cc_rank, cc_visit
from radon.visitors import Class, Function

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = sorted(set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
                      .values()))
MOST = 20  # radon's grade C ends here; D starts at 21


def _blocks(blocks: list[Function | Class]) -> Iterator[Function]:
    """Every function and method, nested ones and those of nested classes included."""
    for block in blocks:
        if isinstance(block, Class):
            yield from _blocks(block.methods)
            yield from _blocks(block.inner_classes)
        else:
            yield block
            yield from _blocks(block.closures)


def test_the_product_packages_are_what_the_test_reads():
    assert PACKAGES and all((ROOT / package).is_dir() for package in PACKAGES)
    assert not {"tests", "e2e", "bench"} & set(PACKAGES)


def test_no_function_is_above_grade_c():
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            # cc_visit lists a class's methods both on their own and within the class: once each.
            blocks = {(block.lineno, block.fullname): block for block in _blocks(cc_visit(path.read_text()))}
            for block in blocks.values():
                if block.complexity > MOST:
                    offenders.append(f"{path.relative_to(ROOT)}:{block.lineno} {block.fullname} "
                                     f"{cc_rank(block.complexity)} ({block.complexity})")
    assert not offenders, f"above complexity {MOST} (radon grade D or worse):\n" + "\n".join(offenders)


LONGEST_CLASS, MOST_METHODS = 400, 25  # issue 38: past these a class does more than one job


def test_no_class_is_over_400_lines_or_25_methods():
    """Generated gRPC modules (api/ folders, protoc's output) are not ours to shape."""
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "api" in path.relative_to(ROOT / package).parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef):
                    continue
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                methods = sum(isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) for b in node.body)
                if lines > LONGEST_CLASS or methods > MOST_METHODS:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines} lines, "
                                     f"{methods} methods")
    assert not offenders, f"classes over {LONGEST_CLASS} lines or {MOST_METHODS} methods:\n" + "\n".join(offenders)

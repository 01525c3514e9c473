"""The import-layer contracts (pyproject's [tool.importlinter], run by `lint-imports` in CI):
they cover every package, they hold, and they see the real imports (a contract the code
breaks is reported broken, so a kept contract is not an empty graph's)."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
CONFIG = tomllib.loads(PYPROJECT.read_text())
ROOTS = CONFIG["tool"]["importlinter"]["root_packages"]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"  # the command CI runs


def lint(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT_IMPORTS), str(config), "--no-cache", "--no-logo"],
                          cwd=config.parent, capture_output=True, text=True, timeout=120)


def contracts_file(tmp_path: Path, contract: str) -> Path:
    roots = ", ".join(f'"{r}"' for r in ROOTS)
    path = tmp_path / "contracts.toml"
    path.write_text(f"[tool.importlinter]\nroot_packages = [{roots}]\n\n[[tool.importlinter.contracts]]\n{contract}\n")
    return path


def test_every_top_level_package_is_a_root():
    mapped = CONFIG["tool"]["setuptools"]["package-dir"]
    assert sorted(ROOTS) == sorted(mapped)


def test_the_contracts_hold():
    run = lint(PYPROJECT)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


@pytest.mark.parametrize("contract", [
    # dra stands on node: a plain module-level import.
    'name = "probe"\ntype = "forbidden"\nsource_modules = ["hami_dcu.dra"]\nforbidden_modules = ["hami_dcu.node"]',
    # The cluster side reads DRA mode's vocabulary from common.protocol.dra (so a kept contract against
    # hami_dcu.dra is not an empty graph's).
    'name = "probe"\ntype = "forbidden"\nsource_modules = ["hami_dcu.webhook", "hami_dcu.scheduler", "hami_dcu.cli"]\n'
    'forbidden_modules = ["hami_dcu.common.protocol.dra"]',
    # The I/O kit stands on the protocol (kube raises its errors): the graph sees both of
    # common's subpackages, so the kept contract that the protocol imports nothing of the kit is
    # not an empty graph's.
    'name = "probe"\ntype = "forbidden"\nsource_modules = ["hami_dcu.common.io"]\n'
    'forbidden_modules = ["hami_dcu.common.protocol"]',
    # The extender's command imports the webhook inside a function.
    'name = "probe"\ntype = "forbidden"\nsource_modules = ["hami_dcu.scheduler"]\n'
    'forbidden_modules = ["hami_dcu.webhook"]',
])
def test_an_import_the_code_has_breaks_a_contract_against_it(tmp_path, contract):
    run = lint(contracts_file(tmp_path, contract))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "probe BROKEN" in run.stdout

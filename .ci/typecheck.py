"""mypy over the installed hami_dcu packages, reporting the repository's own files.

Usage (in the project's virtual environment, after `pip install -e '.[test]'`):
    python .ci/typecheck.py [mypy options...]

Each top-level folder is installed as `hami_dcu.<folder>` through setuptools' package-dir, and an
editable install reaches the folders through an import hook. mypy cannot follow that hook (from a
.pth file it takes only plain path lines), so `mypy -p hami_dcu.common` finds nothing. This script
asks the installed package itself, through this interpreter's import system, where each package
named in pyproject's [tool.setuptools] packages lives, lists that folder's modules under their
import names and hands mypy exactly those files, checked with pyproject's [tool.mypy] settings.
Errors therefore name the files in the repository (common/protocol/keys.py), not copies or links.

A package named in pyproject but not importable (an editable install older than the package)
stops the run with the command that fixes it: a package silently left unchecked would be worse.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import tomllib
from pathlib import Path

from mypy import util
from mypy.fscache import FileSystemCache
from mypy.main import process_options, run_build
from mypy.modulefinder import BuildSource

ROOT = Path(__file__).resolve().parent.parent


class NotInstalled(Exception):
    """What to check cannot be told: a package pyproject names is not importable here, or
    pyproject names none."""


def installed_packages(pyproject: Path) -> list[str]:
    """The import packages the project installs, as its pyproject lists them."""
    with pyproject.open("rb") as stream:
        packages = tomllib.load(stream).get("tool", {}).get("setuptools", {}).get("packages")
    if not isinstance(packages, list) or not packages:
        raise NotInstalled(f"{pyproject}: no [tool.setuptools] packages list to check")
    return [str(package) for package in packages]


def package_dir(package: str) -> Path:
    """Where the installed `package` lives, as the import system resolves it."""
    try:
        spec = importlib.util.find_spec(package)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise NotInstalled(f"{package} is not installed here: run `pip install -e '.[test]'` first")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def package_sources(package: str, folder: Path) -> list[BuildSource]:
    """The package's own modules (its subpackages are listed in pyproject themselves).

    A stub beside a module (the generated api_pb2.pyi) is what mypy reads for that module, as it
    would for an installed package.
    """
    files: dict[str, Path] = {}
    for path in sorted(folder.glob("*.py")) + sorted(folder.glob("*.pyi")):
        files[path.stem] = path  # .pyi sorted last, so a stub replaces its module
    sources = []
    for stem, path in sorted(files.items()):
        module = package if stem == "__init__" else f"{package}.{stem}"
        sources.append(BuildSource(os.path.relpath(path, ROOT), module))
    return sources


def all_sources(packages: list[str]) -> list[BuildSource]:
    return [source for package in packages for source in package_sources(package, package_dir(package))]


def main(argv: list[str]) -> int:
    started = time.time()
    try:
        sources = all_sources(installed_packages(ROOT / "pyproject.toml"))
    except NotInstalled as error:
        print(f"typecheck: {error}", file=sys.stderr)
        return 2
    fscache = FileSystemCache()
    # Options (and pyproject's [tool.mypy]) parsed as mypy's own command line would; the one
    # placeholder module is replaced by the real list.
    _, options = process_options(
        [*argv, "--config-file", str(ROOT / "pyproject.toml"), "-c", "pass"], fscache=fscache
    )
    _, messages, blockers = run_build(sources, options, fscache, started, sys.stdout, sys.stderr)
    formatter = util.FancyFormatter(sys.stdout, sys.stderr, options.hide_error_codes)
    n_errors, _, n_files = util.count_stats(messages)
    if n_errors:
        print(formatter.format_error(n_errors, n_files, len(sources), blockers=blockers))
        return 2 if blockers else 1
    print(formatter.format_success(len(sources), use_color=False))
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)  # mypy's cache and the relative paths it prints are the repository's
    sys.exit(main(sys.argv[1:]))

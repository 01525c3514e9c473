"""The type check's module list (.ci/typecheck.py): the installed hami_dcu packages, under their
import names, at the repository's own files."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("typecheck", ROOT / ".ci" / "typecheck.py")
assert _spec is not None and _spec.loader is not None
typecheck = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(typecheck)


def test_every_installed_module_is_checked_under_its_import_name_at_its_real_file():
    sources = typecheck.all_sources(typecheck.installed_packages(ROOT / "pyproject.toml"))
    modules = {s.module: s.path for s in sources}
    assert len(modules) == len(sources)  # each module once
    assert modules["hami_dcu.common.protocol.keys"] == "common/protocol/keys.py"
    assert modules["hami_dcu.scheduler"] == "scheduler/__init__.py"
    # The generated stub, not the untyped module it describes.
    assert modules["hami_dcu.deviceplugin.api.v1beta1.api_pb2"] == "deviceplugin/api/v1beta1/api_pb2.pyi"
    for path in modules.values():
        assert not (ROOT / path).is_symlink() and (ROOT / path).resolve().is_relative_to(ROOT)


def test_a_package_that_is_not_installed_stops_the_check_with_the_fix():
    with pytest.raises(typecheck.NotInstalled, match=r"pip install -e"):
        typecheck.package_dir("hami_dcu.no_such_component")


def test_a_pyproject_without_a_package_list_is_refused(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.setuptools.packages.find]\nwhere = ["."]\n')
    with pytest.raises(typecheck.NotInstalled, match=r"no \[tool\.setuptools\] packages list"):
        typecheck.installed_packages(pyproject)


def test_every_module_the_mypy_overrides_name_is_checked():
    # A module renamed or moved (deviceplugin/ to node/) would silently lose its strictness.
    import tomllib

    checked = {s.module for s in typecheck.all_sources(typecheck.installed_packages(ROOT / "pyproject.toml"))}
    with (ROOT / "pyproject.toml").open("rb") as stream:
        overrides = tomllib.load(stream)["tool"]["mypy"]["overrides"]
    ours = [name for o in overrides for name in o["module"] if name.startswith("hami_dcu.")]
    assert ours
    for name in ours:
        if name.endswith(".*"):
            assert any(m.startswith(name[:-1]) for m in checked), name
        else:
            assert name in checked, name

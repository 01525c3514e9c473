"""One version everywhere: the package's (pyproject, `hami-dcu --version`), the chart's `version`
and `appVersion` (the image tag the chart pulls by default), the newest section of CHANGELOG.md
and the image tag the READMEs build and install."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
# A release heading: "## 0.2.0" or "## 0.2.0 (2026-11-27)".
RELEASE = re.compile(r"^## (\S+)(?: \((\d{4}-\d{2}-\d{2})\))?$")


def package_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def chart() -> dict:
    return yaml.safe_load((ROOT / "chart" / "Chart.yaml").read_text())


def changelog_releases() -> list[str]:
    """The CHANGELOG's second-level headings, in order (each must be a release)."""
    return [line[3:].strip() for line in (ROOT / "CHANGELOG.md").read_text().splitlines()
            if line.startswith("## ")]


def test_the_package_and_the_chart_name_one_version():
    version = package_version()
    assert SEMVER.match(version), version
    assert str(chart()["version"]) == version
    assert str(chart()["appVersion"]) == version


def test_every_changelog_section_is_a_release_newest_first():
    headings = changelog_releases()
    assert headings, "CHANGELOG.md has no release section"
    versions = []
    for heading in headings:
        found = RELEASE.match("## " + heading)
        assert found and SEMVER.match(found.group(1)), (
            f"CHANGELOG.md section {heading!r} is not a release ('## X.Y.Z' or '## X.Y.Z (date)'): "
            "a change goes under the version it will be released in")
        versions.append(tuple(int(n) for n in found.group(1).split(".")))
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), versions
    assert versions[-1] == (0, 1, 0)


def test_the_newest_changelog_section_is_the_packaged_version():
    newest = RELEASE.match("## " + changelog_releases()[0])
    assert newest and newest.group(1) == package_version(), (
        f"CHANGELOG.md's newest section is {changelog_releases()[0]!r}, the package is {package_version()}")


def test_hami_dcu_version_prints_the_chart_app_version(tmp_path):
    """`hami-dcu --version` reads the installed distribution: the checkout installed (pip install
    -e .) says what the chart deploys. Run outside the checkout, as the installed command runs: a
    stale `hami_dcu.egg-info` in the working directory would otherwise answer."""
    done = subprocess.run([sys.executable, "-m", "hami_dcu.cli.main", "--version"], capture_output=True, text=True,
                          check=True, cwd=tmp_path)
    assert done.stdout.split() == ["hami-dcu", str(chart()["appVersion"])], done.stdout


def test_the_readmes_build_the_image_the_chart_pulls():
    version = package_version()
    for name in ("README.md", "README.zh-CN.md"):
        path = ROOT / name
        if not path.exists():
            continue
        tags = re.findall(r"hami-dcu:(\d+\.\d+\.\d+)", path.read_text())
        assert tags, name
        assert set(tags) == {version}, f"{name} builds or installs hami-dcu:{sorted(set(tags))}, the chart {version}"

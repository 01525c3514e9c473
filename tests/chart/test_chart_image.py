"""The Dockerfile, checked as text (the kind suite builds and runs it): it copies every package the
wheel is built from, pins exactly the runtime dependency closure at the versions the tests ran
against (constraints.txt), and runs as the non-root user the chart expects."""

import re
import tomllib
from importlib.metadata import PackageNotFoundError, distribution

from chart_paths import ROOT
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DOCKERFILE = (ROOT / "Dockerfile").read_text()


def constraints() -> dict[str, str]:
    assert "COPY constraints.txt /constraints.txt" in DOCKERFILE
    lines = (ROOT / "constraints.txt").read_text().splitlines()
    pins = dict(line.split("==") for line in lines if line and not line.startswith("#"))
    return {canonicalize_name(name): version for name, version in pins.items()}


def runtime_closure() -> dict[str, str]:
    """Installed versions of hami-dcu's runtime dependencies, transitively (no extras)."""
    todo = [Requirement(r) for r in distribution("hami-dcu").requires or []]
    seen: dict[str, str] = {}
    while todo:
        req = todo.pop()
        if req.marker and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        try:
            dist = distribution(req.name)
        except PackageNotFoundError:
            continue  # a platform-only dependency not installed here
        seen[name] = dist.version
        todo.extend(Requirement(r) for r in dist.requires or [])
    return seen


def test_constraints_pin_the_whole_runtime_closure():
    """Every runtime dependency (transitively) is pinned, and nothing else but the build backend.
    Versions are compared by name only: a fresh CI venv may resolve newer releases than the
    pins, which is what the image's pins exist to prevent, not a test failure."""
    pins = constraints()
    closure = runtime_closure()
    assert set(closure) <= set(pins), f"unpinned in the Dockerfile: {sorted(set(closure) - set(pins))}"
    assert set(pins) - set(closure) <= {"setuptools", "wheel"}  # build backend only
    assert all(re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version) for version in pins.values())


def test_every_package_dir_is_copied():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dirs = set(setuptools["package-dir"].values())
    copied = set(re.findall(r"^COPY (\S+) \1$", DOCKERFILE, flags=re.MULTILINE))
    assert package_dirs <= copied


def test_classic_builder_syntax_only():
    """No registry here: no `# syntax=` frontend to pull, no heredocs or RUN --mount that only
    BuildKit understands; the base image is a build argument."""
    assert "# syntax=" not in DOCKERFILE and "<<" not in DOCKERFILE and "--mount" not in DOCKERFILE
    assert DOCKERFILE.count("FROM ${PYTHON_IMAGE}") == 2


def test_runs_as_the_chart_user():
    assert DOCKERFILE.rstrip().endswith('ENTRYPOINT ["hami-dcu"]')
    assert "USER 65532" in DOCKERFILE
    chart = (ROOT / "chart" / "templates" / "scheduler-deployment.yaml").read_text()
    assert "runAsUser: 65532" in chart and "runAsNonRoot: true" in chart

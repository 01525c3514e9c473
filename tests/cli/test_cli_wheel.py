"""The wheel ships the product and not its test harness, and `hami-dcu demo` runs from it.

The wheel is built from a copy of the checkout (an in-tree build would leave build/ behind,
whose stale files a later build packs), then installed into a fresh virtual environment that
borrows only the test environment's third-party packages: nothing of the checkout is
importable there, so a product import of the harness fails the demo."""

import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_SOURCES = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", ".tools", ".pytest_cache",
                                     ".ruff_cache", ".pytest-kind", "__pycache__")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    source = work / "src"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    # No build isolation: setuptools is already in the test environment, and no index is needed.
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(work / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    (built,) = (work / "dist").glob("hami_dcu-*.whl")
    return built


def harness_files(names: list[str]) -> list[str]:
    """What in a wheel belongs to the tests, the e2e harness or the benchmarks."""
    found = []
    for name in names:
        path = PurePosixPath(name)
        if (name.startswith("hami_dcu/e2e/") or {"tests", "bench", "e2e"} & set(path.parts[:-1])
                or path.name.startswith("test_") or path.name == "conftest.py"):
            found.append(name)
    return found


def test_harness_files_are_recognised():
    assert harness_files(["hami_dcu/e2e/scenarios.py", "tests/cli/x.py", "hami_dcu/cli/test_main.py",
                          "bench/scheduler.py", "e2e/kind/build.sh", "hami_dcu/conftest.py"]) == [
        "hami_dcu/e2e/scenarios.py", "tests/cli/x.py", "hami_dcu/cli/test_main.py", "bench/scheduler.py",
        "e2e/kind/build.sh", "hami_dcu/conftest.py"]
    assert harness_files(["hami_dcu/cli/demo.py", "hami_dcu/cli/localcluster/pods.py"]) == []


def test_the_wheel_holds_the_demo_and_no_test_harness(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert harness_files(names) == []
    for product in ("hami_dcu/cli/demo.py", "hami_dcu/cli/localcluster/cluster.py",
                    "hami_dcu/cli/localcluster/apiserver/server.py", "hami_dcu/cli/localcluster/pods.py",
                    "hami_dcu/deviceplugin/api/v1beta1/api.proto"):
        assert product in names


def test_the_demo_runs_from_the_installed_wheel(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    (target,) = (venv / "lib").glob("python3*/site-packages")
    # Third-party packages from the test environment, by path: its .pth files (the editable
    # install of this checkout among them) are not read from there.
    (target / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
                   check=True, capture_output=True, timeout=300)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                              capture_output=True, text=True, timeout=180)

    where = run(str(python), "-c", "import hami_dcu.cli.demo as d; print(d.__file__)")
    assert where.stdout.startswith(str(target)), where.stdout + where.stderr  # the wheel's copy, not the checkout's
    no_harness = run(str(python), "-c", "import e2e")
    assert "No module named 'e2e'" in no_harness.stderr
    helped = run(str(venv / "bin" / "hami-dcu"), "demo", "--help")
    assert helped.returncode == 0 and "--keep" in helped.stdout, helped.stderr
    demo = run(str(venv / "bin" / "hami-dcu"), "demo")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "init-share was refused at admission" in demo.stdout
    assert "cu_count: 18" in demo.stdout
    assert demo.stdout.rstrip().endswith("local cluster stopped")

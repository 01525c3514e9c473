"""The upstream binaries: built by e2e/upstream/build.sh into a per-user cache, once.

`HAMI_DCU_UPSTREAM_BIN` names a directory holding them instead (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler), for machines that have them some other way.

A cold build takes 10-20 minutes; what build.sh says about it (what it builds, about how
long, still at it every minute) is passed line by line to `announce` as it comes, which
prints to stderr, and under pytest to the terminal past its output capture (e2e/conftest.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from collections import deque
from collections.abc import Callable
from pathlib import Path

from e2e.tools import ROOT

BUILD_SCRIPT = ROOT / "e2e" / "upstream" / "build.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")


def _complete(directory: Path) -> bool:
    return all(os.access(directory / b, os.X_OK) for b in BINARIES)


def why_unbuildable() -> str | None:
    """The one-line reason the binaries can be neither found nor built here, or None."""
    given = os.environ.get("HAMI_DCU_UPSTREAM_BIN")
    if given:
        return None if _complete(Path(given)) else f"real cluster: HAMI_DCU_UPSTREAM_BIN={given} lacks the binaries"
    if shutil.which("go") is None:
        return "real cluster: no Go toolchain on PATH to build kube-apiserver, kube-scheduler and etcd"
    if not BUILD_SCRIPT.exists():
        return "real cluster: e2e/upstream/build.sh is not in this checkout"
    proxy = subprocess.run(["go", "env", "GOPROXY"], capture_output=True, text=True).stdout.strip()
    first = proxy.split(",")[0].split("|")[0]
    if first in ("off", "direct", ""):
        return None  # a module cache or vendoring may still build; let the build say
    try:
        urllib.request.urlopen(f"{first.rstrip('/')}/k8s.io/kubernetes/@v/list", timeout=10).close()
    except OSError as exc:
        return f"real cluster: the Go module proxy {first} is unreachable ({exc})"
    return None


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


announce: Callable[[str], None] = to_stderr


class BuildUnavailable(RuntimeError):
    """The build script's exit status 3: what it needs (Go, a source tarball) is not here."""


def run_build(script: Path, what: str) -> str:
    """Runs a cached build script, its progress lines to `announce` as they come; returns the
    last line it printed (the path of what it built)."""
    process = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    said: deque[str] = deque(maxlen=100)
    for line in process.stderr:  # stdout is one line at the end: nothing blocks on it meanwhile
        said.append(line)
        announce(line.rstrip("\n"))
    out = process.stdout.read()
    code = process.wait()
    if code == 3:
        raise BuildUnavailable(said[-1].strip() if said else f"{script.name}: unavailable here")
    if code != 0 or not out.strip():
        raise RuntimeError(f"building {what} failed:\n{''.join(said)[-4000:]}")
    return out.strip().splitlines()[-1]


def binaries(script: Path = BUILD_SCRIPT) -> Path:
    """The directory with the four binaries, building them first if needed (minutes, once)."""
    given = os.environ.get("HAMI_DCU_UPSTREAM_BIN")
    if given:
        return Path(given)
    directory = Path(run_build(script, "the upstream binaries"))
    if not _complete(directory):
        raise RuntimeError(f"build.sh reported {directory}, which lacks some of {', '.join(BINARIES)}")
    return directory


def kube_version(directory: Path) -> str:
    """`vX.Y.Z`, as the built kube-apiserver reports it."""
    out = subprocess.run([str(directory / "kube-apiserver"), "--version"], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[-1]

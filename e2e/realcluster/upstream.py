"""The upstream binaries: built by e2e/upstream/build.sh into a per-user cache, once.

`HAMI_DCU_UPSTREAM_BIN` names a directory holding them instead (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler), for machines that have them some other way.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request
from pathlib import Path

from hami_dcu.e2e.tools import ROOT

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


def binaries() -> Path:
    """The directory with the four binaries, building them first if needed (minutes, once)."""
    given = os.environ.get("HAMI_DCU_UPSTREAM_BIN")
    if given:
        return Path(given)
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building the upstream binaries failed:\n{result.stderr[-4000:]}")
    directory = Path(result.stdout.strip().splitlines()[-1])
    if not _complete(directory):
        raise RuntimeError(f"build.sh reported {directory}, which lacks some of {', '.join(BINARIES)}")
    return directory


def kube_version(directory: Path) -> str:
    """`vX.Y.Z`, as the built kube-apiserver reports it."""
    out = subprocess.run([str(directory / "kube-apiserver"), "--version"], capture_output=True, text=True,
                         check=True).stdout
    return out.split()[-1]

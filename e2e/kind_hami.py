"""HAMi v2.10 on kind (issue 33): its own chart, installed with helm as released, beside
hami-dcu's chart with the node side only. Nothing can be pulled, so the images HAMi's chart names
are built here under those names and loaded into the kind nodes:

* `docker.io/projecthami/hami:v2.10.0`: HAMi's scheduler binary (e2e/upstream/build-hami.sh) as
  `scheduler` on PATH, with the shared libraries it links, on an empty base;
* `docker.io/liangjw/kube-webhook-certgen:v1.1.1`: the chart's certificate hooks, played by
  e2e/realcluster/certgen.py on hami-dcu's own image (Python, the Kubernetes client);
* the bundled kube-scheduler is the kind world's `registry.k8s.io/kube-scheduler` of the
  cluster's version, already in every node.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from e2e.realcluster import hami

if TYPE_CHECKING:
    from e2e.kindcluster import KindBackend


def _docker_build(context: Path, tag: str) -> None:
    result = subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], capture_output=True, text=True,
                            timeout=600, env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"})
    if result.returncode != 0:
        raise RuntimeError(f"docker build {tag} failed:\n{result.stdout}\n{result.stderr}")


def _exists(tag: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0


def scheduler_image(built: Path) -> str:
    """HAMi's image with just its scheduler (the chart runs the command `scheduler`)."""
    tag = f"{hami.IMAGE}:{hami.IMAGE_TAG}"
    if _exists(tag):
        return tag
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "root"
        (root / "usr/local/bin").mkdir(parents=True)
        (root / "etc").mkdir()
        (root / "tmp").mkdir()
        subprocess.run(["cp", str(built), str(root / "usr/local/bin/scheduler")], check=True)
        linked = subprocess.run(["ldd", str(built)], capture_output=True, text=True).stdout
        for word in linked.split():
            if word.startswith("/"):
                target = root / word.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                subprocess.run(["cp", "-L", word, str(target)], check=True)
        (root / "etc/nsswitch.conf").write_text("hosts: files dns\n")
        (root / "etc/passwd").write_text("root:x:0:0:root:/root:/sbin/nologin\n")
        (Path(tmp) / "Dockerfile").write_text("FROM scratch\nCOPY root/ /\nENV PATH=/usr/local/bin\n")
        _docker_build(Path(tmp), tag)
    return tag


def certgen_image(project_image: str) -> str:
    tag = f"{hami.CERTGEN_IMAGE}:{hami.CERTGEN_TAG}"
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["cp", str(hami.CERTGEN), f"{tmp}/certgen.py"], check=True)
        (Path(tmp) / "Dockerfile").write_text(
            f"FROM {project_image}\nCOPY certgen.py /opt/certgen.py\nENTRYPOINT [\"python3\", \"/opt/certgen.py\"]\n")
        _docker_build(Path(tmp), tag)  # rebuilt each time: the project image changes with the sources
    return tag


def install(backend: KindBackend) -> None:
    """HAMi's chart in kube-system (release `hami`), its images loaded first."""
    built = hami.binary()
    for image in (scheduler_image(built), certgen_image(backend.image)):
        backend.cluster.load_docker_image(image)
    values = Path(backend.cluster.path) / "values-hami-peer.yaml"
    values.write_text(yaml.safe_dump(hami.values(backend.world.k8s_version)))
    subprocess.run([str(backend.helm), "install", hami.RELEASE, str(hami.chart(built)), "--namespace", hami.NAMESPACE,
                    "--kubeconfig", str(backend.kubeconfig), "-f", str(values), "--wait", "--timeout", "10m"],
                   check=True, capture_output=True, text=True, timeout=900)


def uninstall(backend: KindBackend) -> None:
    subprocess.run([str(backend.helm), "uninstall", hami.RELEASE, "--namespace", hami.NAMESPACE,
                    "--kubeconfig", str(backend.kubeconfig), "--wait", "--timeout", "5m"],
                   check=True, capture_output=True, text=True, timeout=400)

"""global.imageRegistry (issue 39): a site behind a mirror sets one value and every image the
chart runs is pulled through it; unset, the images are as before."""

import subprocess

import pytest
import yaml
from chart_paths import CHART

from e2e.tools import IMAGE_REPOSITORY, SET_IMAGE

MIRROR = "m.daocloud.io"
# Every kind of workload the chart renders: hooks (certs, cleanup), the renewal CronJob, the
# `helm test` pod, the device plugin or the DRA driver, the scheduler pod.
SETS = [
    [],
    ["--set", "devicePlugin.smi=mock", "--set", "devicePlugin.metricsPort=9400"],
    ["--set", "mode=dra", "--set", "draDriver.metricsPort=9400"],
    ["--set", "scheduler.enabled=false"],
]


def containers(node):
    """Every container and init container of every pod template in the rendered objects."""
    if isinstance(node, dict):
        if isinstance(node.get("containers"), list):
            yield from node["containers"]
            yield from node.get("initContainers") or []
        for value in node.values():
            yield from containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from containers(value)


def images(docs) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for c in containers(docs):
        found.setdefault(c["name"], set()).add(c["image"])
    return found


@pytest.mark.parametrize("values", SETS)
def test_every_hami_dcu_container_is_pulled_through_the_registry(render, values):
    before = images(render(*values, kube_version="1.34.0"))
    after = images(render(*values, "--set", f"global.imageRegistry={MIRROR}/", kube_version="1.34.0"))
    # The node side alone (scheduler.enabled=false) runs only the device plugin.
    assert set(after) == set(before) and len(before) >= (1 if "scheduler.enabled=false" in values else 2)
    for name, refs in before.items():
        assert after[name] == {f"{MIRROR}/{ref}" for ref in refs}, name


def test_the_defaults_leave_images_as_they_were(render):
    found = images(render())
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert found["extender"] == {f"{IMAGE_REPOSITORY}:{app_version}"}
    assert found["kube-scheduler"] == {"registry.k8s.io/kube-scheduler:v1.31.0"}
    assert images(render("--set", "global.imageRegistry=")) == found


def test_the_bundled_kube_scheduler_is_pulled_through_the_registry(render):
    found = images(render("--set", f"global.imageRegistry={MIRROR}"))
    assert found["kube-scheduler"] == {f"{MIRROR}/registry.k8s.io/kube-scheduler:v1.31.0"}


def test_the_kube_scheduler_image_helper_prefixes_it(helm, tmp_path):
    """The helper the scheduler pod is to use, rendered on its own."""
    chart = tmp_path / "chart"
    subprocess.run(["cp", "-r", str(CHART), str(chart)], check=True)
    (chart / "templates" / "probe.yaml").write_text('image: {{ include "hami-dcu.kubeSchedulerImage" . | quote }}\n')
    done = subprocess.run([str(helm), "template", "x", str(chart), *SET_IMAGE, "--kube-version", "1.31.0",
                           "--show-only", "templates/probe.yaml", "--set", f"global.imageRegistry={MIRROR}"],
                          capture_output=True, text=True, check=True)
    assert f'image: "{MIRROR}/registry.k8s.io/kube-scheduler:v1.31.0"' in done.stdout


@pytest.mark.parametrize("registry", ["https://mirror.example.com", "mirror example", "mirror.example.com//x"])
def test_a_registry_that_is_no_image_prefix_is_refused(helm, registry):
    done = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE,
                           "--set", f"global.imageRegistry={registry}"], capture_output=True, text=True)
    assert done.returncode != 0
    assert f'global.imageRegistry is "{registry}": give a registry host' in done.stderr, done.stderr

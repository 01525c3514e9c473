"""One chart value, `naming`, sets the naming set of every component and every resource
name the chart writes; the webhook is sent pods that name either set (it renames)."""

import subprocess

import pytest
import yaml
from chart_paths import CHART

from e2e.tools import SET_IMAGE


def by_kind(docs, kind, suffix=""):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix))


def container_args(doc, name):
    spec = doc["spec"]["template"]["spec"]
    found = next(c for c in spec["containers"] if c["name"] == name)
    return " ".join(found.get("command", []) + found.get("args", []))


@pytest.mark.parametrize("naming", ["dcu", "hcu"])
def test_every_component_speaks_the_chosen_set(render, naming):
    values = ["--set", f"naming={naming}"]
    docs = render(*values)
    config = yaml.safe_load(by_kind(docs, "ConfigMap", "scheduler-config")["data"]["config.yaml"])
    managed = {m["name"]: m["ignoredByScheduler"] for m in config["extenders"][0]["managedResources"]}
    assert managed == {f"hygon.com/{naming}num": False, f"hygon.com/{naming}mem": True,
                       f"hygon.com/{naming}cores": True}
    assert f"--naming={naming}" in container_args(by_kind(docs, "Deployment", "scheduler"), "extender")
    plugin = container_args(by_kind(docs, "DaemonSet", "device-plugin"), "device-plugin")
    assert f"--naming={naming}" in plugin and f"--resource-count=hygon.com/{naming}num" in plugin
    mock = container_args(by_kind(render(*values, "--set", "devicePlugin.smi=mock"), "DaemonSet", "device-plugin"),
                          "device-plugin")
    assert f"--naming {naming} --resource-count hygon.com/{naming}num" in mock
    dra = container_args(by_kind(render(*values, "--set", "mode=dra", kube_version="1.34.0"), "DaemonSet",
                                 "dra-driver"), "dra-driver")
    assert f"--naming {naming}" in dra


def test_the_webhook_is_sent_pods_naming_either_set(render):
    (hook,) = by_kind(render(), "MutatingWebhookConfiguration")["webhooks"]
    condition = hook["matchConditions"][0]["expression"]
    for name in ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores", "hygon.com/hcunum",
                 "hygon.com/hcumem", "hygon.com/hcucores"):
        assert f"'{name}' in c.resources.limits" in condition and f"'{name}' in c.resources.requests" in condition


@pytest.mark.parametrize(("value", "ok"), [("naming=xcu", False), ("scheduler.devicePolicy=binpack\\,numa", True),
                                          ("scheduler.devicePolicy=mutex", True),
                                          ("scheduler.devicePolicy=best-fit", False)])
def test_values_are_checked(helm, value, ok):
    result = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, "--set", value],
                            capture_output=True, text=True)
    assert (result.returncode == 0) == ok, result.stderr

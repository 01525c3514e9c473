"""values.schema.json refuses what the chart would silently ignore: an unknown key at any
level (a typo such as `webhook.failurPolicy`), and templates/validate.yaml refuses values that
contradict each other. Each fails `helm template` with a message naming the value."""

import json
import subprocess

import pytest
import yaml
from chart_paths import CHART

from e2e.tools import SET_IMAGE


def helm_template(helm, *values: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(helm), "template", "hami-dcu", str(CHART), *SET_IMAGE, "--namespace", "kube-system",
                           *values], capture_output=True, text=True)


def test_a_misspelt_nested_key_fails_with_a_clear_message(helm):
    done = helm_template(helm, "--set", "webhook.failurPolicy=Ignore")
    assert done.returncode != 0
    assert "at '/webhook': additional properties 'failurPolicy' not allowed" in done.stderr


@pytest.mark.parametrize("key, where", [
    ("image.tagg=x", "/image"),
    ("scheduler.kubeScheduler.imagee=x", "/scheduler/kubeScheduler"),
    ("scheduler.resources.limit.cpu=1", "/scheduler/resources"),
    ("certs.renewal.enable=false", "/certs/renewal"),
    ("devicePlugin.tolerations[0].keyy=a", "/devicePlugin/tolerations/0"),
    ("imagePullSecrets[0].nam=x", "/imagePullSecrets/0"),
])
def test_unknown_keys_are_refused_at_every_level(helm, key, where):
    done = helm_template(helm, "--set", key)
    assert done.returncode != 0 and f"at '{where}'" in done.stderr, done.stderr


def test_free_form_maps_stay_free(helm):
    done = helm_template(helm, "--set", "devicePlugin.nodeSelector.gpu=hygon", "--set",
                         "scheduler.resources.limits.cpu=1", "--set", "global.imageRegistry=mirror")
    assert done.returncode == 0, done.stderr


def _objects(node, path=""):
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield path or "/", node
        for key, value in node.items():
            yield from _objects(value, f"{path}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _objects(value, f"{path}[{index}]")


def test_every_object_in_the_schema_is_closed_or_a_typed_map():
    schema = json.loads((CHART / "values.schema.json").read_text())
    open_objects = [path for path, node in _objects(schema)
                    if node.get("additionalProperties", True) is True and path != "/properties/global"]
    assert open_objects == []  # global: Helm passes parent charts' values there


def test_every_default_value_is_declared():
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def undeclared(value, node, path):
        if not isinstance(value, dict) or not isinstance(node.get("additionalProperties", False), bool):
            return []
        found = []
        for key, item in value.items():
            declared = (node.get("properties") or {}).get(key)
            found += [f"{path}{key}"] if declared is None else undeclared(item, declared, f"{path}{key}.")
        return found

    assert undeclared(values, schema, "") == []


def test_lock_wait_must_stay_below_the_extender_timeout(helm):
    done = helm_template(helm, "--set", "scheduler.lockWaitSeconds=30", "--set", "scheduler.httpTimeoutSeconds=30")
    assert done.returncode != 0
    assert "scheduler.lockWaitSeconds (30) must be below scheduler.httpTimeoutSeconds (30)" in done.stderr


def test_several_replicas_need_leader_election(helm):
    done = helm_template(helm, "--set", "scheduler.replicas=2", "--set", "scheduler.leaderElect=false")
    assert done.returncode != 0
    assert "scheduler.replicas is 2 but scheduler.leaderElect is false" in done.stderr
    assert helm_template(helm, "--set", "scheduler.replicas=2").returncode == 0

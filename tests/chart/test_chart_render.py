"""The chart lints, renders for default and mock-SMI values, validates against the Kubernetes
schemas offline, and carries the fields the components depend on."""

import json
import subprocess

import kubernetes_validate
import pytest
import yaml
from chart_paths import CHART

from e2e.tools import SET_IMAGE

MOCK_VALUES = ["--set", "devicePlugin.smi=mock", "--set", "image.tag=e2e"]


def by_kind(docs, kind, suffix=""):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]
    assert found, f"no {kind} *{suffix}"
    return found[0]


def test_helm_lint(helm):
    result = subprocess.run([str(helm), "lint", str(CHART), *SET_IMAGE, "--strict"], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("kube_version", ["1.30.0", "1.33.0"])
@pytest.mark.parametrize("values", [[], MOCK_VALUES, ["--set", "scheduler.replicas=2"]], ids=["default", "mock", "ha"])
def test_rendered_manifests_validate_offline(render, kube_version, values):
    docs = render(*values, kube_version=kube_version)
    assert {d["kind"] for d in docs} >= {"Deployment", "DaemonSet", "Service", "MutatingWebhookConfiguration",
                                         "ClusterRole", "ConfigMap", "Job"}
    for doc in docs:
        kubernetes_validate.validate(doc, kube_version, strict=True)


def test_scheduler_configuration(render):
    docs = render()
    config = yaml.safe_load(by_kind(docs, "ConfigMap", "scheduler-config")["data"]["config.yaml"])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert config["profiles"] == [{"schedulerName": "hami-scheduler"}]
    (extender,) = config["extenders"]
    assert extender["filterVerb"] == "filter" and extender["bindVerb"] == "bind"
    assert extender["preemptVerb"] == "preempt"  # victims judged by what they hold on cards (issue 13)
    assert extender["nodeCacheCapable"] is True and extender["httpTimeout"] == "30s"
    managed = {m["name"]: m["ignoredByScheduler"] for m in extender["managedResources"]}
    assert managed == {"hygon.com/dcunum": False, "hygon.com/dcumem": True, "hygon.com/dcucores": True}
    deployment = by_kind(docs, "Deployment", "scheduler")
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert containers["kube-scheduler"]["image"] == "registry.k8s.io/kube-scheduler:v1.31.0"
    args = containers["extender"]["args"]
    assert args[0] == "scheduler" and "--serve-webhook" not in args and "--bind=127.0.0.1:8443" in args
    # kube-scheduler is the extender's neighbour on the pod's loopback: plain HTTP, no TLS buffer
    # per bind waiting for its node.
    assert "--plain-bind" in args and "--scheduler-max-connections" not in " ".join(args)
    assert extender["urlPrefix"] == "http://127.0.0.1:8443" and "enableHTTPS" not in extender
    assert "tlsConfig" not in extender
    assert deployment["spec"]["template"]["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    # A slow answer under a burst must not restart the scheduler pod (binds in flight and the
    # webhook's connections would be cut): probes as lenient as kubeadm's for kube-scheduler.
    for name in ("kube-scheduler", "extender"):
        liveness = containers[name]["livenessProbe"]
        assert liveness["timeoutSeconds"] >= 15 and liveness["failureThreshold"] >= 8
    assert containers["extender"]["readinessProbe"]["timeoutSeconds"] >= 5


@pytest.mark.parametrize("mode", ["devicePlugin", "dra"])
def test_our_kube_scheduler_may_send_four_requests_per_pod_at_the_default_pace(render, mode):
    """A DRA pod costs kube-scheduler four requests: at its default 50/s the client throttled
    DCU pods to 12.5/s at 1,000 nodes (bench/scale.py), a quarter of plain pods' pace."""
    docs = render("--set", f"mode={mode}", kube_version="1.36.0")
    config = yaml.safe_load(by_kind(docs, "ConfigMap", "scheduler-config")["data"]["config.yaml"])
    assert config["clientConnection"] == {"qps": 200, "burst": 400}
    docs = render("--set", "scheduler.kubeScheduler.qps=75", "--set", "scheduler.kubeScheduler.burst=150")
    config = yaml.safe_load(by_kind(docs, "ConfigMap", "scheduler-config")["data"]["config.yaml"])
    assert config["clientConnection"] == {"qps": 75, "burst": 150}


def test_old_clusters_get_the_old_config_api_and_no_match_conditions(render):
    docs = render(kube_version="1.24.0")
    config = yaml.safe_load(by_kind(docs, "ConfigMap", "scheduler-config")["data"]["config.yaml"])
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1beta3"
    hooks = by_kind(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert [h["name"] for h in hooks] == ["dcu.hami.io", "writers.dcu.hami.io", "status.writers.dcu.hami.io"]
    assert all("matchConditions" not in hook for hook in hooks)


def test_webhook_rules_and_selectors(render):
    (hook,) = by_kind(render(), "MutatingWebhookConfiguration")["webhooks"]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    assert hook["rules"] == [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                              "resources": ["pods"], "scope": "Namespaced"}]
    assert hook["clientConfig"]["service"] == {"name": "hami-dcu-webhook", "namespace": "kube-system",
                                               "path": "/webhook", "port": 443}
    expressions = hook["namespaceSelector"]["matchExpressions"]
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]} in expressions
    # A pod's own opt-out label exempts it only when it names no DCU (issue 21): no objectSelector.
    assert "objectSelector" not in hook
    (condition,) = hook["matchConditions"]
    assert "'hygon.com/dcumem' in c.resources.limits" in condition["expression"]
    assert "object.spec.initContainers.exists" in condition["expression"]


@pytest.mark.parametrize(("kube_version", "values", "reviewed"), [
    ("1.31.0", [], False),  # the ValidatingAdmissionPolicies hold the one-writer rule
    ("1.29.0", [], True),  # no policies below 1.30: the webhook reviews updates instead
    ("1.31.0", ["--set", "admissionPolicy.enabled=false"], True),
    ("1.29.0", ["--set", "webhook.reviewUpdates=false"], False),
    ("1.31.0", ["--set", "webhook.reviewUpdates=true"], True),
])
def test_pod_updates_and_bindings_are_reviewed_where_no_policy_runs(render, kube_version, values, reviewed):
    docs = render(*values, kube_version=kube_version)
    hooks = {h["name"]: h for h in by_kind(docs, "MutatingWebhookConfiguration")["webhooks"]}
    assert ("writers.dcu.hami.io" in hooks) is reviewed
    if not reviewed:
        return
    writers = hooks["writers.dcu.hami.io"]
    assert writers["rules"] == [
        {"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
         "scope": "Namespaced"},
        {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/binding", "bindings"],
         "scope": "Namespaced"}]  # a Binding posted to the legacy `bindings` resource too (security round 5)
    assert writers["failurePolicy"] == "Fail" and "objectSelector" not in writers
    assert "matchConditions" not in writers  # every DCU pod's update: the webhook tells DCU pods apart
    # Status writes too (issue 35, finding 6): the API server keeps the metadata a status write
    # carries, so a pods/status PATCH could rewrite an allocation where no policy runs.
    status = hooks["status.writers.dcu.hami.io"]
    assert status["rules"] == [{"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                "resources": ["pods/status"], "scope": "Namespaced"}]
    assert status["failurePolicy"] == "Fail" and status["sideEffects"] == "None" and "objectSelector" not in status
    assert status["namespaceSelector"] == writers["namespaceSelector"]
    assert status["clientConfig"] == writers["clientConfig"]
    if kube_version >= "1.30":
        # Only a status write that sets, changes or removes one of our pod keys leaves the API server.
        (condition,) = status["matchConditions"]
        assert condition["name"] == "changes-an-allocation-key"
        assert "'hami.io/dcu-devices-allocated'" in condition["expression"]
        assert "oldObject.metadata.annotations[k]" in condition["expression"]
    else:
        assert "matchConditions" not in status  # every kubelet status write of a selected namespace
    for doc in docs:
        kubernetes_validate.validate(doc, kube_version, strict=True)


def test_the_status_write_condition_is_the_one_writer_rules_keys(render):
    """The matchCondition lists every key writers.POD_KEYS guards, so no write the webhook would
    refuse skips it."""
    from hami_dcu.common.protocol import writers

    hooks = {h["name"]: h for h in by_kind(render("--set", "admissionPolicy.enabled=false"),
                                           "MutatingWebhookConfiguration")["webhooks"]}
    (condition,) = hooks["status.writers.dcu.hami.io"]["matchConditions"]
    listed = condition["expression"].split("].exists(")[0].lstrip("[")
    assert {k.strip().strip("'") for k in listed.split(",")} == set(writers.POD_KEYS)


def test_the_release_namespace_is_never_sent_to_the_webhook(helm):
    out = subprocess.run([str(helm), "template", "r", str(CHART), *SET_IMAGE, "--namespace", "dcu-system",
                          "--kube-version", "1.29.0"], check=True, capture_output=True, text=True).stdout
    config = by_kind([d for d in yaml.safe_load_all(out) if d], "MutatingWebhookConfiguration")
    for hook in config["webhooks"]:
        names = next(e for e in hook["namespaceSelector"]["matchExpressions"]
                     if e["key"] == "kubernetes.io/metadata.name")
        assert set(names["values"]) == {"kube-system", "dcu-system"}  # its own pods wait on it otherwise


def test_rbac_is_least_privilege(render):
    docs = render()
    scheduler = by_kind(docs, "ClusterRole", "-scheduler")["rules"]
    verbs = {(tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"]) for r in scheduler}
    assert verbs[(("",), ("pods/binding",))] == {"create"}
    assert verbs[(("",), ("nodes",))] == {"get", "list", "watch", "patch"}
    assert verbs[(("",), ("pods",))] == {"get", "list", "watch"}  # the allocation travels on the Binding
    assert verbs[(("",), ("events",))] == {"create"}
    assert verbs[(("",), ("resourcequotas",))] == {"get", "list", "watch"}  # namespace DCU quotas, read only
    plugin = by_kind(docs, "ClusterRole", "device-plugin")["rules"]
    assert all("delete" not in r["verbs"] and "update" not in r["verbs"] for r in plugin)
    assert not any("secrets" in r["resources"] for r in scheduler + plugin)
    certs_role = by_kind(docs, "Role", "-certs")["rules"]
    assert {"apiGroups": [""], "resources": ["secrets"],
            "resourceNames": ["hami-dcu-webhook-tls", "hami-dcu-webhook-ca"], "verbs": ["get", "update"]} in certs_role


def test_device_plugin_daemonset_host_paths(render):
    ds = by_kind(render(), "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"dcu": "on"}
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host == {"device-plugins": "/var/lib/kubelet/device-plugins", "vgpu": "/usr/local/vgpu",
                    "etc-vdev": "/etc/vdev", "sys": "/sys", "dev": "/dev", "hwdata": "/usr/share/hwdata",
                    "dtk": "/opt/dtk", "hyhal": "/opt/hyhal", "state": "/var/lib/hami-dcu/state"}
    (container,) = spec["containers"]
    assert container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "--smi=rsmi" in container["args"] and "--driver-dir=/opt/dtk" in container["args"]


def test_mock_mode_makes_fake_cards_per_node(render):
    values = ["--set", "devicePlugin.smi=mock", "--set-json",
              'devicePlugin.mockDevicesPerNode={"w1":[{"serial":"W1S0","model":"K100_AI","memory_mib":1024,'
              '"pci_bus_id":"0000:3d:00.0"}]}']
    docs = render(*values)
    config = by_kind(docs, "ConfigMap", "mock-devices")["data"]
    assert yaml.safe_load(config["w1.yaml"])[0]["serial"] == "W1S0"
    assert len(yaml.safe_load(config["default.yaml"])) == 2
    (container,) = by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    script = container["args"][0]
    assert "--smi mock" in script and "--mock-fake-tree" in script and "$NODE_NAME.yaml" in script
    host = {v["name"]: v["hostPath"]["path"] for v in by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]["volumes"]
            if "hostPath" in v}
    assert host["fake"] == "/var/lib/hami-dcu/fake" and "dev" not in host


def test_ha_adds_pdb_and_anti_affinity(render):
    docs = render("--set", "scheduler.replicas=2")
    assert by_kind(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    affinity = by_kind(docs, "Deployment", "scheduler")["spec"]["template"]["spec"]["affinity"]
    assert affinity["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert not [d for d in render() if d["kind"] == "PodDisruptionBudget"]


def test_cert_manager_mode(render):
    docs = render("--set", "certs.mode=certManager")
    assert not [d for d in docs if d["kind"] == "Job"]
    certificate = by_kind(docs, "Certificate")
    assert "hami-dcu-webhook.kube-system.svc" in certificate["spec"]["dnsNames"]
    webhook = by_kind(docs, "MutatingWebhookConfiguration")
    assert webhook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        "kube-system/hami-dcu-serving-cert"


@pytest.mark.parametrize(("setting", "named"), [("webhook.failurePolicy=Sometimes", "failurePolicy"),
                                               ("resources.count=example.com/x", "resources"),
                                               ("devicePlugin.smi=nvml", "smi"),
                                               ("scheduler.kubeScheduler.qps=0", "qps"),
                                               ("scheduler.kubeScheduler.burst=0", "burst")])
def test_values_schema_rejects_bad_values(helm, setting, named):
    result = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, "--set", setting],
                            capture_output=True, text=True)
    assert result.returncode != 0 and named in result.stderr
    json.loads((CHART / "values.schema.json").read_text())


def test_kind_e2e_values_render(render, tmp_path):
    """The values e2e/test_kind.py installs with pass the schema and give each node its cards."""
    from hami_dcu.cli.localcluster.pods import default_cards

    nodes = ["hami-dcu-e2e-worker", "hami-dcu-e2e-worker2"]
    values = {"image": {"repository": "hami-dcu", "tag": "e2e", "pullPolicy": "Never"},
              "devicePlugin": {"smi": "mock", "mockDevicesPerNode": {
                  node: [card.as_mock_entry() for card in default_cards(node, 2)] for node in nodes}}}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    docs = render("-f", str(path), set_image=False)
    data = by_kind(docs, "ConfigMap", "mock-devices")["data"]
    for node in nodes:
        assert [card["serial"] for card in yaml.safe_load(data[f"{node}.yaml"])] == [f"{node.upper()}S0",
                                                                                        f"{node.upper()}S1"]
    images = {c["image"] for d in docs if d["kind"] in ("Deployment", "DaemonSet")
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert "hami-dcu:e2e" in images

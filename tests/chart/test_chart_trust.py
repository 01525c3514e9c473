"""The chart's side of issue 11 (trust boundaries), checked on the rendered manifests: who holds
which identity, what listens where, which secrets reach which container, what tenants get
mounted, and the admission policies that keep allocation state to hami-dcu's own identities.
The policies' behaviour is tested on a real API server (e2e/test_realcluster_trust.py)."""

import re
import subprocess

import pytest
import yaml
from chart_paths import CHART

from e2e.tools import SET_IMAGE
from hami_dcu.common.protocol import keys, writers

DCU = keys.DCU_NAMING  # the naming set these tests speak

NS = "kube-system"
EXTENDER_SA, KUBE_SCHEDULER_SA, PLUGIN_SA = "hami-dcu-scheduler", "hami-dcu-kube-scheduler", "hami-dcu-device-plugin"
SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def named(docs, kind, name):
    (found,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def bindings_of(docs, account):
    """(kind, role name) of every binding whose subjects name this ServiceAccount."""
    return {(d["roleRef"]["kind"], d["roleRef"]["name"]) for d in docs
            if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
            and any(s.get("name") == account for s in d.get("subjects") or [])}


def scheduler_pod(docs):
    return named(docs, "Deployment", "hami-dcu-scheduler")["spec"]["template"]["spec"]


def test_the_extender_has_its_own_least_privileged_identity(render):
    """Finding 7: the network-facing extender shared kube-scheduler's ServiceAccount (and so
    held system:kube-scheduler)."""
    docs = render()
    pod = scheduler_pod(docs)
    assert bindings_of(docs, EXTENDER_SA) == {("ClusterRole", "hami-dcu-scheduler")}
    assert ("ClusterRole", "system:kube-scheduler") in bindings_of(docs, KUBE_SCHEDULER_SA)
    containers = {c["name"]: c for c in pod["containers"]}
    mounted = {name: {m["mountPath"]: m["name"] for m in c["volumeMounts"]} for name, c in containers.items()}
    # Each container gets its own identity's token, and only that one.
    assert mounted["extender"][SA_MOUNT] == "extender-token" and "kube-scheduler-token" not in \
        mounted["extender"].values()
    assert "tls" not in mounted["kube-scheduler"].values()


def test_kube_scheduler_runs_on_a_projected_expiring_token(render):
    """Issue 21: kube-scheduler's token was a legacy kubernetes.io/service-account-token Secret,
    valid until deleted. Now it is the pod's own projected token, and the extender's is minted
    from it (an expiring TokenRequest) into a memory volume only the two token containers and
    the extender mount."""
    docs = render()
    assert not [d for d in docs if d["kind"] == "Secret"]
    pod = scheduler_pod(docs)
    assert pod["serviceAccountName"] == KUBE_SCHEDULER_SA and pod["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    projected = volumes["kube-scheduler-token"]["projected"]["sources"][0]["serviceAccountToken"]
    assert projected == {"path": "token", "expirationSeconds": 3600}
    assert volumes["extender-token"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Mi"}
    every = {c["name"]: c for c in pod["containers"] + pod["initContainers"]}
    holders = {name: {m["name"] for m in c["volumeMounts"]} for name, c in every.items()}
    assert {n for n, v in holders.items() if "kube-scheduler-token" in v} == {
        "kube-scheduler", "extender-token", "extender-token-init"}
    assert {n for n, v in holders.items() if "extender-token" in v} == {
        "extender", "extender-token", "extender-token-init"}
    for name in ("extender-token-init", "extender-token"):
        args = every[name]["args"]
        assert args[:3] == ["token", f"--service-account={EXTENDER_SA}", "--dir=/minted"]
        assert ("--once" in args) == (name == "extender-token-init")
    role = named(docs, "Role", KUBE_SCHEDULER_SA)
    assert {"apiGroups": [""], "resources": ["serviceaccounts/token"], "resourceNames": [EXTENDER_SA],
            "verbs": ["create"]} in role["rules"]
    # Without the bundled kube-scheduler the pod is the extender's, on its own projected token.
    alone = scheduler_pod(render("--set", "scheduler.kubeScheduler.enabled=false"))
    assert alone["serviceAccountName"] == EXTENDER_SA and "initContainers" not in alone
    assert "projected" in {v["name"]: v for v in alone["volumes"]}["extender-token"]


def test_filter_and_bind_stay_on_loopback_and_the_service_leads_to_the_webhook_only(render):
    """Finding 6: /filter, /bind and /metrics answered anyone who reached the Service."""
    docs = render()
    (extender,) = [c for c in scheduler_pod(docs)["containers"] if c["name"] == "extender"]
    args = dict(a.split("=", 1) for a in extender["args"][1:] if "=" in a)
    assert args["--bind"] == "127.0.0.1:8443"
    assert args["--webhook-bind"] == "0.0.0.0:9443" and args["--metrics-bind"] == "0.0.0.0:9395"
    assert {p["name"]: p["containerPort"] for p in extender["ports"]} == {"webhook": 9443, "metrics": 9395}
    service = named(docs, "Service", "hami-dcu-webhook")
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(443, "webhook")]
    assert extender["readinessProbe"]["httpGet"]["port"] == "metrics"


def test_the_serving_secret_is_0400_and_readable_by_the_extender_only(render):
    """Finding 7: ca.key was in the serving Secret mounted into the extender, files 0644."""
    pod = scheduler_pod(render())
    (tls,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert tls["secret"]["secretName"] == "hami-dcu-webhook-tls" and tls["secret"]["defaultMode"] == 0o400
    # 0400 files are root's: the extender (65532) reads them through fsGroup, as the kubelet
    # group-owns Secret volumes by it.
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == 65532


def test_the_ca_secret_is_mounted_nowhere(render):
    docs = render()
    for doc in docs:
        spec = (doc.get("spec") or {}).get("template", {}).get("spec") or (doc["spec"] if doc["kind"] == "Pod" else {})
        for volume in spec.get("volumes") or []:
            assert (volume.get("secret") or {}).get("secretName") != "hami-dcu-webhook-ca"
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "hami-dcu-certs"]
    named_secrets = [r for r in role["rules"] if r.get("resourceNames")]
    assert named_secrets[0]["resourceNames"] == ["hami-dcu-webhook-tls", "hami-dcu-webhook-ca"]


def test_mock_device_plugin_is_not_privileged(render):
    """Finding 7: the device plugin was privileged even with mock cards."""
    mock = named(render("--set", "devicePlugin.smi=mock"), "DaemonSet", "hami-dcu-device-plugin")
    (container,) = mock["spec"]["template"]["spec"]["containers"]
    context = container["securityContext"]
    assert context["privileged"] is False and context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"], "add": ["MKNOD"]}
    real = named(render(), "DaemonSet", "hami-dcu-device-plugin")
    assert real["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] is True


def test_the_plugin_state_dir_is_its_own(render):
    """Finding 4: the state a restart rebuilds from lives where no tenant container reaches."""
    ds = named(render(), "DaemonSet", "hami-dcu-device-plugin")
    (container,) = ds["spec"]["template"]["spec"]["containers"]
    assert "--state-dir=/var/lib/hami-dcu/state" in container["args"]
    assert {"name": "state", "mountPath": "/var/lib/hami-dcu/state"} in container["volumeMounts"]


def cel_lists(expression: str) -> list[list[str]]:
    """The list literals of a CEL expression, in order."""
    return [re.findall(r"'([^']*)'", found) for found in re.findall(r"\[('[^\]]*)\]", expression)]


def test_admission_policies_name_exactly_the_shared_keys_and_identities(render):
    """The CEL states common/protocol/writers.py's rule: the same keys, the same identities."""
    docs = render()
    writers_policy = named(docs, "ValidatingAdmissionPolicy", "hami-dcu-allocation-writers")
    condition = writers_policy["spec"]["matchConditions"][0]["expression"]
    assert cel_lists(condition) == [sorted(writers.NODE_KEYS), sorted(writers.POD_KEYS)]
    allowed = next(v for v in writers_policy["spec"]["variables"] if v["name"] == "allowed")["expression"]
    assert cel_lists(allowed) == [sorted(writers.SCHEDULER_NODE_KEYS), sorted(writers.POD_KEYS),
                                  sorted(writers.PLUGIN_NODE_KEYS), sorted(writers.PLUGIN_POD_KEYS),
                                  sorted(writers.SHARED_NODE_KEYS), ["-"]]
    variables = {v["name"]: v["expression"] for v in writers_policy["spec"]["variables"]}
    assert cel_lists(variables["watched"]) == [sorted(writers.NODE_KEYS), sorted(writers.DCU_NODE_KEYS),
                                               sorted(writers.POD_KEYS), sorted(writers.DCU_POD_KEYS)]
    # A DCU pod: any of both sets' resource names, or any of both sets' allocation keys.
    lists = cel_lists(variables["dcuPod"])
    assert sorted(writers.DCU_POD_KEYS) in lists and sorted(writers.DCU_RESOURCES) in lists
    assert {DCU.node_register, keys.HCU_NAMING.node_register} == set(cel_lists(variables["dcuNode"])[0])
    assert allowed.index(f"'system:serviceaccount:{NS}:{EXTENDER_SA}'") < allowed.index(
        f"'system:serviceaccount:{NS}:{PLUGIN_SA}'")
    assert sorted(writers.PLUGIN_POD_KEYS) == sorted([keys.POD_BIND_PHASE, DCU.pod_devices_to_allocate,
                                                      keys.HCU_NAMING.pod_devices_to_allocate])  # both naming sets
    rules = writers_policy["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": [""], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                      "resources": ["pods", "pods/*", "bindings", "nodes", "nodes/*"]}]
    # A Binding is pods/binding, or the same object posted to the legacy `bindings` resource
    # (security round 5: its annotations reached the pod past every policy).
    kind = {v["name"]: v["expression"] for v in writers_policy["spec"]["variables"]}["kind"]
    assert "request.resource.resource == 'bindings' || " in kind
    scope = named(docs, "ValidatingAdmissionPolicy", "hami-dcu-device-plugin-scope")
    assert scope["spec"]["matchConditions"][0]["expression"] == \
        f"request.userInfo.username == 'system:serviceaccount:{NS}:{PLUGIN_SA}'"
    for name in ("hami-dcu-allocation-writers", "hami-dcu-extender-scope", "hami-dcu-device-plugin-scope",
                 "hami-dcu-certs-scope"):
        binding = named(docs, "ValidatingAdmissionPolicyBinding", name)
        assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
        assert named(docs, "ValidatingAdmissionPolicy", name)["spec"]["failurePolicy"] == "Fail"


@pytest.mark.parametrize(("version", "values", "expected"), [("1.29.0", [], 0), ("1.30.0", [], 4),
                                                             ("1.30.0", ["--set", "certs.mode=certManager"], 3),
                                                             ("1.31.0", ["--set", "admissionPolicy.enabled=false"], 0)])
def test_admission_policies_need_kubernetes_1_30(render, version, values, expected):
    docs = render(*values, kube_version=version)
    assert len([d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]) == expected


# --- issue 21: beside HAMi, one identity each ----------------------------------------------


def policy(docs, suffix):
    return named(docs, "ValidatingAdmissionPolicy", f"hami-dcu-{suffix}")


def test_no_further_lock_writer_by_default(render):
    allowed = next(v for v in policy(render(), "allocation-writers")["spec"]["variables"]
                   if v["name"] == "allowed")["expression"]
    assert "(variables.kind == 'node' && (false) ? ['hami.io/mutex.lock'] : ['-'])" in allowed


def test_node_lock_writers_reach_the_policy_and_the_webhook(render):
    """HAMi's scheduler and plugins, named once, are trusted with the lock of a mixed node in the
    API server's policy and in the webhook's rule alike."""
    docs = render("--set", "admissionPolicy.nodeLockWriters.serviceAccounts={kube-system/hami-scheduler}",
                  "--set", "admissionPolicy.nodeLockWriters.users={hami-admin}",
                  "--set", "admissionPolicy.nodeLockWriters.groups={hami-plugins}")
    allowed = next(v for v in policy(docs, "allocation-writers")["spec"]["variables"]
                   if v["name"] == "allowed")["expression"]
    assert ("request.userInfo.username in ['hami-admin', 'system:serviceaccount:kube-system:hami-scheduler'] || "
            "(has(request.userInfo.groups) && request.userInfo.groups.exists(g, g in ['hami-plugins']))") in allowed
    (extender,) = [c for c in scheduler_pod(docs)["containers"] if c["name"] == "extender"]
    assert [a for a in extender["args"] if a.startswith("--node-lock-")] == [
        "--node-lock-user=hami-admin", "--node-lock-user=system:serviceaccount:kube-system:hami-scheduler",
        "--node-lock-group=hami-plugins"]


@pytest.mark.parametrize("value", ["users={it's}", "groups={a\\\\b}", "serviceAccounts={hami-scheduler}",
                                   "serviceAccounts={kube-system/Hami}", "others={x}"])
def test_node_lock_writers_that_would_break_the_cel_are_refused(helm, value):
    result = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, "--set",
                             f"admissionPolicy.nodeLockWriters.{value}"], capture_output=True, text=True)
    assert result.returncode != 0 and "nodeLockWriters" in result.stderr


def test_each_identity_is_narrowed_by_its_own_policy(render):
    docs = render()
    extender = policy(docs, "extender-scope")["spec"]
    assert extender["matchConditions"][0]["expression"] == \
        f"request.userInfo.username == 'system:serviceaccount:{NS}:{EXTENDER_SA}'"
    (only,) = extender["validations"]
    assert "object.spec == oldObject.spec" in only["expression"] and "k in ['hami.io/mutex.lock']" in only["expression"]
    plugin = policy(docs, "device-plugin-scope")["spec"]["validations"][2]["expression"]
    assert f"k in {sorted(writers.PLUGIN_POD_KEYS)}".replace('"', "'") in plugin
    assert f"k in {sorted(writers.PLUGIN_NODE_KEYS)}".replace('"', "'") in plugin
    assert "object.metadata.labels == oldObject.metadata.labels" in plugin
    certs = policy(docs, "certs-scope")["spec"]
    assert certs["matchConditions"][0]["expression"] == (
        f"request.userInfo.username in ['system:serviceaccount:{NS}:hami-dcu-certs', "
        f"'system:serviceaccount:{NS}:hami-dcu-certs-renewal']")
    assert "object.metadata.name in ['hami-dcu-webhook-tls', 'hami-dcu-webhook-ca']" in \
        certs["validations"][0]["expression"]


def test_kube_scheduler_leads_on_its_own_lease(render, helm):
    """HAMi's kube-scheduler leads on the Lease hami-scheduler in its namespace: ours was the
    same one (named after the scheduler name), so one of the two stood idle."""
    for release, expected in (("hami-dcu", "hami-dcu-kube-scheduler"), ("other", "other-hami-dcu-kube-scheduler")):
        docs = render() if release == "hami-dcu" else render_release(helm, release)
        config = yaml.safe_load(named(docs, "ConfigMap", f"{expected.removesuffix('-kube-scheduler')}-scheduler-config")
                                ["data"]["config.yaml"])
        assert config["leaderElection"]["resourceName"] == expected
        assert config["profiles"][0]["schedulerName"] == "hami-scheduler"  # unchanged: HAMi's drop-in
        role = named(docs, "Role", expected)
        assert role["rules"][:2] == [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [expected],
             "verbs": ["get", "update"]}]


def render_release(helm, release):
    """The chart as a second release, in another namespace."""
    out = subprocess.run([str(helm), "template", release, str(CHART), *SET_IMAGE, "--namespace", "hami-dcu-two",
                          "--kube-version", "1.35.0", "--set", "mode=devicePlugin"], check=True, capture_output=True,
                         text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}


def test_a_second_release_shares_no_cluster_scoped_name_nor_lease(render, helm):
    first, second = render(kube_version="1.35.0"), render_release(helm, "second")

    def names(docs):
        cluster = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in CLUSTER_SCOPED}
        kube_system = {(d["kind"], d["metadata"]["name"]) for d in docs
                       if d["metadata"].get("namespace") == "kube-system"}
        return cluster | kube_system

    assert {k for k, _ in names(first)} >= CLUSTER_SCOPED
    assert not names(first) & names(second)


def test_a_plugin_writes_its_nodes_status_in_volcano_mode_only(render):
    """Volcano mode's plugin advertises hcumem and hcucores in node status (nodes/status patch);
    elsewhere a plugin writes no subresource at all."""
    def node_rule(*values):
        return policy(render(*values), "device-plugin-scope")["spec"]["validations"][2]["expression"]
    assert "request.subResource == 'status'" not in node_rule()
    volcano = node_rule("--set", "volcano.enabled=true", "--set", "naming=hcu")
    assert "has(request.subResource) && request.subResource == 'status'" in volcano
    assert volcano.count("object.spec == oldObject.spec") == 3  # node, node status, pod: spec untouched

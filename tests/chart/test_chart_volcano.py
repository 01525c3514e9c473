"""Volcano mode in the chart (issue 24): off by default; on, every component gets its flags, the
device plugin may write node status, and admission lets Volcano's scheduler write what its
Hygon deviceshare writes."""

import subprocess

import pytest
from chart_paths import CHART

from e2e.tools import SET_IMAGE
from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin import lockless

VOLCANO = ["--set", "naming=hcu", "--set", "volcano.enabled=true"]


def by_kind(docs, kind, suffix=""):
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix))


def container_args(doc, name):
    spec = doc["spec"]["template"]["spec"]
    found = next(c for c in spec["containers"] if c["name"] == name)
    return " ".join(found.get("command", []) + found.get("args", []))


def test_off_by_default(render):
    docs = render()
    assert "volcano" not in container_args(by_kind(docs, "DaemonSet", "device-plugin"), "device-plugin")
    assert "volcano" not in container_args(by_kind(docs, "Deployment", "scheduler"), "extender")
    rules = by_kind(docs, "ClusterRole", "device-plugin")["rules"]
    assert not any("nodes/status" in r["resources"] for r in rules)


def test_on_every_component_gets_its_flags_and_rights(render):
    docs = render(*VOLCANO)
    assert "--volcano-scheduler-name=volcano" in container_args(by_kind(docs, "DaemonSet", "device-plugin"),
                                                                 "device-plugin")
    mock = container_args(by_kind(render(*VOLCANO, "--set", "devicePlugin.smi=mock"), "DaemonSet", "device-plugin"),
                          "device-plugin")
    assert "--volcano-scheduler-name volcano" in mock
    extender = container_args(by_kind(docs, "Deployment", "scheduler"), "extender")
    assert "--volcano-scheduler-name=volcano" in extender
    assert "--volcano-identity=system:serviceaccount:volcano-system:volcano-scheduler" in extender
    rules = by_kind(docs, "ClusterRole", "device-plugin")["rules"]
    assert any(r["resources"] == ["nodes/status"] and r["verbs"] == ["patch"] for r in rules)
    policy = by_kind(docs, "ValidatingAdmissionPolicy", "allocation-writers")
    allowed = next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "allowed")
    assert "system:serviceaccount:volcano-system:volcano-scheduler" in allowed
    assert "'hami.io/node-handshake-hcu'" in allowed


@pytest.mark.parametrize(("values", "fragment"), [
    (["--set", "volcano.enabled=true"], "volcano.enabled needs naming: hcu with Hygon's Volcano fork"),
    ([*VOLCANO, "--set", "devicePlugin.registerIntervalSeconds=45"], "must be at most 30"),
    ([*VOLCANO, "--set", "volcano.identity=volcano"], "/volcano/identity"),
])
def test_what_volcano_cannot_read_fails_the_install(helm, values, fragment):
    result = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, *values],
                            capture_output=True, text=True)
    assert result.returncode != 0 and fragment in result.stderr, result.stderr


def _quotes_balanced(cel: str) -> bool:
    """Single-quoted CEL strings open and close in pairs (an apostrophe in prose breaks them)."""
    inside, escaped = False, False
    for char in cel:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "'":
            inside = not inside
    return not inside


@pytest.mark.parametrize("volcano", ["false", "true"])
def test_every_policy_expression_has_balanced_cel_strings(render, volcano):
    """Seen on kind: in Volcano mode a message said "its node's status" inside a CEL string, and
    the API server refused the whole policy at install."""
    docs = render("--set", f"volcano.enabled={volcano}", "--set", "naming=hcu")
    policies = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"]
    assert policies
    for policy in policies:
        spec = policy["spec"]
        expressions = [v.get(k, "") for v in spec.get("validations") or [] for k in ("expression", "messageExpression")]
        expressions += [c.get("expression", "") for c in spec.get("matchConditions") or []]
        expressions += [v.get("expression", "") for v in spec.get("variables") or []]
        for expression in expressions:
            assert _quotes_balanced(expression), f"{policy['metadata']['name']}: {expression}"


def _plugin_write_rule(render, *values):
    docs = render(*values)
    policy = by_kind(docs, "ValidatingAdmissionPolicy", "device-plugin-scope")
    return policy["spec"]["validations"][2]


def test_in_volcano_mode_a_plugin_changes_only_its_shares_in_its_nodes_status(render):
    """Issue 35, finding 7. Before: the status branch compared the spec, labels, finalizers, owners
    and annotations, and nothing of the status: a plugin's nodes/status patch could change the
    capacity of cpu or pods, the addresses, the Ready condition. Now every field of the status is
    compared (iterated as map keys, so fields of a later Kubernetes too) and, of capacity and
    allocatable, every resource but the two the plugin advertises."""
    rule = _plugin_write_rule(render, *VOLCANO)
    expression = rule["expression"]
    status_branch = expression[expression.index("request.subResource == 'status'"):]
    status_branch = status_branch[:status_branch.index(") : ")]  # up to the pods' branch
    maps = "['allocatable', 'capacity']"
    shares = sorted(lockless.share_resources([(65520, True)], keys.HCU_NAMING.resources)["capacity"])
    assert shares == sorted([keys.HCU_NAMING.resources.memory, keys.HCU_NAMING.resources.cores])
    assert shares == ["hygon.com/hcucores", "hygon.com/hcumem"]
    for term in (
        # every other status field: present on both sides, equal
        f"object.status.all(f, f in {maps} || (f in oldObject.status && object.status[f] == oldObject.status[f]))",
        f"oldObject.status.all(f, f in {maps} || f in object.status)",
        # of capacity and allocatable, every other resource: present on both sides, equal
        f"{maps}.all(f, (f in object.status) == (f in oldObject.status)",
        f"object.status[f].all(r, r in {shares} || (r in oldObject.status[f] && "
        "object.status[f][r] == oldObject.status[f][r]))",
        f"oldObject.status[f].all(r, r in {shares} || r in object.status[f])",
        # and the rest of the node as before: spec, labels, annotations
        "object.spec == oldObject.spec", "object.metadata.labels == oldObject.metadata.labels",
        "annotations.all(k, k in [] ||",
    ):
        assert term in status_branch, term
    assert _quotes_balanced(rule["messageExpression"])
    assert ("no subresource but the status of its node, and there only the capacity and allocatable of "
            "hygon.com/hcucores and hygon.com/hcumem, no create") in rule["messageExpression"]
    # Outside Volcano mode a plugin writes no status at all: no status branch to compare.
    default = _plugin_write_rule(render)
    assert "object.status" not in default["expression"] and "request.subResource == 'status'" not in \
        default["expression"]


def test_upstream_volcano_takes_the_dcu_set(render):
    """With the extender (upstream Volcano) naming dcu renders: the device plugin reports
    hygon.com/dcumem and dcucores in node status, which the admission policy lets it write."""
    docs = render("--set", "volcano.enabled=true", "--set", "volcano.extender.enabled=true")
    plugin = container_args(by_kind(docs, "DaemonSet", "device-plugin"), "device-plugin")
    assert "--naming=dcu" in plugin and "--volcano-scheduler-name=volcano" in plugin
    assert "--volcano-bind=0.0.0.0:8446" in container_args(by_kind(docs, "Deployment", "scheduler"), "extender")
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy" and "hygon.com/dcumem" in str(d))
    assert "hygon.com/dcucores" in str(policy)

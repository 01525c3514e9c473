"""Upstream Volcano in the chart (issue 34, value volcano.extender): off by default; on, the
extender serves Volcano's verbs on a port of its own, a Service (one replica per Volcano
scheduler: sessionAffinity) leads there, the extender may patch pods (allocateFunc's write), and
a NetworkPolicy admits only Volcano's scheduler to that port."""

import subprocess

import pytest
from chart_paths import CHART

from e2e.tools import SET_IMAGE

ON = ["--set", "naming=hcu", "--set", "volcano.enabled=true", "--set", "volcano.extender.enabled=true"]


def named(docs, kind, suffix):
    return [d for d in docs if d["kind"] == kind and d["metadata"]["name"].endswith(suffix)]


def extender(docs):
    deployment = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-scheduler"))
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "extender")


def test_off_by_default_and_in_the_forks_volcano_mode(render):
    for docs in (render(), render("--set", "naming=hcu", "--set", "volcano.enabled=true")):
        assert not [a for a in extender(docs)["args"] if a.startswith("--volcano-bind")]
        assert not named(docs, "Service", "-volcano-extender")
        assert not named(docs, "ClusterRole", "-volcano-extender")
        assert not named(docs, "NetworkPolicy", "-volcano-extender")


def test_on_the_verbs_are_served_on_their_port_behind_a_service(render):
    docs = render(*ON)
    container = extender(docs)
    assert "--volcano-bind=0.0.0.0:8446" in container["args"]
    assert "--volcano-scheduler-name=volcano" in container["args"]
    assert {"name": "volcano", "containerPort": 8446} in container["ports"]
    [service] = named(docs, "Service", "-volcano-extender")
    assert service["spec"]["ports"] == [{"name": "volcano", "port": 8446, "targetPort": "volcano"}]
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "scheduler"


def test_on_the_extender_may_patch_pods_and_nothing_more(render):
    docs = render(*ON)
    [role] = named(docs, "ClusterRole", "-volcano-extender")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]}]
    [binding] = named(docs, "ClusterRoleBinding", "-volcano-extender")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hami-dcu-scheduler", "namespace": "kube-system"}]


def test_on_only_volcanos_scheduler_reaches_the_port(render):
    [policy] = named(render(*ON), "NetworkPolicy", "-volcano-extender")
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8446}]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "volcano-system"}},
                             "podSelector": {"matchLabels": {"app": "volcano-scheduler"}}}]
    custom = render(*ON, "--set", "volcano.extender.port=9000",
                    "--set-json", 'volcano.extender.from=[{"ipBlock": {"cidr": "10.0.0.0/8"}}]')
    [policy] = named(custom, "NetworkPolicy", "-volcano-extender")
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 9000}],
                                          "from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]
    assert not named(render(*ON, "--set", "networkPolicy.enabled=false"), "NetworkPolicy", "-volcano-extender")


@pytest.mark.parametrize(("values", "fragment"), [
    (["--set", "volcano.extender.enabled=true"], "volcano.extender.enabled needs volcano.enabled"),
    ([*ON, "--set", "scheduler.enabled=false"], "volcano.extender.enabled needs scheduler.enabled"),
    ([*ON, "--set", "volcano.extender.port=0"], "/volcano/extender/port"),
])
def test_what_cannot_work_fails_the_install(helm, values, fragment):
    result = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, *values],
                            capture_output=True, text=True)
    assert result.returncode != 0 and fragment in result.stderr, result.stderr


def test_in_volcano_mode_admission_lets_the_extender_write_an_unbound_pods_allocation(render):
    def scope(docs):
        [policy] = named(docs, "ValidatingAdmissionPolicy", "-extender-scope")
        return policy["spec"]["validations"][0]["expression"]

    volcano = scope(render(*ON))
    assert "variables.kind == 'pod' && (!has(object.spec.nodeName) || object.spec.nodeName == '')" in volcano
    assert "'hami.io/hcu-devices-allocated'" in volcano
    assert "object.spec.nodeName == ''" not in scope(render())

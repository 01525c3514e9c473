"""scheduler.enabled=false: the chart's node side only, beside another scheduler that speaks
HAMi's protocol (HAMi v2.10's own hami-scheduler, issue 33). Nothing of the cluster side is
rendered, and the admission policies let the external scheduler's identity write what HAMi's
scheduler writes (the pod allocation keys by a pod patch, the node lock, the handshake) and
nothing else of ours."""

import subprocess

import pytest
from chart_paths import CHART

from e2e.tools import SET_IMAGE

NODE_ONLY = ["--set", "scheduler.enabled=false"]
HAMI = "system:serviceaccount:kube-system:hami-scheduler"


def kinds_and_names(docs):
    return {(d["kind"], d["metadata"]["name"]) for d in docs}


def allowed_expression(docs):
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                  and d["metadata"]["name"].endswith("allocation-writers"))
    return next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == "allowed")


def test_only_the_node_side_is_rendered(render):
    docs = render(*NODE_ONLY)
    rendered = kinds_and_names(docs)
    kinds = {kind for kind, _ in rendered}
    assert "DaemonSet" in kinds
    assert not kinds & {"Deployment", "MutatingWebhookConfiguration", "Job", "CronJob", "Service"}, rendered
    names = {name for _, name in rendered}
    assert not any(name.endswith(("-scheduler", "-scheduler-config", "-kube-scheduler", "-certs",
                                  "-extender-scope", "-certs-scope")) for name in names), names
    assert any(name.endswith("-device-plugin-scope") for name in names)
    # With everything on (the default), the same objects exist: the switch removes, never renames.
    assert {n for _, n in rendered} < {n for _, n in kinds_and_names(render())}


def test_cert_manager_mode_renders_no_certificate_without_the_scheduler(render):
    docs = render(*NODE_ONLY, "--set", "certs.mode=certManager")
    assert not {d["kind"] for d in docs} & {"Issuer", "Certificate"}


def test_the_external_identity_writes_what_hamis_scheduler_writes(render):
    allowed = allowed_expression(render(*NODE_ONLY))
    assert f"request.userInfo.username == '{HAMI}' ? (variables.kind == 'node' ? " \
           "['hami.io/mutex.lock', 'hami.io/node-handshake-dcu'] :" in allowed
    # hami-dcu's own extender is not named at all: there is none.
    assert "hami-dcu-scheduler'" not in allowed
    hcu = allowed_expression(render(*NODE_ONLY, "--set", "naming=hcu"))
    assert "'hami.io/node-handshake-hcu']" in hcu
    other = allowed_expression(render(*NODE_ONLY, "--set", "scheduler.external.identity=system:serviceaccount:hami:hs"))
    assert "request.userInfo.username == 'system:serviceaccount:hami:hs'" in other


def test_with_the_scheduler_the_external_identity_is_not_trusted(render):
    allowed = allowed_expression(render())
    assert HAMI not in allowed
    assert "'hami.io/node-handshake-dcu']" not in allowed.split("?")[1]


@pytest.mark.parametrize(("values", "fragment"), [
    ([*NODE_ONLY, "--set", "mode=dra"], "scheduler.enabled=false (the node side only"),
    ([*NODE_ONLY, "--set", "scheduler.external.identity=a'b"], "/scheduler/external/identity"),
])
def test_what_cannot_work_without_the_scheduler_fails_the_install(helm, values, fragment):
    result = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, "--kube-version", "1.34.0", *values],
                            capture_output=True, text=True)
    assert result.returncode != 0 and fragment in result.stderr, result.stderr

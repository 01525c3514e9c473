"""scheduler.cardPreemption: the extender's right to evict (RBAC and its admission policy) and
its flag come together, in device-plugin mode only, and go together when it is off."""

import pytest


def _extender_rules(docs: list[dict]) -> list[dict]:
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "hami-dcu-scheduler"]
    return role["rules"]


def _extender_scope(docs: list[dict]) -> str:
    (policy,) = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                 and d["metadata"]["name"] == "hami-dcu-extender-scope"]
    (only,) = policy["spec"]["validations"]
    return only["expression"]


def _extender_args(docs: list[dict]) -> list[str]:
    (deploy,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "hami-dcu-scheduler"]
    (extender,) = [c for c in deploy["spec"]["template"]["spec"]["containers"] if c["name"] == "extender"]
    return extender["args"]


EVICT = {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}
BUDGETS = {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]}


def test_on_by_default_the_extender_may_evict_and_list_budgets(render):
    docs = render()
    rules = _extender_rules(docs)
    assert EVICT in rules and BUDGETS in rules
    # The policy lets it create an Eviction (a subresource CREATE), nothing else of a pod.
    assert "request.subResource == 'eviction'" in _extender_scope(docs)
    assert "--no-card-preemption" not in _extender_args(docs)


@pytest.mark.parametrize("values", [("--set", "scheduler.cardPreemption=false"), ("--set", "mode=dra")])
def test_off_or_in_dra_mode_no_right_to_evict(render, values):
    docs = render(*values, kube_version="1.37.2")
    rules = _extender_rules(docs)
    assert EVICT not in rules and BUDGETS not in rules
    assert "eviction" not in _extender_scope(docs)
    if values[1] == "scheduler.cardPreemption=false":
        assert "--no-card-preemption" in _extender_args(docs)

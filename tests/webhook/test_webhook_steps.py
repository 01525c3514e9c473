"""Each admission step on its own: what it settles, and that it passes (None) on everything else.
`review` runs them in `STEPS` order; test_webhook_decision.py checks the whole."""

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.podchecks import dcu_pod
from hami_dcu.common.protocol.quota import Amount, Limit, QuotaLimits
from hami_dcu.webhook import decision
from hami_dcu.webhook.decision import DRA, STEPS, Admission, Settings
from hami_dcu.webhook.rename import adopt_names

DCU = keys.DCU_NAMING


def pod(scheduler="default-scheduler", labels=None, namespace="default", **limits):
    names = {"num": DCU.resources.count, "mem": DCU.resources.memory, "cores": DCU.resources.cores}
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels or {}},
            "spec": {"schedulerName": scheduler,
                     "containers": [{"name": "c", "image": "x",
                                     "resources": {"limits": {names[k]: str(v) for k, v in limits.items()}}}]}}


def admission(body, settings=None):
    settings = settings or Settings(naming=DCU)
    adopted = adopt_names(body, settings.naming)
    return Admission(body, adopted.pod, adopted, dcu_pod(adopted.pod, settings.resources), settings)


SHARE = {"num": 1, "mem": 2000, "cores": 20}


def test_the_steps_run_in_the_documented_order():
    assert [s.__name__ for s in STEPS] == ["not_a_dcu_pod", "deny_rules", "selection_lists", "claims_in_dra_mode",
                                           "left_to_volcano", "other_scheduler", "namespace_quota"]


def test_not_a_dcu_pod_settles_plain_and_opted_out_pods_only():
    assert decision.not_a_dcu_pod(admission(pod())).reason == "no-dcu"
    opted = pod(labels={keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE})
    assert decision.not_a_dcu_pod(admission(opted)).reason == "ignored"
    # The label does not exempt a pod that asks for DCU.
    assert decision.not_a_dcu_pod(admission(pod(labels={keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}, **SHARE))) is None


def test_deny_rules_refuse_what_cannot_work_and_pass_the_rest():
    refused = decision.deny_rules(admission(pod(num=1, cores=150)))
    assert refused is not None and not refused.allowed and "150" in refused.message
    assert decision.deny_rules(admission(pod(**SHARE))) is None


def test_claims_in_dra_mode_only_in_dra_mode():
    assert decision.claims_in_dra_mode(admission(pod(**SHARE))) is None
    rewritten = decision.claims_in_dra_mode(admission(pod(**SHARE), Settings(naming=DCU, mode=DRA, card_units=(80,))))
    assert rewritten is not None and rewritten.allowed and rewritten.reason == "claims" and rewritten.templates


def test_left_to_volcano_keeps_volcano_pods_under_the_memory_unit_rule():
    settings = Settings(naming=DCU, volcano_scheduler="volcano")
    kept = decision.left_to_volcano(admission(pod(scheduler="volcano", **SHARE), settings))
    assert kept is not None and kept.allowed and kept.reason == "left-to-volcano" and kept.patch == []
    gib = decision.left_to_volcano(admission(pod(scheduler="volcano", num=1, mem=2, cores=20), settings))
    assert gib is not None and not gib.allowed and gib.reason == "volcano-memory-unit"
    assert decision.left_to_volcano(admission(pod(**SHARE), settings)) is None
    assert decision.left_to_volcano(admission(pod(scheduler="volcano", **SHARE))) is None  # Volcano mode off


def test_other_scheduler_keeps_an_explicit_choice_with_a_warning():
    kept = decision.other_scheduler(admission(pod(scheduler="my-scheduler", **SHARE)))
    assert kept is not None and kept.allowed and kept.patch == [] and "my-scheduler" in kept.warnings[0]
    for ours in ("default-scheduler", "", keys.DEFAULT_SCHEDULER_NAME):
        assert decision.other_scheduler(admission(pod(scheduler=ours, **SHARE))) is None


def test_namespace_quota_refuses_a_pod_over_its_namespace_limit():
    limits = QuotaLimits(memory=Limit(3000, "team-dcu"))
    settings = Settings(naming=DCU, quota=lambda ns: (limits, Amount(memory=2000)) if ns == "team" else None)
    over = decision.namespace_quota(admission(pod(namespace="team", **SHARE), settings))
    assert over is not None and not over.allowed and over.reason == "quota-exceeded" and "team-dcu" in over.message
    assert decision.namespace_quota(admission(pod(namespace="other", **SHARE), settings)) is None
    assert decision.namespace_quota(admission(pod(namespace="team", num=1, mem=1000, cores=20), settings)) is None


def test_route_to_scheduler_sets_the_scheduler_once():
    routed = decision.route_to_scheduler(admission(pod(**SHARE)))
    assert routed.reason == "routed"
    assert routed.patch == [{"op": "replace", "path": "/spec/schedulerName", "value": keys.DEFAULT_SCHEDULER_NAME}]
    already = decision.route_to_scheduler(admission(pod(scheduler=keys.DEFAULT_SCHEDULER_NAME, **SHARE)))
    assert already.reason == "already-routed" and already.patch == []

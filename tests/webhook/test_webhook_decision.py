"""The pure admission decision, rule by rule."""

import jsonpatch
import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.webhook.decision import Settings, review

DCU = keys.DCU_NAMING  # the naming set these tests speak
SETTINGS = Settings(naming=DCU)


def ctr(name="c", **limits):
    mapping = {"num": DCU.resources.count, "mem": DCU.resources.memory,
               "cores": DCU.resources.cores}
    return {"name": name, "image": "x", "resources": {"limits": {mapping.get(k, k): str(v) for k, v in limits.items()}}}


def pod(containers, init=None, scheduler="default-scheduler", annotations=None, labels=None, node=None, **spec):
    body = {"metadata": {"name": "p", "namespace": "default", "annotations": annotations or {}, "labels": labels or {}},
            "spec": {"containers": containers, **spec}}
    if init is not None:
        body["spec"]["initContainers"] = init
    if scheduler is not None:
        body["spec"]["schedulerName"] = scheduler
    if node:
        body["spec"]["nodeName"] = node
    return body


def routed(p, settings=None):
    decision = review(p, settings or SETTINGS)
    assert decision.allowed, decision.message
    return jsonpatch.apply_patch(p, decision.patch)["spec"].get("schedulerName"), decision


def test_pod_without_dcu_passes_untouched():
    decision = review(pod([ctr(cpu=1)]), SETTINGS)
    assert decision.allowed and decision.patch == [] and decision.reason == "no-dcu"


def test_a_zero_card_count_asks_for_no_dcu_and_is_left_alone():
    # HAMi reads dcunum: 0 as no request; so do we, even with a nodeName (it needs no cards).
    decision = review(pod([ctr(num=0), ctr("side", cpu=1)], node="n1"), SETTINGS)
    assert decision.allowed and decision.patch == [] and decision.reason == "no-dcu"
    name, _ = routed(pod([ctr(num=0), ctr("main", num=1)]))
    assert name == "hami-scheduler"


@pytest.mark.parametrize("scheduler", ["default-scheduler", None, ""])
def test_dcu_pod_is_routed_to_hami_scheduler(scheduler):
    name, decision = routed(pod([ctr(num=1, mem=2000, cores=60)], scheduler=scheduler))
    assert name == "hami-scheduler" and decision.reason == "routed"


def test_request_only_in_requests_or_init_or_sidecar_counts():
    assert routed(pod([{"name": "c", "resources": {"requests": {DCU.resources.count: "1"}}}]))[0] == \
        "hami-scheduler"
    sidecar = ctr("side", num=1)
    sidecar["restartPolicy"] = "Always"
    assert routed(pod([ctr(cpu=1)], init=[sidecar]))[0] == "hami-scheduler"


def test_already_routed_needs_no_patch():
    decision = review(pod([ctr(num=1)], scheduler="hami-scheduler"), SETTINGS)
    assert decision.allowed and decision.patch == [] and decision.reason == "already-routed"


def test_other_scheduler_is_kept_with_a_warning():
    decision = review(pod([ctr(num=1)], scheduler="volcano"), SETTINGS)
    assert decision.allowed and decision.patch == []
    assert "volcano" in decision.warnings[0] and len(decision.warnings[0]) <= 120


def test_overwritable_list_and_scheduler_name_are_configurable():
    settings = Settings(naming=DCU, scheduler_name="dcu-sched", overwritable_schedulers=("default-scheduler", "legacy"))
    assert routed(pod([ctr(num=1)], scheduler="legacy"), settings)[0] == "dcu-sched"


@pytest.mark.parametrize(
    ("body", "reason", "fragment"),
    [
        (pod([ctr(num=1)], init=[ctr("setup", num=1, mem=1000)]), "init-container-sharing", "init container setup"),
        (pod([ctr(num=1)], init=[ctr("setup", num=1, cores=10)]), "init-container-sharing", "not supported"),
        (pod([ctr("train", num=2, mem=1000)]), "multi-card-sharing", "container train"),
        (pod([ctr("train", num=2, cores=50)]), "multi-card-sharing", "whole cards"),
        (pod([ctr(num=1, cores=101)]), "invalid-request", "0-100"),
        (pod([ctr(num=1, cores=-1)]), "invalid-request", "negative"),
        (pod([ctr(num=1, mem=0)]), "invalid-request", "at least 1 MiB"),
        (pod([ctr(num=0, mem=1000)]), "invalid-request", "need hygon.com/dcunum"),
        (pod([ctr(num="1.5")]), "invalid-request", "whole number"),
        (pod([ctr(mem=100)]), "invalid-request", "need hygon.com/dcunum"),
        (pod([ctr(num=1)], node="n1"), "node-name-set", "remove spec.nodeName"),
        (pod([ctr(num=1)], annotations={DCU.pod_devices_allocated: "DCU-X,DCU,1,1:;"}), "forged-annotations",
         DCU.pod_devices_allocated),
        (pod([ctr(num=1)], annotations={keys.POD_BIND_PHASE: "allocating"}), "forged-annotations", "bind-phase"),
    ],
)
def test_denials_say_what_to_change(body, reason, fragment):
    decision = review(body, SETTINGS)
    assert not decision.allowed
    assert decision.reason == reason
    assert fragment in decision.message


def test_privileged_container_with_dcu_is_denied_but_without_dcu_passes():
    privileged = ctr("gpu", num=1)
    privileged["securityContext"] = {"privileged": True}
    decision = review(pod([privileged]), SETTINGS)
    assert not decision.allowed and decision.reason == "privileged" and "gpu" in decision.message
    helper = ctr("helper", cpu=1)
    helper["securityContext"] = {"privileged": True}
    assert review(pod([ctr(num=1), helper]), SETTINGS).allowed


def test_whole_cards_in_init_container_are_allowed():
    assert routed(pod([ctr(num=1)], init=[ctr("setup", num=1)]))[0] == "hami-scheduler"


def test_the_opt_out_label_exempts_only_pods_naming_no_dcu():
    opted_out = {keys.WEBHOOK_LABEL: keys.WEBHOOK_IGNORE}
    decision = review(pod([ctr(cpu=1)], labels=opted_out), SETTINGS)
    assert decision.allowed and decision.patch == [] and decision.reason == "ignored"
    # A DCU pod wearing the label is denied and routed as any other (issue 21: the label let a
    # two-card share through, served as two whole cards).
    decision = review(pod([ctr("train", num=2, mem=1000, cores=10)], labels=opted_out), SETTINGS)
    assert not decision.allowed and decision.reason == "multi-card-sharing" and "container train" in decision.message
    assert routed(pod([ctr(num=1, mem=1000)], labels=opted_out))[0] == "hami-scheduler"


def test_a_native_sidecar_may_hold_a_share_a_regular_init_container_may_not():
    sidecar = ctr("proxy", num=1, mem=1000, cores=20)
    sidecar["restartPolicy"] = "Always"
    name, decision = routed(pod([ctr(num=1, mem=2000)], init=[sidecar]))
    assert name == "hami-scheduler" and decision.reason == "routed"
    decision = review(pod([ctr(num=1)], init=[ctr("setup", num=1, cores=20)]), SETTINGS)
    assert not decision.allowed and decision.reason == "init-container-sharing"
    assert "native sidecars" in decision.message
    # restartPolicy other than Always (Never, OnFailure are not valid there, but say so) is no sidecar.
    other = ctr("setup", num=1, mem=100)
    other["restartPolicy"] = "OnFailure"
    assert review(pod([ctr(num=1)], init=[other]), SETTINGS).reason == "init-container-sharing"


def test_user_selection_annotations_are_not_forged_state():
    assert routed(pod([ctr(num=1)], annotations={DCU.use_type: "K100", keys.NODE_SCHEDULER_POLICY: "spread"}))


def test_patch_adds_scheduler_name_when_missing():
    body = pod([ctr(num=1)], scheduler=None)
    decision = review(body, SETTINGS)
    assert decision.patch == [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]


def test_settings_and_review_name_the_naming_set_explicitly():
    """No default set: a forgotten argument must fail, never silently speak the dcu set."""
    with pytest.raises(TypeError, match="'naming'"):
        Settings()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'settings'"):
        review(pod([ctr(num=1)]))  # type: ignore[call-arg]

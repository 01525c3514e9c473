"""DRA mode where the DeviceClass names the count resource as its extendedResourceName
(Kubernetes 1.37+, the extender's --dra-extended-resource): a pod asking whole cards by the
count alone keeps its resources and kube-scheduler makes its claim; shares, a whole card
written as 100 %, and pods of the other naming set are still rewritten; the quota counts the
claim kube-scheduler will make, at admission and again when that claim is created."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import jsonpatch
import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.dra.translate import extended_resource_claim
from hami_dcu.common.protocol.quota import Amount, Limit, QuotaLimits
from hami_dcu.webhook.decision import DRA, Settings, review
from tests.webhook.test_webhook_dra import FakeKube, admission, claim_review, post, slice_of

JSON = dict[str, Any]
NATIVE = Settings(mode=DRA, card_units=(120,), naming=keys.DCU_NAMING, extended_resource=True)
REWRITING = replace(NATIVE, extended_resource=False)  # below 1.37: the chart does not set the flag
DCU = keys.DCU_NAMING.resources


def pod(*containers: JSON, **spec: Any) -> JSON:
    return {"metadata": {"name": "p", "namespace": "team"}, "spec": {"containers": list(containers), **spec}}


def container(name: str = "main", restart: str | None = None, **limits: str) -> JSON:
    made: JSON = {"name": name, "image": "app", "resources": {"limits": dict(limits), "requests": dict(limits)}}
    if restart:
        made["restartPolicy"] = restart
    return made


def whole(count: str, name: str = "main", restart: str | None = None) -> JSON:
    return container(name, restart, **{"hygon.com/dcunum": count, "cpu": "1"})


def asked(claim: JSON | None) -> list[tuple[str, int]]:
    assert claim is not None
    return [(r["name"], r["exactly"]["count"]) for r in claim["devices"]["requests"]]


def test_a_whole_card_pod_keeps_its_resources_and_is_only_routed():
    original = pod(whole("2"))
    decision = review(original, NATIVE)
    assert decision.allowed and decision.reason == "extended-resource"
    assert not decision.templates
    # The one change: the scheduler, as for a rewritten pod (hami-scheduler's /prioritize packs).
    assert decision.patch == [{"op": "add", "path": "/spec/schedulerName", "value": keys.DEFAULT_SCHEDULER_NAME}]
    after = jsonpatch.apply_patch(original, decision.patch)
    assert after["spec"]["containers"] == original["spec"]["containers"]
    assert "resourceClaims" not in after["spec"]


def test_a_pod_already_routed_is_not_patched_at_all():
    decision = review(pod(whole("1"), schedulerName=keys.DEFAULT_SCHEDULER_NAME), NATIVE)
    assert decision.allowed and decision.reason == "extended-resource" and decision.patch == []


def test_another_chosen_scheduler_is_kept():
    decision = review(pod(whole("1"), schedulerName="team-scheduler"), NATIVE)
    assert decision.allowed and decision.reason == "extended-resource" and decision.patch == []


def test_the_quota_is_given_the_claim_kube_scheduler_will_make():
    # Two whole cards: one request of the class, as kube-scheduler names it (container 0, and
    # hygon.com/dcunum after cpu in the sorted requests).
    [claim] = review(pod(whole("2")), NATIVE).quota_claims
    assert claim == {"devices": {"requests": [{"name": "container-0-request-1", "exactly": {
        "deviceClassName": "dra.hygon.com", "allocationMode": "ExactCount", "count": 2}}]}}


@pytest.mark.parametrize("limits", [
    {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000"},
    {"hygon.com/dcunum": "1", "hygon.com/dcucores": "25"},
    # Whole by today's rules, but dcucores is no resource a node or a class serves: rewritten.
    {"hygon.com/dcunum": "2", "hygon.com/dcucores": "100"},
])
def test_shares_and_whole_cards_named_by_memory_or_cores_are_rewritten_as_before(limits):
    decision = review(pod(container(**limits)), NATIVE)
    assert decision.allowed and decision.reason == "claims"
    assert decision.templates and decision == review(pod(container(**limits)), REWRITING)


def test_a_pod_mixing_a_whole_card_and_a_share_is_rewritten_whole():
    decision = review(pod(whole("1", "a"), container("b", **{"hygon.com/dcunum": "1", "hygon.com/dcumem": "100"})),
                      NATIVE)
    assert decision.reason == "claims" and len(decision.quota_claims) == 2


def test_a_pod_of_the_other_naming_set_is_renamed_into_claims_as_before():
    decision = review(pod(container(**{"hygon.com/hcunum": "1"})), NATIVE)
    assert decision.reason == "claims" and any("renamed" in w for w in decision.warnings)


def test_without_the_flag_a_whole_card_pod_is_rewritten_as_before():
    decision = review(pod(whole("2")), REWRITING)
    assert decision.reason == "claims" and decision.templates
    spec = jsonpatch.apply_patch(pod(whole("2")), decision.patch)["spec"]
    assert spec["containers"][0]["resources"]["limits"] == {"cpu": "1"}


def test_the_refusals_still_apply_to_a_whole_card_pod():
    privileged = whole("1")
    privileged["securityContext"] = {"privileged": True}
    assert review(pod(privileged), NATIVE).reason == "privileged"
    forged = pod(whole("1"))
    forged["metadata"]["annotations"] = {keys.DCU_NAMING.pod_devices_allocated: "x"}
    assert not review(forged, NATIVE).allowed
    assert not review(pod(whole("1.5")), NATIVE).allowed


def test_a_whole_card_pod_with_its_own_claims_passes_too():
    decision = review(pod(whole("1"), resourceClaims=[{"name": "x", "resourceClaimName": "x"}]), NATIVE)
    assert decision.reason == "extended-resource" and len(decision.quota_claims) == 1


def test_init_containers_count_as_kube_scheduler_counts_them():
    # An init container runs before the app containers: it reuses what they hold and asks only
    # for the rest (3 - 1 = 2); a native sidecar holds its own for the pod's life.
    spec = {"initContainers": [whole("3", "init"), whole("1", "sidecar", restart="Always")],
            "containers": [whole("1", "app")]}
    claim = extended_resource_claim({"spec": spec}, DCU)
    assert asked(claim) == [("container-0-request-1", 1), ("container-1-request-1", 1), ("container-2-request-1", 1)]
    # An init container the long-lived ones cover asks for nothing of its own.
    spec["initContainers"][0] = whole("2", "init")
    assert asked(extended_resource_claim({"spec": spec}, DCU)) == [("container-1-request-1", 1),
                                                                    ("container-2-request-1", 1)]


def test_no_claim_for_a_pod_asking_no_card():
    assert extended_resource_claim(pod(container(cpu="1")), DCU) is None
    assert extended_resource_claim(pod(whole("0")), DCU) is None


# --- the quota, through the shell --------------------------------------------------------------

CARD_QUOTA = QuotaLimits(memory=Limit(70000, "team-dcu"))  # one 65520 MiB card and a bit
QUOTA = replace(NATIVE, card_units=(), quota=lambda ns: (CARD_QUOTA, Amount()) if ns == "team" else None)


def scheduler_claim(count: int) -> JSON:
    """The claim kube-scheduler creates for a whole-card pod (its PreBind), as reviewed."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"generateName": "p-extended-resources-",
                         "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u",
                                              "controller": True}]},
            "spec": {"devices": {"requests": [{"name": "container-0-request-1", "exactly": {
                "deviceClassName": "dra.hygon.com", "allocationMode": "ExactCount", "count": count}}]}}}


async def test_a_whole_card_pod_is_refused_at_admission_when_its_cards_break_the_quota(aiohttp_client):
    fake = FakeKube([slice_of(120, 120)])  # K100_AI cards of 65520 MiB
    one = await post(aiohttp_client, fake, admission(pod(whole("1"))), QUOTA)
    assert one["allowed"] is True and not fake.templates
    two = await post(aiohttp_client, fake, admission(pod(whole("2"))), QUOTA)
    assert two["allowed"] is False
    assert "requested 131040" in two["status"]["message"]


async def test_the_claim_kube_scheduler_makes_is_checked_and_then_counted_beside_shares(aiohttp_client):
    fake = FakeKube([slice_of(120, 120)])
    # kube-scheduler's claim for a one-card pod is reviewed as any claim: admitted, stamped with
    # its reservation; and a second card would not fit.
    made = await post(aiohttp_client, fake, claim_review(scheduler_claim(1)), QUOTA)
    assert made["allowed"] is True and made.get("patch")
    assert (await post(aiohttp_client, fake, claim_review(scheduler_claim(2)), QUOTA))["allowed"] is False
    # Stored, it is counted as a whole card beside a share pod: 65520 + 8000 > 70000, 65520 + 4000 fits.
    fake.claims["team"] = [{**scheduler_claim(1), "metadata": {"name": "p-extended-resources-abcde"}}]
    share = pod(container(**{"hygon.com/dcunum": "1", "hygon.com/dcumem": "8000"}))
    refused = await post(aiohttp_client, fake, admission(share), QUOTA)
    assert refused["allowed"] is False and "used 65520" in refused["status"]["message"]
    smaller = pod(container(**{"hygon.com/dcunum": "1", "hygon.com/dcumem": "4000"}))
    assert (await post(aiohttp_client, fake, admission(smaller), QUOTA))["allowed"] is True

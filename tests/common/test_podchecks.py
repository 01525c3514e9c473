"""Admission's checks, one by one, and the order and stages they run in (common/protocol/podchecks.py)."""

from __future__ import annotations

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.podchecks import (
    CHECKS,
    CheckSettings,
    Stage,
    dcu_pod,
    first_refusal,
    forged_annotations,
    init_container_sharing,
    invalid_request,
    multi_card_sharing,
    node_name_set,
    privileged,
    refusal_of,
)

DCU = keys.DCU_NAMING  # the naming set these tests speak

SETTINGS = CheckSettings(DCU.resources, "hami-scheduler")
NUM, MEM, CORES = DCU.resources.all()


def ctr(name: str = "main", restart: str | None = None, privileged_: bool | None = None, **limits: object) -> dict:
    names = {"num": NUM, "mem": MEM, "cores": CORES}
    container: dict = {"name": name, "resources": {"limits": {names.get(k, k): str(v) for k, v in limits.items()}}}
    if restart:
        container["restartPolicy"] = restart
    if privileged_ is not None:
        container["securityContext"] = {"privileged": privileged_}
    return container


def pod(*containers: dict, init: tuple[dict, ...] = (), annotations: dict | None = None, node: str = "") -> dict:
    spec: dict = {"containers": list(containers), "initContainers": list(init)}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "p", "namespace": "t", "annotations": annotations or {}}, "spec": spec}


def judged(check, body: dict) -> str | None:
    return check(dcu_pod(body, SETTINGS.resources), SETTINGS)


def test_forged_annotations_names_every_allocation_key_it_finds():
    assert judged(forged_annotations, pod(ctr(num=1), annotations={DCU.use_type: "K100"})) is None
    message = judged(forged_annotations, pod(ctr(num=1), annotations={
        keys.POD_BIND_PHASE: "allocating", keys.HCU_NAMING.pod_devices_allocated: "x"}))
    assert message is not None
    assert keys.POD_BIND_PHASE in message and keys.HCU_NAMING.pod_devices_allocated in message
    assert "hami-scheduler" in message


def test_node_name_set_says_how_to_constrain_the_node_instead():
    assert judged(node_name_set, pod(ctr(num=1))) is None
    message = judged(node_name_set, pod(ctr(num=1), node="n1"))
    assert message is not None and "n1" in message and "nodeSelector" in message


def test_a_forged_node_name_reaches_the_message_escaped():
    # Mutating admission runs before validation: spec.nodeName may be anything yet.
    message = judged(node_name_set, pod(ctr(num=1), node="n1\n\x1b]0;x\x07"))
    assert message is not None and "\n" not in message and "\x1b" not in message


def test_init_container_sharing_spares_whole_cards_and_native_sidecars():
    assert judged(init_container_sharing, pod(ctr(num=1), init=(ctr("setup", num=1),))) is None
    assert judged(init_container_sharing, pod(ctr(num=1), init=(ctr("proxy", "Always", num=1, mem=10),))) is None
    message = judged(init_container_sharing, pod(ctr(num=1), init=(ctr("setup", num=1, cores=10),)))
    assert message is not None and "init container setup" in message


def test_privileged_counts_only_containers_naming_a_dcu():
    assert judged(privileged, pod(ctr(num=1), ctr("helper", privileged_=True, cpu=1))) is None
    assert judged(privileged, pod(ctr(num=1, privileged_=False))) is None
    message = judged(privileged, pod(ctr("gpu", num=1, privileged_=True)))
    assert message is not None and "container gpu" in message
    assert judged(privileged, pod(ctr(num=1), init=(ctr("setup", num=1, privileged_=True),))) is not None


def test_invalid_request_carries_the_parser_words():
    assert judged(invalid_request, pod(ctr(num=1, mem=100))) is None
    message = judged(invalid_request, pod(ctr(num=1, cores=101)))
    assert message is not None and "0-100" in message


@pytest.mark.parametrize(("limits", "refused"), [
    ({"num": 2}, False), ({"num": 1, "mem": 10}, False), ({"num": 2, "mem": 1000}, True),
    ({"num": 2, "cores": 10}, True), ({"num": 2, "cores": 100}, False),
])
def test_multi_card_sharing(limits, refused):
    assert (judged(multi_card_sharing, pod(ctr("train", **limits))) is not None) == refused


def test_the_checks_run_in_order_and_the_first_refusal_wins():
    assert [check.name for check in CHECKS] == ["forged-annotations", "node-name-set", "init-container-sharing",
                                                "privileged", "invalid-request", "multi-card-sharing"]
    both = pod(ctr("train", privileged_=True, num=2, mem=1000))
    refusal = refusal_of(both, SETTINGS, Stage.SERVE)
    assert refusal is not None and refusal.check == "privileged"


def test_state_the_scheduler_writes_is_checked_only_at_create():
    # At /filter and Allocate these were written by hami-dcu itself (or the pod is bound).
    bound = pod(ctr(num=1, mem=100), annotations={keys.POD_BIND_PHASE: "allocating"}, node="n1")
    assert refusal_of(bound, SETTINGS, Stage.CREATE).check == "forged-annotations"
    assert refusal_of(bound, SETTINGS, Stage.PLACE) is None
    assert refusal_of(bound, SETTINGS, Stage.SERVE) is None
    shaped = pod(ctr(num=2, mem=100), node="n1")
    for stage in (Stage.PLACE, Stage.SERVE):
        assert refusal_of(shaped, SETTINGS, stage).check == "multi-card-sharing"


def test_a_pod_asking_no_dcu_is_never_refused():
    helper = ctr("helper", privileged_=True, num=0)
    assert first_refusal(dcu_pod(pod(helper, node="n1"), SETTINGS.resources), SETTINGS, Stage.CREATE) is None
    assert refusal_of(pod(ctr(cpu=1), annotations={keys.POD_BIND_PHASE: "x"}), SETTINGS, Stage.CREATE) is None


def test_the_naming_set_decides_what_a_dcu_resource_is():
    hcu = CheckSettings(keys.HCU_NAMING.resources)
    body = pod({"name": "c", "resources": {"limits": {keys.HCU_NAMING.resources.count: "2",
                                                      keys.HCU_NAMING.resources.memory: "10"}}})
    assert refusal_of(body, hcu, Stage.PLACE).check == "multi-card-sharing"
    assert refusal_of(body, SETTINGS, Stage.PLACE) is None  # not a DCU pod in the other set

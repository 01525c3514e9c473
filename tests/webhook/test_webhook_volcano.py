"""Volcano mode at admission: pods Volcano places keep their schedulerName, the deny rules
still apply, and hcumem must be MiB (issue 24)."""

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.webhook.decision import Settings, review

DCU = keys.DCU_NAMING  # the naming set these tests speak

VOLCANO = Settings(naming=DCU, volcano_scheduler="volcano")


def ctr(name="c", **limits):
    mapping = {"num": DCU.resources.count, "mem": DCU.resources.memory,
               "cores": DCU.resources.cores}
    return {"name": name, "image": "x", "resources": {"limits": {mapping[k]: str(v) for k, v in limits.items()}}}


def volcano_pod(containers, **meta):
    return {"metadata": {"name": "p", "namespace": "default", **meta},
            "spec": {"schedulerName": "volcano", "containers": containers}}


def test_a_volcano_pod_keeps_its_scheduler_and_gets_no_warning_about_it():
    decision = review(volcano_pod([ctr(num=1, mem=2048, cores=50)]), VOLCANO)
    assert decision.allowed and decision.reason == "left-to-volcano"
    assert decision.patch == [] and decision.warnings == []


def test_without_volcano_mode_the_same_pod_is_kept_with_the_other_scheduler_warning():
    decision = review(volcano_pod([ctr(num=1, mem=2048, cores=50)]), Settings(naming=DCU))
    assert decision.reason == "other-scheduler"


@pytest.mark.parametrize(("containers", "meta", "reason"), [
    ([ctr(mem=2048)], {}, "invalid-request"),  # memory without a card count
    ([ctr(num=1, cores=150)], {}, "invalid-request"),
    ([ctr(num=2, mem=2048)], {}, "multi-card-sharing"),
    ([ctr(num=1)], {"annotations": {DCU.pod_devices_allocated: "x"}}, "forged-annotations"),
])
def test_a_volcano_pod_still_meets_the_deny_rules(containers, meta, reason):
    decision = review(volcano_pod(containers, **meta), VOLCANO)
    assert not decision.allowed and decision.reason == reason


@pytest.mark.parametrize(("mem", "fragment"), [
    ("2", "for 2 GiB write 2048"),
    ("64", "for 64 GiB write 65536"),
])
def test_a_gib_figure_is_refused_with_what_to_write(mem, fragment):
    body = volcano_pod([ctr(num=1, cores=50)])
    body["spec"]["containers"][0]["resources"]["limits"][DCU.resources.memory] = mem
    decision = review(body, VOLCANO)
    assert not decision.allowed and decision.reason == "volcano-memory-unit"
    assert fragment in decision.message


def test_a_byte_quantity_is_refused_by_the_usual_rules():
    body = volcano_pod([ctr(num=1)])
    body["spec"]["containers"][0]["resources"]["limits"][DCU.resources.memory] = "2Gi"
    decision = review(body, VOLCANO)
    assert not decision.allowed and decision.reason == "invalid-request"


def test_a_mib_figure_and_no_memory_at_all_are_fine():
    assert review(volcano_pod([ctr(num=1, mem=128, cores=10)]), VOLCANO).allowed
    assert review(volcano_pod([ctr(num=1)]), VOLCANO).allowed

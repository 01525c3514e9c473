"""Admission warnings for scheduling annotations HAMi would ignore or refuse."""

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.webhook.advice import scheduling_warnings
from hami_dcu.webhook.decision import Settings, review

DCU = keys.DCU_NAMING  # the naming set these tests speak
SETTINGS = Settings(naming=DCU)


def dcu_pod(annotations: dict[str, str], scheduler: str = "default-scheduler") -> dict:
    return {"metadata": {"name": "p", "namespace": "default", "annotations": annotations},
            "spec": {"schedulerName": scheduler, "containers": [
                {"name": "c", "resources": {"limits": {DCU.resources.count: "1"}}}]}}


@pytest.mark.parametrize(("annotations", "fragment"), [
    ({keys.DEVICE_SCHEDULER_POLICY: "binpack,best-fit"}, "'best-fit' unknown, value ignored"),
    ({keys.DEVICE_SCHEDULER_POLICY: "BinPack"}, "'BinPack' unknown"),
    ({keys.DEVICE_SCHEDULER_POLICY: "binpack,"}, "'' unknown"),
    ({keys.DEVICE_SCHEDULER_POLICY: "spread,topology-aware"}, "topology-aware has no effect on DCU cards"),
    ({keys.NODE_SCHEDULER_POLICY: "numa"}, "hami.io/node-scheduler-policy: 'numa' unknown"),
    ({keys.DEVICE_SCORING_WEIGHTS: "slot=1,core=1"}, "invalid, pod stays Pending: memory missing"),
])
def test_a_value_the_scheduler_would_ignore_or_refuse_is_warned_about(annotations, fragment):
    warnings = scheduling_warnings(annotations)
    assert len(warnings) == 1 and fragment in warnings[0]
    decision = review(dcu_pod(annotations), SETTINGS)
    assert decision.allowed and decision.reason == "routed" and decision.warnings == warnings
    assert review(dcu_pod(annotations, scheduler="hami-scheduler"), SETTINGS).warnings == warnings


@pytest.mark.parametrize("value", [",,", ",", " , "])
def test_hami_use_type_of_only_empty_entries_is_warned_about_as_matching_no_card(value):
    for key in (DCU.use_type, keys.HCU_NAMING.use_type):
        warnings = scheduling_warnings({key: value})
        assert len(warnings) == 1, warnings
        assert warnings[0].startswith(f"{key}: {value!r} names no card type, so no card matches")
        # Admitted (HAMi's meaning, not an error), with the warning under this cluster's key.
        decision = review(dcu_pod({key: value}), SETTINGS)
        assert decision.allowed
        assert [w for w in decision.warnings if "names no card type" in w] == [
            f"{DCU.use_type}: {value!r} names no card type, so no card matches and the pod stays Pending "
            "(remove it for any type)"]


@pytest.mark.parametrize("value", ["", "  ", "K100", "K100,,Z100"])
def test_a_use_type_naming_a_type_or_nothing_at_all_gives_no_warning(value):
    assert scheduling_warnings({DCU.use_type: value}) == []


def test_valid_values_and_absent_ones_give_no_warning():
    assert scheduling_warnings({}) == []
    assert scheduling_warnings({keys.DEVICE_SCHEDULER_POLICY: " binpack , numa , mutex ",
                                keys.NODE_SCHEDULER_POLICY: "spread",
                                keys.DEVICE_SCORING_WEIGHTS: "slot=1,core=1,memory=3"}) == []


def test_every_warning_fits_kubectls_line():
    long = "x" * 5000
    warnings = scheduling_warnings({keys.DEVICE_SCHEDULER_POLICY: ",".join([long] * 50),
                                    keys.NODE_SCHEDULER_POLICY: long, keys.DEVICE_SCORING_WEIGHTS: long})
    assert len(warnings) == 3 and all(len(w) <= 120 for w in warnings)


def test_a_pod_without_dcu_gets_no_scheduling_warning():
    pod = dcu_pod({keys.DEVICE_SCHEDULER_POLICY: "best-fit"})
    pod["spec"]["containers"][0]["resources"] = {}
    assert review(pod, SETTINGS).warnings == []

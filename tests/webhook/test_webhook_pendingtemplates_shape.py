"""Every refusal of pendingtemplates.shape_problem, word for word: the extender logs these, and a
refactor of the check must neither let a new shape through nor change what it says."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.dra.translate import MAX_SUBREQUESTS, _cores_selector
from hami_dcu.webhook.pendingtemplates import shape_problem

JSON = dict[str, Any]
PIN = _cores_selector(60)


def exact(**device: Any) -> JSON:
    base = {"deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1, **device}
    return {"spec": {"devices": {"requests": [{"name": "dcu", "exactly": base}]}}}


def alternative(units: int = 60, **device: Any) -> JSON:
    return {"name": f"cu{units}", "deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount",
            "count": 1, "selectors": _cores_selector(units), "capacity": {"requests": {MEM: "1024Mi"}}, **device}


MEM, CORES = names.CAP_MEMORY, names.CAP_CORES


def first(*alternatives: Any) -> JSON:
    return {"spec": {"devices": {"requests": [{"name": "dcu", "firstAvailable": list(alternatives)}]}}}


def without(spec: JSON, key: str) -> JSON:
    spec = copy.deepcopy(spec)
    del spec["spec"]["devices"]["requests"][0]["exactly"][key]
    return spec


UNNAMED = "an alternative is not named after the card size it pins"
CASES: list[tuple[object, str | None]] = [
    (exact(), None),
    (exact(count=3, capacity={"requests": {MEM: "1024Mi"}}), None),
    (exact(selectors=PIN, capacity={"requests": {MEM: "1024Mi", CORES: "30"}}), None),
    (first(alternative(60), alternative(120)), None),
    (first(alternative(60), {k: v for k, v in alternative(120).items() if k != "capacity"}),
     "selectors without capacity"),
    (first(alternative(60, capacity={"requests": {CORES: "6"}}), alternative(120)), None),
    ([], "the spec holds other than the claim's spec"),
    ({"spec": {}, "x": 1}, "the spec holds other than the claim's spec"),
    ({"spec": []}, "the claim's spec holds other than devices"),
    ({"spec": {"devices": {}, "x": 1}}, "the claim's spec holds other than devices"),
    ({"spec": {"devices": []}}, "devices holds other than requests"),
    ({"spec": {"devices": {"requests": [], "config": []}}}, "devices holds other than requests"),
    ({"spec": {"devices": {"requests": {}}}}, "not one device request"),
    ({"spec": {"devices": {"requests": []}}}, "not one device request"),
    ({"spec": {"devices": {"requests": ["x"]}}}, "not one device request"),
    ({"spec": {"devices": {"requests": [{}, {}]}}}, "not one device request"),
    ({"spec": {"devices": {"requests": [{"name": "gpu"}]}}}, "the request is not named dcu"),
    ({"spec": {"devices": {"requests": [{"name": "dcu"}]}}}, "the request is neither exactly nor firstAvailable"),
    ({"spec": {"devices": {"requests": [{"name": "dcu", "exactly": {}, "firstAvailable": []}]}}},
     "the request is neither exactly nor firstAvailable"),
    (first(alternative()), f"firstAvailable is not 2 to {MAX_SUBREQUESTS} alternatives"),
    (first(*[alternative()] * (MAX_SUBREQUESTS + 1)), f"firstAvailable is not 2 to {MAX_SUBREQUESTS} alternatives"),
    ({"spec": {"devices": {"requests": [{"name": "dcu", "firstAvailable": {}}]}}},
     f"firstAvailable is not 2 to {MAX_SUBREQUESTS} alternatives"),
    (first(alternative(), "x"), "an alternative is not an object"),
    (first(alternative(), {**alternative(), "name": "cu120"}), UNNAMED),
    (first(alternative(), {**alternative(), "selectors": []}), UNNAMED),
    (first(alternative(), {k: v for k, v in alternative().items() if k != "selectors"}),
     UNNAMED),
    (first(alternative(), alternative(120, count=0)), "its count is not a positive number"),
    (first(alternative(), alternative(120, adminAccess=True)), "a device request holds adminAccess"),
    ({"spec": {"devices": {"requests": [{"name": "dcu", "exactly": "x"}]}}}, "a device request is not an object"),
    (exact(adminAccess=True, config=1), "a device request holds adminAccess, config"),
    (exact(deviceClassName="gpu.nvidia.com"), f"not an ExactCount request of the DeviceClass {names.DEVICE_CLASS}"),
    (without(exact(), "deviceClassName"), f"not an ExactCount request of the DeviceClass {names.DEVICE_CLASS}"),
    (exact(allocationMode="All"), f"not an ExactCount request of the DeviceClass {names.DEVICE_CLASS}"),
    (without(exact(), "count"), "its count is not a positive number"),
    (exact(count=True), "its count is not a positive number"),
    (exact(count="1"), "its count is not a positive number"),
    (exact(count=0), "its count is not a positive number"),
    (exact(count=2**31), "its count is not a positive number"),
    (exact(count=2**31 - 1), None),
    (exact(selectors=[{"cel": {"expression": "true"}}]), "its selectors are not a card size"),
    (exact(selectors=None), "its selectors are not a card size"),
    (exact(selectors=PIN), "selectors without capacity"),
    (exact(capacity=[]), "its capacity holds other than requests"),
    (exact(capacity={"requests": {}, "x": 1}), "its capacity holds other than requests"),
    (exact(capacity={"requests": []}), f"its capacity asks other than {CORES} and {MEM}"),
    (exact(capacity={"requests": {}}), f"its capacity asks other than {CORES} and {MEM}"),
    (exact(capacity={"requests": {"x": "1"}}), f"its capacity asks other than {CORES} and {MEM}"),
    (exact(capacity={"requests": {MEM: 1024}}), f"its {MEM} is not a number of Mi"),
    (exact(capacity={"requests": {MEM: "1Gi"}}), f"its {MEM} is not a number of Mi"),
    (exact(capacity={"requests": {MEM: "01Mi"}}), f"its {MEM} is not a number of Mi"),
    (exact(capacity={"requests": {MEM: None}}), None),
    (exact(selectors=PIN, capacity={"requests": {CORES: 6}}), f"its {CORES} is not a number of compute units"),
    (exact(selectors=PIN, capacity={"requests": {CORES: "0"}}), f"its {CORES} is not a number of compute units"),
    (exact(capacity={"requests": {CORES: "6"}}), f"it asks {CORES} without pinning a card size"),
    (exact(capacity={"requests": {MEM: "1x", CORES: "x"}}), f"its {MEM} is not a number of Mi"),
]


@pytest.mark.parametrize(("spec", "problem"), CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_each_refusal_of_a_template_shape_is_said_word_for_word(spec: object, problem: str | None) -> None:
    assert shape_problem(spec) == problem

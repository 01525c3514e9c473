"""The extender answers what a verb raised by common/protocol/errors.py's rule: a bug is a 500 with a
short message, its traceback logged naming the pod and counted; an expected failure is the
protocol's answer (200, the message in Error), one log line, uncounted; a malformed pod is
still the 200 with the reason it has always had."""

from __future__ import annotations

import logging

import pytest
from scheduler_helpers import bind_args, dcu_pod, dcu_settings, filter_args

from hami_dcu.common.io.kube import UnreachableError
from hami_dcu.common.protocol.codec import CodecError
from hami_dcu.scheduler import filtersteps
from hami_dcu.scheduler import service as service_module
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.service import SchedulerService

BUG = "internal error in the scheduler (ZeroDivisionError); its log has the details"


def divide_by_zero(*_args: object) -> object:
    return 1 / 0


@pytest.fixture
def alone() -> SchedulerService:
    return SchedulerService(None, dcu_settings())  # no API server: every verb answers from the (empty) cache


@pytest.fixture
async def client(alone, aiohttp_client):
    return await aiohttp_client(build_app(alone, manage_lifecycle=False))


def bugs(service: SchedulerService) -> float:
    return service.metrics.registry.get_sample_value("hami_dcu_internal_errors_total", {"component": "scheduler"})


def tracebacks(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None]


@pytest.mark.parametrize("verb", ["filter", "preempt"])
async def test_a_bug_in_placing_a_pod_is_a_500_logged_naming_the_pod_and_counted(alone, client, monkeypatch, caplog,
                                                                                 verb):
    # /filter plans the pod in its steps (filtersteps.py), /preempt in the service
    monkeypatch.setattr(filtersteps if verb == "filter" else service_module, "plan_pod", divide_by_zero)
    assert bugs(alone) == 0
    body = filter_args(dcu_pod("p"), ["n1"]) if verb == "filter" else {"Pod": dcu_pod("p")}
    response = await client.post(f"/{verb}", json=body)
    assert response.status == 500
    assert (await response.json())["Error"] == BUG
    [record] = tracebacks(caplog)
    assert record.exc_info[0] is ZeroDivisionError and f"/{verb} of pod default/p" in record.getMessage()
    assert bugs(alone) == 1


async def test_a_bug_in_prioritizing_is_a_500_counted(alone, client, monkeypatch, caplog):
    monkeypatch.setattr(service_module, "pack", divide_by_zero)
    response = await client.post("/prioritize", json=filter_args(dcu_pod("p"), ["n1"]))
    assert response.status == 500 and (await response.json())["Error"] == BUG
    assert len(tracebacks(caplog)) == 1 and bugs(alone) == 1


async def test_a_bug_in_binding_is_a_500_logged_naming_pod_and_node_and_counted(alone, client, monkeypatch, caplog):
    async def broken(_args: object) -> object:
        return 1 / 0

    monkeypatch.setattr(alone, "bind_pod", broken)
    response = await client.post("/bind", json=bind_args(dcu_pod("p"), "n1"))
    assert response.status == 500 and (await response.json())["Error"] == BUG
    [record] = tracebacks(caplog)
    assert "/bind of pod default/p to node n1" in record.getMessage()
    assert bugs(alone) == 1


async def test_an_expected_failure_is_the_protocols_error_without_a_traceback(alone, client, monkeypatch, caplog):
    def unreadable(*_args: object) -> object:
        raise CodecError("hami.io/x", "1,2", "not a number")

    monkeypatch.setattr(filtersteps, "plan_pod", unreadable)  # /filter plans the pod in its steps
    response = await client.post("/filter", json=filter_args(dcu_pod("p"), ["n1"]))
    assert response.status == 200
    error = (await response.json())["Error"]
    assert "not a number" in error and "internal" not in error

    async def unreachable(_args: object) -> object:
        raise UnreachableError("connection refused")

    monkeypatch.setattr(alone, "bind_pod", unreachable)
    response = await client.post("/bind", json=bind_args(dcu_pod("p"), "n1"))
    assert response.status == 200 and (await response.json())["Error"] == "connection refused"
    response = await client.post("/preempt", json={"Pod": dcu_pod("p")})  # plan_pod raises CodecError here too
    assert response.status == 200 and (await response.json()) == {"NodeNameToMetaVictims": {}}
    assert not tracebacks(caplog) and bugs(alone) == 0


async def test_a_malformed_pod_is_still_answered_200_with_its_reason(alone, client, caplog):
    pod = dcu_pod("p")
    pod["spec"]["containers"] = "abc"
    response = await client.post("/filter", json=filter_args(pod, ["n1"]))
    assert response.status == 200
    assert (await response.json())["Error"] == "ExtenderArgs.Pod: spec.containers must be a list, got a string"
    assert not tracebacks(caplog) and bugs(alone) == 0

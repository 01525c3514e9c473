"""The webhook answers what it did not decide by common/protocol/errors.py's rule: a bug is a 500 with a
short message, its traceback logged naming the pod, and counted; an expected failure is its
own status and message, one log line, uncounted; a malformed pod is still a 400 that names
the field, never mistaken for a bug nor a bug for it."""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry
from test_webhook_server import review

from hami_dcu.common.io.kube import UnreachableError
from hami_dcu.common.protocol import keys
from hami_dcu.webhook import server
from hami_dcu.webhook.decision import DRA, Settings

INTERNAL = "hami_dcu_internal_errors_total"


def bugs(registry: CollectorRegistry) -> float:
    return registry.get_sample_value(INTERNAL, {"component": "webhook"}) or 0.0


def tracebacks(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None]


def rejected(registry: CollectorRegistry, reason: str) -> float:
    return registry.get_sample_value("hami_dcu_webhook_reviews_total", {"decision": "rejected", "reason": reason}) \
        or 0.0


async def test_a_bug_in_the_decision_is_a_500_logged_with_its_traceback_and_counted(aiohttp_client, monkeypatch,
                                                                                    caplog):
    def broken(pod, settings):
        return 1 / 0

    monkeypatch.setattr(server, "review", broken)
    registry = CollectorRegistry()
    client = await aiohttp_client(server.build_app(Settings(naming=keys.DCU_NAMING), registry))
    assert bugs(registry) == 0  # served before the first bug, so a rate() sees it
    response = await client.post("/webhook", json=review())
    assert response.status == 500
    error = (await response.json())["error"]
    assert error == "internal error in the webhook (ZeroDivisionError); its log has the details"
    [record] = tracebacks(caplog)
    assert record.exc_info[0] is ZeroDivisionError and "Pod default/p" in record.getMessage()
    assert bugs(registry) == 1 and rejected(registry, "internal-error") == 1
    # A TypeError is a bug too: it is no longer passed off as a malformed pod.
    monkeypatch.setattr(server, "review", lambda pod, settings: pod["spec"] + 1)
    response = await client.post("/webhook", json=review())
    assert response.status == 500 and "malformed" not in (await response.json())["error"]
    assert bugs(registry) == 2


class UnreachableCards:
    """The DRA view of card sizes, with the API server gone."""

    async def cards(self) -> object:
        raise UnreachableError("connection refused")


async def test_an_expected_failure_is_its_own_status_without_a_traceback(aiohttp_client, caplog):
    registry = CollectorRegistry()
    app = server.build_app(Settings(naming=keys.DCU_NAMING, mode=DRA), registry, dra=UnreachableCards())  # type: ignore[arg-type]
    client = await aiohttp_client(app)
    response = await client.post("/webhook", json=review())
    assert response.status == 503
    assert (await response.json())["error"] == "connection refused"
    assert not tracebacks(caplog)
    assert any("connection refused" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert bugs(registry) == 0 and rejected(registry, "failed") == 1


async def test_a_malformed_pod_is_still_a_400_naming_the_field(aiohttp_client, caplog):
    registry = CollectorRegistry()
    client = await aiohttp_client(server.build_app(Settings(naming=keys.DCU_NAMING), registry))
    body = review()
    body["request"]["object"]["spec"]["containers"] = "abc"
    response = await client.post("/webhook", json=body)
    assert response.status == 400
    assert (await response.json())["error"] == "pod object is malformed: spec.containers must be a list, got a string"
    assert not tracebacks(caplog)
    assert bugs(registry) == 0 and rejected(registry, "bad-request") == 1

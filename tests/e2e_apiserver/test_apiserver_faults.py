"""Fault injection: configured failures happen, are counted, and never half-apply a write."""

import json
import time

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from hami_dcu.cli.localcluster.apiserver import Faults


def node(name):
    return {"metadata": {"name": name}}


def outcomes(core, count, prefix):
    result = []
    for i in range(count):
        try:
            core.create_node(node(f"{prefix}{i}"))
            result.append("ok")
        except ApiException as exc:
            result.append(exc.status)
    return result


def test_off_by_default(api_server, core):
    assert not api_server.faults.active
    assert outcomes(core, 5, "n") == ["ok"] * 5
    assert api_server.faults.total == 0


def test_every_write_failing_with_500_stores_nothing(api_server, core):
    api_server.faults.configure(error_rate=1.0, match=lambda method, path: method == "POST")
    for i in range(3):
        with pytest.raises(ApiException) as info:
            core.create_node(node(f"n{i}"))
        assert info.value.status == 500
        assert json.loads(info.value.body)["reason"] == "InternalError"
    assert core.list_node().items == []  # GETs are not matched: they still work
    assert api_server.faults.injected["500"] == 3
    assert api_server.store.list("nodes")[0] == []


def test_conflicts_hit_writes_only_and_failed_writes_are_not_stored(api_server, core):
    core.create_node(node("base"))
    api_server.faults.configure(conflict_rate=0.5, seed=7)
    results = outcomes(core, 30, "q")
    assert 0 < results.count(409) < 30 and set(results) <= {"ok", 409}
    assert api_server.faults.injected["409"] == results.count(409)
    stored = {n["metadata"]["name"] for n in api_server.store.list("nodes")[0]}
    assert stored == {"base"} | {f"q{i}" for i, r in enumerate(results) if r == "ok"}
    for _ in range(10):  # reads are never answered 409
        assert core.read_node("base").metadata.name == "base"
    with pytest.raises(ApiException) as info:
        while True:
            core.patch_node("base", {"metadata": {"labels": {"a": "b"}}})
    assert json.loads(info.value.body)["message"].startswith('Operation cannot be fulfilled on nodes "base"')


def test_same_seed_same_faults(api_server, core):
    api_server.faults.configure(error_rate=0.3, seed=42)
    first = outcomes(core, 20, "a")
    api_server.faults.configure(seed=42)
    second = outcomes(core, 20, "b")
    assert first == second and 500 in first


def test_delay_and_path_predicate(api_server, core):
    api_server.faults.configure(delay_rate=1.0, delay_ms=150, match=lambda method, path: path.endswith("/slow"))
    started = time.monotonic()
    core.create_node(node("fast"))
    fast = time.monotonic() - started
    started = time.monotonic()
    core.create_node(node("slow"))
    core.read_node("slow")
    slow = time.monotonic() - started
    assert fast < 0.1 and slow >= 0.15
    assert api_server.faults.injected == {"delay": 1}
    api_server.faults.clear()
    assert not api_server.faults.active and api_server.faults.total == 1


def test_client_timeout_on_a_delayed_request(api_server, core):
    api_server.faults.configure(delay_rate=1.0, delay_seconds=0.8)
    with pytest.raises(urllib3.exceptions.HTTPError):  # a read timeout, possibly after urllib3's retries
        core.list_node(_request_timeout=0.2)
    assert api_server.faults.injected["delay"] >= 1


def test_faults_unit():
    faults = Faults(seed=1)
    assert faults.decide("POST", "/x") == (None, 0.0)
    faults.configure(conflict_rate=1.0)
    assert faults.decide("GET", "/x") == (None, 0.0)
    assert faults.decide("DELETE", "/x") == ("409", 0.0)
    with pytest.raises(AttributeError):
        faults.configure(bogus=1)
    faults.reset_counts()
    assert faults.total == 0

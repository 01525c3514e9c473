"""When a node lock has outlived its purpose: one pure judgment for the extender and the plugin."""

from datetime import UTC, datetime, timedelta

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol import lockpurpose as purpose
from hami_dcu.common.protocol.codec import LockValue

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
TIMEOUT = timedelta(seconds=300)
WINDOW = timedelta(seconds=30)


def pod(node=None, phase="Pending", bind_phase=None):
    annotations = {keys.POD_BIND_PHASE: bind_phase} if bind_phase else {}
    return {"metadata": {"name": "p", "namespace": "ns", "annotations": annotations},
            "spec": {"nodeName": node} if node else {}, "status": {"phase": phase}}


def lock(age=1.0, name="p"):
    return LockValue(since=NOW - timedelta(seconds=age), namespace="ns" if name else None, name=name)


def judge(value, holder):
    return purpose.release_reason(value, holder, "n1", NOW, TIMEOUT, WINDOW)


@pytest.mark.parametrize(("holder", "reason"), [
    (pod("n1", "Running", keys.BIND_PHASE_ALLOCATING), purpose.HOLDER_RUNNING),
    (pod("n1", "Pending", keys.BIND_PHASE_SUCCESS), purpose.ALLOCATION_DONE),
    (pod("n1", "Pending", keys.BIND_PHASE_FAILED), purpose.ALLOCATION_FAILED),
    (pod("n2", "Pending", keys.BIND_PHASE_ALLOCATING), purpose.BOUND_ELSEWHERE),
    (pod("n1", "Succeeded"), purpose.HOLDER_FINISHED),
    (pod(None, "Failed"), purpose.HOLDER_FINISHED),
])
def test_a_holder_that_needs_no_allocate_here_frees_the_lock(holder, reason):
    assert purpose.state_reason(holder, "n1") == reason
    assert judge(lock(), holder) == reason


@pytest.mark.parametrize("holder", [
    pod("n1", "Pending", keys.BIND_PHASE_ALLOCATING),  # bound, waiting for the kubelet's Allocate
    pod(None, "Pending"),  # between its lock and its Binding
    pod(None, "Pending", keys.BIND_PHASE_FAILED),  # a stale phase on an unbound pod proves nothing
])
def test_a_holder_that_may_still_need_the_lock_keeps_it(holder):
    assert purpose.state_reason(holder, "n1") is None
    assert judge(lock(), holder) is None


def test_an_unbound_holder_keeps_the_lock_only_for_the_bind_window():
    assert judge(lock(age=29), pod()) is None
    assert judge(lock(age=31), pod()) == purpose.HOLDER_UNBOUND
    # a bound pod waiting for its Allocate is not an orphan, however long the kubelet takes
    assert judge(lock(age=200), pod("n1", bind_phase=keys.BIND_PHASE_ALLOCATING)) is None


def test_gone_expired_malformed_and_legacy_locks():
    assert judge(lock(), None) == purpose.HOLDER_GONE
    assert judge(lock(age=301), pod("n1", bind_phase=keys.BIND_PHASE_ALLOCATING)) == purpose.EXPIRED
    assert judge(None, None) == purpose.MALFORMED
    assert judge(lock(name=None), None) is None  # names nobody: only expiry frees it
    assert judge(lock(age=301, name=None), None) == purpose.EXPIRED

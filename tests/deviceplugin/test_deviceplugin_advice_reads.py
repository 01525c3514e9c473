"""Allocate takes GetPreferredAllocation's reads when they can only describe the same admission
(deviceplugin/advicereads.py): one API round trip and two requests less per pod; otherwise it
reads as before."""

from __future__ import annotations

import time

import pytest
from dp_helpers import dev
from test_deviceplugin_allocate_path import OverlapKube

from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin import advicereads
from hami_dcu.deviceplugin.advicereads import AdviceReads, reusable
from hami_dcu.deviceplugin.core import AllocateFailed

AVAILABLE = ["DCU-S1-fake-0", "DCU-S1-fake-1", "DCU-S2-fake-0"]
READS = AdviceReads(taken=100.0, generation=3, node={}, pending=[], advice=("DCU-S2-fake-0",))


@pytest.mark.parametrize(("requests", "generation", "now", "expected"), [
    ([["DCU-S2-fake-0"]], 3, 100.2, True),
    ([["DCU-S1-fake-0"]], 3, 100.2, False),  # not the slots advised: another admission's call
    ([["DCU-S2-fake-0"], ["DCU-S2-fake-0"]], 3, 100.2, False),  # two containers: not the one asked about
    ([["DCU-S2-fake-0"]], 4, 100.2, False),  # an Allocate, release or reconcile since
    ([["DCU-S2-fake-0"]], 3, 100.0 + advicereads.MAX_AGE + 0.01, False),  # too old
    ([["DCU-S2-fake-0"]], 3, 99.0, False),  # a clock that went back proves nothing
])
def test_reads_are_reused_only_for_the_call_that_followed_the_advice(requests, generation, now, expected):
    assert reusable(READS, requests, generation, now) is expected


def first_calls(counting: OverlapKube, n: int = 2, timeout: float = 5.0) -> list[str]:
    """The first `n` API calls recorded. An Allocate refused from the node alone answers before
    its pod list (read on the plugin's I/O pool beside the node read) has reached the server:
    wait for it rather than race it."""
    deadline = time.monotonic() + timeout
    while len(counting.calls) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    return list(counting.calls[:n])


def test_no_reads_or_no_advice_is_never_reused():
    assert not reusable(None, [["DCU-S2-fake-0"]], 3, 100.0)
    assert not reusable(AdviceReads(100.0, 3, {}, [], ()), [[]], 3, 100.0)


def test_the_slots_order_does_not_matter():
    two = AdviceReads(100.0, 0, {}, [], ("DCU-S2-fake-0", "DCU-S1-fake-0"))
    assert reusable(two, [["DCU-S1-fake-0", "DCU-S2-fake-0"]], 0, 100.0)


@pytest.fixture
def counted(dcu_node):
    counting = OverlapKube(dcu_node.kube)
    dcu_node.kube = counting
    return dcu_node, counting


def test_an_allocate_that_follows_the_advice_reads_nothing_again(counted):
    node, counting = counted
    core = node.core()
    node.bind("p", [("c", [dev("S2", 1000, 25)])])
    counting.calls.clear()
    advice = core.preferred(AVAILABLE, [], 1)
    assert advice == ["DCU-S2-fake-0"] and counting.calls == ["GET", "GET"]
    counting.calls.clear()
    core.allocate([advice])
    assert core.idle(5)
    assert counting.calls == ["PATCH", "PATCH"]  # the pod's outcome and the lock release, no read
    assert node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert node.lock_value() is None


def test_an_allocate_for_other_slots_reads_again(counted):
    node, counting = counted
    core = node.core()
    node.bind("p", [("c", [dev("S2", 1000, 25)])])
    core.preferred(AVAILABLE, [], 1)
    counting.calls.clear()
    core.allocate([["DCU-S1-fake-0"]])  # the kubelet did not follow the advice
    assert counting.calls[:2] == ["GET", "GET"]
    assert node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS


def test_old_advice_reads_are_read_again(counted, monkeypatch):
    node, counting = counted
    core = node.core()
    node.bind("p", [("c", [dev("S2", 1000, 25)])])
    monkeypatch.setattr(advicereads, "MAX_AGE", 0.0)
    advice = core.preferred(AVAILABLE, [], 1)
    counting.calls.clear()
    core.allocate([advice])
    assert counting.calls[:2] == ["GET", "GET"]


def test_advice_read_before_a_reconcile_is_not_reused(counted):
    node, counting = counted
    core = node.core()
    node.bind("p", [("c", [dev("S2", 1000, 25)])])
    advice = core.preferred(AVAILABLE, [], 1)
    core.reconcile()  # may have released the lock the reads saw
    counting.calls.clear()
    core.allocate([advice])
    assert counting.calls[:2] == ["GET", "GET"]


def test_advice_is_used_once_a_second_allocate_reads_for_itself(counted):
    """After the first pod's Allocate released the lock and the second pod took it, an
    Allocate naming the same slots (no advice asked in between) reads and serves the second."""
    node, counting = counted
    core = node.core()
    node.bind("first", [("c", [dev("S2", 1000, 25)])])
    advice = core.preferred(AVAILABLE, [], 1)
    core.allocate([advice])
    assert node.lock_value() is None
    node.bind("second", [("c", [dev("S2", 1000, 25)])])
    counting.calls.clear()
    core.allocate([advice])
    assert counting.calls[:2] == ["GET", "GET"]
    assert node.annotation("second", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS


def test_advice_without_the_locks_pod_pending_here_keeps_no_reads(counted):
    node, counting = counted
    core = node.core()
    NodeLock(node.kube).take("n1", "default", "gone")  # names a pod that does not exist
    assert core.preferred(AVAILABLE, [], 1) == ["DCU-S1-fake-0"]  # the kubelet's own order
    counting.calls.clear()
    with pytest.raises(AllocateFailed):  # the lock's pod is not here: refused, after reading
        core.allocate([["DCU-S1-fake-0"]])
    assert first_calls(counting) == ["GET", "GET"]


def test_advice_read_while_an_allocate_was_under_way_is_not_reused(counted, monkeypatch):
    """GetPreferredAllocation runs outside the plugin's lock: reads it makes while an Allocate is
    under way may show that Allocate's pod and lock before their outcome and release."""
    node, counting = counted
    core = node.core()
    node.bind("first", [("c", [dev("S2", 1000, 25)])])
    during: list[list[str]] = []
    original = core._refuse_if_ambiguous

    def check_and_advise(*args, **kwargs):
        during.append(core.preferred(AVAILABLE, [], 1))  # the advice, between the Allocate's reads and writes
        return original(*args, **kwargs)

    monkeypatch.setattr(core, "_refuse_if_ambiguous", check_and_advise)
    core.allocate([["DCU-S2-fake-0"]])
    monkeypatch.undo()
    assert during == [["DCU-S2-fake-0"]]  # it saw the first pod's lock
    assert node.lock_value() is None
    counting.calls.clear()
    with pytest.raises(AllocateFailed):  # no pod holds the lock: refused, after reading
        core.allocate([during[0]])
    assert first_calls(counting) == ["GET", "GET"]
    assert node.annotation("first", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS

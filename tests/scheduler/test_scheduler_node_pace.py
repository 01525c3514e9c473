"""Each node's bind queue follows its own pace (scheduler/nodepace.py; issue 40, item 5): a node
whose lock handoffs take 0.3 s may queue what it serves within half of --lock-wait, one that
slowed down fewer, and a node nobody has measured keeps binpack's choice."""

from __future__ import annotations

import argparse

import pytest

from hami_dcu.scheduler.command import _bind_queue
from hami_dcu.scheduler.nodepace import NodePace


def queued_binds(pace: NodePace, node: str, start: float, handoff: float, count: int) -> float:
    """`count` binds taking `node`'s lock one after the other, each having waited for the one
    before it, `handoff` seconds apart. The time of the last take."""
    at = start
    pace.took(node, at, waited=False)  # the first found the node free
    for _ in range(count - 1):
        at += handoff
        pace.took(node, at, waited=True)
    return at


def test_a_node_nobody_has_measured_has_no_limit():
    pace = NodePace(budget=10.0)
    assert pace.limit("n", 0.0) == 0 and pace.handoff("n", 0.0) is None


def test_the_limit_is_what_the_node_serves_within_the_budget():
    pace = NodePace(budget=10.0)
    now = queued_binds(pace, "fast", 0.0, 0.3, 5)
    assert pace.handoff("fast", now) == pytest.approx(0.3)
    assert pace.limit("fast", now) == 33


def test_a_take_after_no_wait_is_not_a_handoff():
    """A bind that found the node free says nothing about its pace: the time since the last
    take includes the node's idle time."""
    pace = NodePace(budget=10.0)
    pace.took("n", 0.0, waited=False)
    pace.took("n", 30.0, waited=False)
    assert pace.handoff("n", 30.0) is None and pace.limit("n", 30.0) == 0


def test_a_node_slowing_down_gets_a_smaller_limit_within_a_few_handoffs():
    pace = NodePace(budget=10.0)
    now = queued_binds(pace, "n", 0.0, 0.3, 5)
    for _ in range(6):  # the machine gets busy: 1.3 s per handoff
        now += 1.3
        pace.took("n", now, waited=True)
    assert 1.0 < pace.handoff("n", now) <= 1.3
    assert 7 <= pace.limit("n", now) <= 10


def test_a_node_not_measured_lately_takes_every_nodes_pace():
    pace = NodePace(budget=10.0, window=60.0)
    queued_binds(pace, "old", 0.0, 0.2, 3)
    now = queued_binds(pace, "busy", 100.0, 2.0, 3)
    assert pace.handoff("fresh", now) == pytest.approx(pace.handoff("busy", now))  # every node's mean, lately
    assert pace.limit("old", now) == 5  # its own 0.2 s is past the window: the mean of lately
    assert pace.limit("old", now + 120.0) == 0  # nothing measured lately at all: no limit


def test_a_slow_node_still_takes_one_bind():
    pace = NodePace(budget=10.0)
    now = queued_binds(pace, "n", 0.0, 25.0, 2)
    assert pace.limit("n", now) == 1


def test_no_budget_means_no_limit():
    pace = NodePace(budget=0.0)
    now = queued_binds(pace, "n", 0.0, 0.3, 5)
    assert pace.limit("n", now) == 0


def test_nodes_not_binding_lately_are_forgotten():
    pace = NodePace(budget=10.0, window=60.0)
    for i in range(100):
        queued_binds(pace, f"n{i}", 0.0, 0.3, 2)
    pace.took("later", 200.0, waited=False)
    assert set(pace._took) == {"later"} and not pace._nodes


def test_the_flag_reads_auto_a_number_or_never():
    assert _bind_queue("auto") is None
    assert _bind_queue("0") == 0 and _bind_queue("8") == 8
    for bad in ("-1", "many", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="expected auto"):
            _bind_queue(bad)

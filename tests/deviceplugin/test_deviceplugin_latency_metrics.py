"""bound-to-allocated in device-plugin mode: observed once per pod, when Allocate answers for
its last container, from the bind time hami-scheduler wrote; a refused Allocate counts nothing."""

from datetime import UTC, datetime

import pytest
from dp_helpers import dev

from hami_dcu.deviceplugin.core import AllocateFailed

BIND_TIME = 1754532001  # what the fixture's Binding writes into hami.io/bind-time
LABELS = {"node": "n1", "mode": "devicePlugin"}


def sample(core, suffix):
    return core.metrics.registry.get_sample_value(f"hami_dcu_pod_bound_to_allocated_seconds_{suffix}", LABELS) or 0.0


def test_observed_when_the_last_container_is_served(dcu_node):
    core = dcu_node.core(wall_clock=lambda: datetime.fromtimestamp(BIND_TIME + 7.25, UTC))
    dcu_node.bind("seq", [("init", [dev("S1", 65520, 100)]), ("app", [dev("S2", 500, 5)])], init=1)
    core.allocate([["DCU-S1-fake-0"]])
    assert sample(core, "count") == 0  # one container still to come: its cards are not all out yet
    core.allocate([["DCU-S2-fake-0"]])
    assert sample(core, "count") == 1
    assert sample(core, "sum") == 7.25
    assert core.metrics.registry.get_sample_value("hami_dcu_pod_bound_to_allocated_seconds_bucket",
                                                  {**LABELS, "le": "5.0"}) == 0
    assert core.metrics.registry.get_sample_value("hami_dcu_pod_bound_to_allocated_seconds_bucket",
                                                  {**LABELS, "le": "10.0"}) == 1


def test_a_refused_allocate_counts_nothing(dcu_node):
    core = dcu_node.core(wall_clock=lambda: datetime.fromtimestamp(BIND_TIME + 3, UTC))
    dcu_node.bind("p", [("c", [dev("S9", 1000, 10)])])
    with pytest.raises(AllocateFailed):
        core.allocate([["DCU-S1-fake-0"]])
    assert sample(core, "count") == 0


def test_a_clock_behind_the_bind_time_counts_zero_not_negative(dcu_node):
    core = dcu_node.core(wall_clock=lambda: datetime.fromtimestamp(BIND_TIME - 2, UTC))
    dcu_node.bind("p", [("c", [dev("S1", 1000, 10)])])
    core.allocate([["DCU-S1-fake-0"]])
    assert sample(core, "count") == 1
    assert sample(core, "sum") == 0

"""The node-side simulator in several processes (e2e/realcluster/simshards.py): how many shards
a node count gets, how the fake nodes are dealt to them, and the shards' /metrics summed into
the one exposition bench/scale.py reads."""

from __future__ import annotations

import os

import pytest
from prometheus_client import generate_latest

from e2e.realcluster import scalestats as st
from e2e.realcluster.kwokscale import fake_node_names
from e2e.realcluster.nodesim import SimMetrics
from e2e.realcluster.simshards import (
    MOST_SHARDS,
    NODES_PER_SHARD,
    merge_expositions,
    shard_count,
    shard_process_name,
    shard_workers,
    split_nodes,
)


@pytest.mark.parametrize(("nodes", "shards"), [
    (0, 1), (1, 1), (300, 1), (NODES_PER_SHARD, 1), (NODES_PER_SHARD + 1, 2), (3000, 2), (5000, 4),
    (100_000, 4),
])
def test_the_shard_count_grows_with_the_nodes_up_to_the_most(nodes: int, shards: int) -> None:
    assert shard_count(nodes, most=4) == shards


def test_by_default_at_most_half_the_cores_simulate():
    assert 1 <= MOST_SHARDS <= max(1, (os.cpu_count() or 2) // 2)
    assert shard_count(100_000) == MOST_SHARDS


@pytest.mark.parametrize(("nodes", "forced", "shards"), [(300, 2, 2), (5000, 1, 1), (5000, 6, 6), (3, 8, 3)])
def test_a_forced_shard_count_wins_but_never_exceeds_the_nodes(nodes: int, forced: int, shards: int) -> None:
    assert shard_count(nodes, forced) == shards


@pytest.mark.parametrize(("nodes", "shards"), [(300, 2), (5000, 4), (7, 3), (1, 1), (10, 4)])
def test_every_node_is_in_exactly_one_shard_and_the_shards_are_balanced(nodes: int, shards: int) -> None:
    names = fake_node_names(nodes)
    groups = split_nodes(reversed(names), shards)  # the order given does not matter
    assert len(groups) == shards
    dealt = [name for group in groups for name in group]
    assert sorted(dealt) == names and len(set(dealt)) == len(dealt)
    sizes = [len(group) for group in groups]
    assert max(sizes) - min(sizes) <= 1


def test_neighbouring_nodes_go_to_different_shards() -> None:
    # Packing fills nodes close in name first: round-robin spreads their Allocates.
    groups = split_nodes(fake_node_names(8), 4)
    assert groups[0] == ["kwok-00000", "kwok-00004"]
    assert groups[1] == ["kwok-00001", "kwok-00005"]


@pytest.mark.parametrize(("workers", "shards", "each"), [(32, 1, 32), (32, 4, 8), (32, 3, 11), (1, 4, 1)])
def test_the_allocate_workers_are_shared_out_not_multiplied(workers: int, shards: int, each: int) -> None:
    assert shard_workers(workers, shards) == each


def test_one_shard_keeps_the_process_name_it_always_had() -> None:
    assert shard_process_name(0, 1) == "nodesim"
    assert [shard_process_name(i, 3) for i in range(3)] == ["nodesim-0", "nodesim-1", "nodesim-2"]


FIRST = """\
# HELP sim_pods_total DCU pods admitted, by result
# TYPE sim_pods_total counter
sim_pods_total{result="allocated"} 5.0
sim_pods_total{result="failed"} 1.0
# HELP sim_pods_created DCU pods admitted, by result
# TYPE sim_pods_created gauge
sim_pods_created{result="allocated"} 1.7e+09
sim_pods_created{result="failed"} 1.7e+09
# HELP sim_reports_total Reports written
# TYPE sim_reports_total counter
sim_reports_total 100.0
# HELP sim_delay_seconds Report delay
# TYPE sim_delay_seconds histogram
sim_delay_seconds_bucket{le="0.1"} 2.0
sim_delay_seconds_bucket{le="1.0"} 3.0
sim_delay_seconds_bucket{le="+Inf"} 4.0
sim_delay_seconds_count 4.0
sim_delay_seconds_sum 2.5
# HELP sim_vdevs Live vDCUs on this node
# TYPE sim_vdevs gauge
sim_vdevs{node="kwok-00000"} 3.0
"""

SECOND = """\
# HELP sim_pods_total DCU pods admitted, by result
# TYPE sim_pods_total counter
sim_pods_total{result="allocated"} 7.0
# HELP sim_pods_created DCU pods admitted, by result
# TYPE sim_pods_created gauge
sim_pods_created{result="allocated"} 1.6e+09
# HELP sim_reports_total Reports written
# TYPE sim_reports_total counter
sim_reports_total 50.0
# HELP sim_delay_seconds Report delay
# TYPE sim_delay_seconds histogram
sim_delay_seconds_bucket{le="0.1"} 1.0
sim_delay_seconds_bucket{le="1.0"} 1.0
sim_delay_seconds_bucket{le="+Inf"} 2.0
sim_delay_seconds_count 2.0
sim_delay_seconds_sum 20.5
# HELP sim_vdevs Live vDCUs on this node
# TYPE sim_vdevs gauge
sim_vdevs{node="kwok-00001"} 2.0
# HELP sim_retries_total Only this shard retried
# TYPE sim_retries_total counter
sim_retries_total 9.0
"""


def test_merged_counters_and_histograms_are_the_sums_of_the_shards() -> None:
    merged = merge_expositions([FIRST, SECOND])
    # Read as bench/scale.py reads it (scalestats.samples).
    assert st.samples(merged, "sim_reports", suffix="_total") == {(): 150.0}
    assert st.samples(merged, "sim_pods", ("result",), "_total") == {("allocated",): 12.0, ("failed",): 1.0}
    assert st.samples(merged, "sim_delay_seconds", ("le",), "_bucket") == {("0.1",): 3.0, ("1.0",): 4.0,
                                                                           ("+Inf",): 6.0}
    assert st.samples(merged, "sim_delay_seconds", suffix="_count") == {(): 6.0}
    assert st.samples(merged, "sim_delay_seconds", suffix="_sum") == {(): 23.0}
    # The mean the bench prints is over every shard's observations, not an average of means.
    sums = st.samples(merged, "sim_delay_seconds", suffix="_sum")
    assert st.histogram_mean(sums, st.samples(merged, "sim_delay_seconds", suffix="_count")) == pytest.approx(23 / 6)


def test_a_series_or_family_of_one_shard_passes_through() -> None:
    merged = merge_expositions([FIRST, SECOND])
    assert st.samples(merged, "sim_retries", suffix="_total") == {(): 9.0}
    assert st.samples(merged, "sim_vdevs", ("node",)) == {("kwok-00000",): 3.0, ("kwok-00001",): 2.0}
    assert "# TYPE sim_delay_seconds histogram" in merged
    assert "# TYPE sim_pods_total counter" in merged


def test_a_created_time_is_the_earliest_not_a_sum() -> None:
    merged = merge_expositions([FIRST, SECOND])
    assert st.samples(merged, "sim_pods_created", ("result",)) == {("allocated",): 1.6e9, ("failed",): 1.7e9}


def test_one_shard_merges_to_what_it_said_and_none_to_nothing() -> None:
    assert merge_expositions([FIRST]) == FIRST
    assert merge_expositions([]) == ""


def test_the_simulators_own_metrics_merge_as_the_bench_reads_them() -> None:
    shards = [SimMetrics(), SimMetrics()]
    for i, metrics in enumerate(shards):
        metrics.registrations.labels("ok").inc(10 * (i + 1))
        metrics.registrations.labels("late").inc(i)
        metrics.report_delay_seconds.observe(0.5 + i)
    merged = merge_expositions(generate_latest(m.registry).decode() for m in shards)
    sim = "hami_dcu_nodesim_"
    assert st.samples(merged, sim + "registrations", ("result",), "_total") == {("ok",): 30.0, ("late",): 1.0}
    assert st.samples(merged, sim + "report_delay_seconds", suffix="_count") == {(): 2.0}
    assert st.samples(merged, sim + "report_delay_seconds", suffix="_sum") == {(): 2.0}

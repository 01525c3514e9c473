"""The node-side simulator's shards (nodesim.py, drasim.py in several processes): how many, which
fake nodes each serves, and their /metrics summed into one exposition for the bench (pure)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

# The node-side simulator's processes: at 1,000 nodes one process kept every report in time, at
# 5,000 it fell 23 s behind (167 report writes/s beside the Allocates), on the thought that its
# GIL held it to one core. 1,500 nodes a process leaves each room, but a process per core is
# all that pays: on this 2-core machine 4 processes left the reports exactly as late (23 s mean:
# the API server, not the simulator, is what falls behind) and made deleting 10,000 pods 2.5
# times slower (each process decodes every pod event). So at most half the machine's cores,
# the other half for the control plane: one process here.
NODES_PER_SHARD = 1500
MOST_SHARDS = max(1, (os.cpu_count() or 2) // 2)


def shard_count(nodes: int, forced: int | None = None, per_shard: int = NODES_PER_SHARD,
                most: int = MOST_SHARDS) -> int:
    """How many simulator processes serve `nodes` fake nodes: `forced` if given, else one per
    `per_shard` nodes up to `most`; never more than there are nodes (a shard of none would be
    a process doing nothing), never fewer than one."""
    wanted = forced if forced is not None else min(most, math.ceil(nodes / per_shard))
    return max(1, min(wanted, nodes))


def split_nodes(names: Iterable[str], shards: int) -> list[list[str]]:
    """The sorted node names dealt round-robin into `shards` groups, sizes within one of each
    other. Round-robin rather than contiguous: the scheduler's packing fills some nodes first,
    and nodes close in name would otherwise put those pods' Allocates all on one shard."""
    ordered = sorted(names)
    return [ordered[i::shards] for i in range(max(1, shards))]


def shard_workers(workers: int, shards: int) -> int:
    """Allocate workers per shard: the total stays `workers`, so the harness asks the API
    server for as many Allocates at once as one process did, only spread over more cores."""
    return max(1, math.ceil(workers / max(1, shards)))


def shard_process_name(shard: int, shards: int) -> str:
    """The name a shard's process goes by in `pids` (and the bench's CPU lines): one process
    keeps the name it always had."""
    return "nodesim" if shards == 1 else f"nodesim-{shard}"


class _Families(Collector):
    """Metric families already built, for `generate_latest` to write out."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


def merge_expositions(texts: Iterable[str]) -> str:
    """Prometheus expositions of the simulator's shards as one: every sample of the same name
    and labels is the sum over the texts (counters, histogram buckets, sums and counts, and
    gauges: each shard counts its own nodes), except a series' `_created` time, which is the
    earliest. A family or a series only one text has passes through. Written by
    prometheus_client's own writer, so the text is what one process's /metrics would be."""
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], Sample]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            if family.name not in families:
                families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            table = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                seen = table.get(key)
                if seen is None:
                    table[key] = sample
                elif sample.name.endswith("_created"):
                    table[key] = seen._replace(value=min(seen.value, sample.value))
                else:
                    table[key] = seen._replace(value=seen.value + sample.value)
    for name, family in families.items():
        family.samples = list(values[name].values())
    return generate_latest(_Families(list(families.values()))).decode()

"""Does `hami-dcu status` count what the extender counts? Per node and card, the slots,
memory and cores that status computes from the API objects against what the extender's
/metrics says its cache holds. Used after every shared scenario on the local cluster."""

from __future__ import annotations

import urllib.request
from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families

from hami_dcu.cli.cardusage import cluster_usage
from hami_dcu.cli.status import LIVE_PODS
from hami_dcu.common.io.kube import Kube
from hami_dcu.common.protocol.keys import Naming

Totals = dict[tuple[str, str], tuple[int, int, int]]  # (node, card) -> (slots, memory MiB, cores %)
_FAMILIES = {"hami_dcu_card_allocated_slots": 0, "hami_dcu_card_allocated_memory_mib": 1,
             "hami_dcu_card_allocated_cores_percent": 2}


def status_totals(kube: Kube, naming: Naming) -> Totals:
    usage = cluster_usage(kube.list_nodes().items, kube.list_pods(field_selector=LIVE_PODS).items, datetime.now(UTC),
                          naming)
    return {(node.name, card.id): (card.slots_used, card.memory_used_mib, card.cores_used_percent)
            for node in usage.nodes for card in node.cards}


def extender_totals(metrics_url: str) -> Totals:
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    values: dict[tuple[str, str], list[int]] = {}
    for family in text_string_to_metric_families(text):
        position = _FAMILIES.get(family.name)
        if position is None:
            continue
        for sample in family.samples:
            key = (sample.labels["node"], sample.labels["card"])
            values.setdefault(key, [0, 0, 0])[position] = int(sample.value)
    return {key: (v[0], v[1], v[2]) for key, v in values.items()}


def disagreement(kube: Kube, metrics_url: str, naming: Naming) -> str | None:
    """None when both count the same on every card (read in `naming`, the cluster's set),
    else the cards where they differ."""
    ours, theirs = status_totals(kube, naming), extender_totals(metrics_url)
    differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    if not differ:
        return None
    return "; ".join(f"{node}/{card}: status {ours.get((node, card))} extender {theirs.get((node, card))}"
                     for node, card in differ)

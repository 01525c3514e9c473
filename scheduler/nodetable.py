"""The cache's nodes: one entry per node, what is held on each card, and the log of changes.

Every change to a node's holdings recomputes what its cards hold, their card states
(cardstates.py) and its score, bumps its `generation` (which lets `/filter` reuse a node's fit
result until something on that node changes) and logs the node's name in the change log
(what /filter keeps per node between requests follows the log: nodeview.py).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection

from hami_dcu.common.protocol.counting import Usage
from hami_dcu.scheduler.cacherecords import Holding, NodeEntry
from hami_dcu.scheduler.cardstates import CardStateTable

log = logging.getLogger(__name__)
_CHANGES_KEPT = 100_000  # node change log entries kept (a reader further behind starts over)


class ChangeLog:
    """Names of nodes as they change, oldest first. Entries cut from the front are counted,
    so a reader's position (cut + index) stays valid."""

    def __init__(self) -> None:
        self._names: list[str] = []
        self._cut = 0

    def append(self, name: str) -> None:
        self._names.append(name)
        if len(self._names) > _CHANGES_KEPT:
            dropped = len(self._names) // 2
            del self._names[:dropped]
            self._cut += dropped

    @property
    def end(self) -> int:
        """The position after the newest change."""
        return self._cut + len(self._names)

    def since(self, position: int) -> set[str] | None:
        """The nodes changed from `position` on; None when that part of the log was cut (or
        `position` is negative: a reader that has read nothing yet) and the reader must
        start over from all nodes."""
        start = position - self._cut
        if start < 0:
            return None
        return set(self._names[start:])


class NodeTable:
    def __init__(self) -> None:
        self._entries: dict[str, NodeEntry] = {}
        self.card_states = CardStateTable()
        self.changes = ChangeLog()
        # A node's entry, None when unknown: the table's own lookup, no Python frame around
        # it (/filter asks once per failing node, thousands of times a request).
        self.get: Callable[[str], NodeEntry | None] = self._entries.get

    def entry(self, name: str) -> NodeEntry:
        """The node's entry, made empty when the node is not known yet (a pod bound to a
        node the node watch has not shown yet holds there all the same)."""
        found = self._entries.get(name)
        if found is None:
            found = self._entries[name] = NodeEntry(name=name)
        return found

    def names(self) -> Collection[str]:
        return self._entries.keys()

    def entries(self) -> list[NodeEntry]:
        return list(self._entries.values())

    def remove(self, entry: NodeEntry) -> None:
        """Forget a node that holds nothing any more."""
        self.card_states.leave(entry.name, entry.card_states)
        for state in entry.card_states:
            self.card_states.release(state)
        del self._entries[entry.name]
        self.changes.append(entry.name)

    def hold(self, node: str, key: str, holding: Holding) -> None:
        entry = self.entry(node)
        entry.holdings[key] = holding
        self.recompute(entry)

    def release(self, node: str, key: str) -> None:
        """Drop one holding of the node (nothing when it holds none under `key`)."""
        entry = self._entries.get(node)
        if entry is not None and entry.holdings.pop(key, None) is not None:
            self.recompute(entry)

    def repair(self, expected: dict[str, dict[str, Holding]], drift: Counter[str]) -> None:
        """Make every node's holdings exactly `expected`, counting and logging each difference."""
        every: dict[str, dict[str, Holding]] = {name: {} for name in self._entries}
        every.update(expected)
        for name, holdings in every.items():
            entry = self.entry(name)
            if entry.holdings == holdings:
                continue
            for key in entry.holdings.keys() - holdings.keys():
                drift["orphan-holding"] += 1
                log.warning("node %s: cache held %s for %s, which holds nothing there: repaired", name,
                            entry.holdings[key].held, entry.holdings[key].label)
            for key in holdings.keys() - entry.holdings.keys():
                drift["missing-holding"] += 1
                log.warning("node %s: cache missed what %s holds: repaired", name, holdings[key].label)
            for key in holdings.keys() & entry.holdings.keys():
                if holdings[key] != entry.holdings[key]:
                    drift["holding"] += 1
                    log.warning("node %s: cache counted %s for %s instead of %s: repaired", name,
                                entry.holdings[key].held, holdings[key].label, holdings[key].held)
            entry.holdings = holdings
            self.recompute(entry)

    def recompute(self, entry: NodeEntry) -> None:
        used = [Usage() for _ in entry.cards]
        degraded, ignored = [], []
        for holding in entry.holdings.values():
            if holding.held is None:
                degraded.append(f"pod {holding.label}: {holding.error}")
                continue
            for card, share in holding.held.items():
                pos = entry.card_pos.get(card)
                if pos is None:
                    if entry.cards:
                        ignored.append(f"pod {holding.label} holds card {card} that the node does not report")
                    continue
                used[pos].add(share)
        entry.used = used
        entry.degraded = degraded
        entry.ignored_claims = ignored
        entry.generation += 1
        entry.card_states = self.card_states.states_of(entry.name, entry.cards, used, entry.card_states)
        entry.node_score = entry.score()
        self.changes.append(entry.name)

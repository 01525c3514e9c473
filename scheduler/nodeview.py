"""What /filter keeps per node between requests, kept current from the cache's change log.

A filter over 5,000 nodes that looks at every node's entry costs microseconds per node:
the entries are scattered through memory and each look is a cache miss. So /filter keeps
sets of node names instead, changed only where nodes change (the cache logs every node
it changes, cache.changes), and answers with set operations:

* `Usability`, one for all pods: which nodes cannot be used now (not present,
  unregistered, degraded, or whose device plugin stopped reporting: a heap of handshake
  deadlines turns nodes stale as time passes), every node's score, and the nodes in the
  order each node policy prefers them (a sorted list, changed where a score changes);
* `ShapeNodes`, one per recent pod shape: which nodes take the pod (judged from card
  states, verdicts.py) and which do not, why only when asked. A shape seen for the first
  time finds its nodes for a one-card pod as the union of the nodes holding a card in a
  state that passes (cardstates.py keeps them), without visiting each node.

The best node for a pod is then the first node in its policy's order that fits and may be
used: a few steps, not a pass over all nodes. A reader that falls behind the log's kept
window (or starts) rebuilds from all nodes.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable

from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.cacherecords import NodeView
from hami_dcu.scheduler.reasons import NodeRejection
from hami_dcu.scheduler.verdicts import ShapeVerdicts


class ChangeReader:
    """A position in the cache's node change log."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.position = -1  # nothing read: the first `take` asks for a rebuild

    def take(self) -> set[str] | None:
        """The nodes changed since the last call, or None when the reader must rebuild."""
        changes = self.cache.changes
        changed = changes.since(self.position)
        self.position = changes.end
        return changed


def blocked(entry: NodeView | None) -> bool:
    """Unusable whatever the time: gone, unregistered or degraded (Filter.usable says why)."""
    return entry is None or not entry.present or bool(entry.register_error) or bool(entry.degraded)


def _order_key(score: float, spread: bool) -> float:
    # binpack prefers the highest score, spread the lowest; both then the name ascending
    return score if spread else -score


class Usability:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.reader = ChangeReader(cache)
        self.scores: dict[str, float] = {}  # node score of every node in the cache
        self.blocked: set[str] = set()
        self.stale: set[str] = set()  # the plugin's report is older than the handshake limit
        self.known_version = 0  # changes whenever a node joins or leaves the cache
        # per node policy (spread?): every node as (policy key, name), best first
        self.order: dict[bool, list[tuple[float, str]]] = {False: [], True: []}
        self._deadlines: list[tuple[float, str]] = []  # (handshake fresh until, node), a heap

    def sync(self, now: float) -> None:
        changed = self.reader.take()
        if changed is None:
            self.scores.clear()
            self.blocked.clear()
            self.stale.clear()
            self._deadlines.clear()
            self.order = {False: [], True: []}
            self.known_version += 1
            for name in list(self.cache.node_names()):
                self._judge(name, now, ordered=False)
            # one sort, not an insertion per node (quadratic at 10,000 nodes)
            self.order = {spread: sorted((_order_key(score, spread), name) for name, score in self.scores.items())
                          for spread in (False, True)}
            changed = set()
        for name in changed:
            self._judge(name, now)
        deadlines, node = self._deadlines, self.cache.node
        while deadlines and deadlines[0][0] < now:
            _, name = heapq.heappop(deadlines)
            entry = node(name)
            if entry is None:
                continue
            until = entry.handshake_fresh_until
            if until < now:  # not reported in time
                self.stale.add(name)
            elif not math.isinf(until):  # reported since (routine reports are not logged): the new deadline
                heapq.heappush(deadlines, (until, name))

    def _judge(self, name: str, now: float, ordered: bool = True) -> None:
        entry = self.cache.node(name)
        if entry is None:
            old = self.scores.pop(name, None)
            if old is not None:
                self.known_version += 1
                self._reorder(name, old, None)
            self.blocked.discard(name)
            self.stale.discard(name)
            return
        name = entry.name  # the cache's own string: set and dict lookups then match by identity
        old = self.scores.get(name)
        if old is None:
            self.known_version += 1
        if old != entry.node_score:
            self.scores[name] = entry.node_score
            if ordered:
                self._reorder(name, old, entry.node_score)
        if blocked(entry):
            self.blocked.add(name)
        else:
            self.blocked.discard(name)
        until = entry.handshake_fresh_until
        if until < now:
            self.stale.add(name)
        else:
            self.stale.discard(name)
            if not math.isinf(until):
                heapq.heappush(self._deadlines, (until, name))

    def _reorder(self, name: str, old: float | None, new: float | None) -> None:
        for spread, order in self.order.items():
            if old is not None:
                item = (_order_key(old, spread), name)
                at = bisect.bisect_left(order, item)
                if at < len(order) and order[at] == item:
                    del order[at]
            if new is not None:
                bisect.insort(order, (_order_key(new, spread), name))

    def best(self, spread: bool, fits: set[str], allowed: Callable[[str], bool]) -> str | None:
        """The first node in the policy's order that is in `fits` and `allowed`."""
        for _, name in self.order[spread]:
            if name in fits and allowed(name):
                return name
        return None


class ShapeNodes:
    def __init__(self, cache: ClusterCache, verdicts: ShapeVerdicts, usability: Usability) -> None:
        self.cache = cache
        self.verdicts = verdicts
        self.usability = usability  # synced before this
        self.reader = ChangeReader(cache)
        self.fits: set[str] = set()  # nodes that take the pod (blocked ones never)
        self.failing: set[str] = set()  # every other node in the cache
        self._reasons: dict[str, NodeRejection] = {}  # why, for the failing nodes asked about

    def sync(self) -> None:
        """Call after `verdicts.sync`, so every card state a node is in has been judged."""
        changed = self.reader.take()
        if changed is None:
            self._rebuild()
            return
        node, fits, failing, judge = self.cache.node, self.fits, self.failing, self.verdicts.rejection
        for name in changed:
            self._reasons.pop(name, None)
            entry = node(name)
            if entry is None:
                fits.discard(name)
                failing.discard(name)
            elif not blocked(entry) and judge(entry.card_states) is None:
                fits.add(entry.name)
                failing.discard(name)
            else:
                fits.discard(name)
                failing.add(entry.name)

    def _rebuild(self) -> None:
        self._reasons.clear()
        one_card = self.verdicts.one_card
        if one_card is not None:
            members = self.cache.card_states.members
            fits = set().union(*(members[state] for state in one_card if state in members))
            fits.difference_update(self.usability.blocked)
        else:
            judge = self.verdicts.rejection
            fits = {entry.name for entry in self.cache.nodes()
                    if not blocked(entry) and judge(entry.card_states) is None}
        self.fits = fits
        self.failing = set(self.cache.node_names()).difference(fits)

    def reason(self, name: str) -> NodeRejection | None:
        """Why a failing node does not take the pod (None: it does; it was blocked)."""
        found = self._reasons.get(name)
        if found is None:
            entry = self.cache.node(name)
            if entry is None or blocked(entry):
                return None
            found = self.verdicts.rejection(entry.card_states)
            if found is None:
                return None
            self._reasons[name] = found
        return found

"""Card states: what one card looks like to a fit check, interned to small ints (no I/O).

Whether a card can take a container depends only on its registered capacity (model, slots,
memory, cores, health) and what is held on it (slots, memory, cores), never on which node
it is in or what it is called (unless a pod selects cards by id). Thousands of nodes have
only hundreds of distinct card states, so `/filter` judges each state once per pod shape
(verdicts.py) and a node is judged by the ids of its cards: a set lookup per card instead
of a fit per node, for any shape, seen before or not.

Ids are never reused: a verdict remembered for an id stays true for as long as the id
lives. Ids of states no card is in any more are dropped from the table (`live`); callers
that remember verdicts by id prune against it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hami_dcu.common.protocol.counting import Usage
from hami_dcu.scheduler.fit import CardSpec

# (model, slots, memory, cores, health, used slots, used memory, used cores)
CardStateKey = tuple[str, int, int, int, bool, int, int, int]


# A stand-in card with a state's capacity (no id: a state is no one card) and the
# [slots, memory, cores] in use on it: what fit.check_card reads.
JudgedCard = tuple[CardSpec, list[int]]


class CardStateTable:
    def __init__(self) -> None:
        self._ids: dict[CardStateKey, int] = {}
        self.live: dict[int, JudgedCard] = {}  # in id order (ids only grow)
        self._keys: dict[int, CardStateKey] = {}
        self._refs: dict[int, int] = {}
        # state -> the nodes with at least one card in it: the nodes that take a one-card pod
        # are the union over the states that pass, found without visiting every node
        self.members: dict[int, set[str]] = {}
        self.next_id = 0

    def acquire(self, key: CardStateKey) -> int:
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self.next_id
            self.live[found] = _stand_in(key)  # built once per state: a frozen CardSpec costs microseconds
            self._keys[found] = key
            self._refs[found] = 0
            self.next_id += 1
        self._refs[found] += 1
        return found

    def release(self, state: int) -> None:
        refs = self._refs[state] - 1
        if refs:
            self._refs[state] = refs
            return
        del self._refs[state]
        del self.live[state]
        self.members.pop(state, None)
        del self._ids[self._keys.pop(state)]

    def born_since(self, first: int) -> list[tuple[int, JudgedCard]]:
        """Live states with an id >= `first` (the ones a verdict table has not judged yet)."""
        newer: list[tuple[int, JudgedCard]] = []
        if first >= self.next_id:
            return newer
        for state in reversed(self.live):
            if state < first:
                break
            newer.append((state, self.live[state]))
        newer.reverse()
        return newer

    def states_of(self, node: str, cards: Sequence[CardSpec], used: Sequence[Usage],
                  previous: Sequence[int]) -> tuple[int, ...]:
        """The ids of node `node`'s `cards` holding `used`, in card order; `previous` (its old
        ids) are released after the new ones are taken, so an unchanged card keeps its id."""
        ids = tuple(self.acquire((c.model, c.slots, c.memory, c.cores, c.health, u.slots, u.memory, u.cores))
                    for c, u in zip(cards, used, strict=True))
        for state in set(ids).difference(previous):
            self.members.setdefault(state, set()).add(node)
        self.leave(node, set(previous).difference(ids))
        for state in previous:
            self.release(state)
        return ids

    def leave(self, node: str, states: Iterable[int]) -> None:
        """`node` has no card in `states` any more."""
        for state in states:
            members = self.members.get(state)
            if members is not None:
                members.discard(node)


def _stand_in(key: CardStateKey) -> JudgedCard:
    model, slots, memory, cores, health, used_slots, used_memory, used_cores = key
    return (CardSpec(id="", index=0, model=model, slots=slots, memory=memory, cores=cores, health=health),
            [used_slots, used_memory, used_cores])

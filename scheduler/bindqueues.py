"""Which nodes a new bind would wait on too long (pure: times are passed in).

HAMi's node lock lets one pod per node be between its bind and its Allocate, so binds to one
node queue in the extender (scheduler/bind.py), and a bind that waits longer than
`--lock-wait` fails and sends its pod back to kube-scheduler's queue with its backoff and a
BindingFailed event. Under binpack a burst queues its pods on the fullest nodes; at 1,000 kwok
nodes 5 % of a 2,000-pod burst failed that way once kube-scheduler could place pods faster
than nodes served them. A node is *congested* when the binds queued for it, at the pace its
recent binds went, would take more than half the wait a new bind is allowed; /filter then
prefers the policy's next node that fits (filtering.py), and picks a congested one only when
every fitting node is. A burst queues a node's whole capacity before its first bind ends, so
the bind holding the node's turn counts too: the pace is at least as slow as it has been so far.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

# The share of --lock-wait a new bind's expected wait may take before its node counts as
# congested: half, so that a pace that slows while the bind waits still leaves it time.
CONGESTED_SHARE = 0.5
# Weight of the latest bind in a node's pace (an exponential moving average): a few binds
# are enough to follow a node that slows down or speeds up.
PACE_WEIGHT = 0.3


@dataclass
class BindQueues:
    lock_wait: float
    waiting: Counter[str] = field(default_factory=Counter)  # binds queued for each node
    serving: Counter[str] = field(default_factory=Counter)  # binds holding each node's turn
    turn_since: dict[str, float] = field(default_factory=dict)  # when the bind holding it got it
    pace: dict[str, float] = field(default_factory=dict)  # seconds one bind holds a node's turn
    overall: float | None = None  # the same over every node: the guess for a node with none yet

    def queued(self, node: str) -> None:
        self.waiting[node] += 1

    def left_queue(self, node: str, served: bool, now: float) -> None:
        """The bind got the node's turn (`served`) or gave up waiting for it."""
        self._drop(self.waiting, node)
        if served:
            self.serving[node] += 1
            self.turn_since[node] = now

    def finished(self, node: str, now: float) -> None:
        """The bind that had the node's turn ended (its wait for the lock, which is the
        previous pod's Allocate, included)."""
        self._drop(self.serving, node)
        started = self.turn_since.pop(node, None)
        if started is not None:
            seconds = max(0.0, now - started)
            self.pace[node] = _average(self.pace.get(node), seconds)
            self.overall = _average(self.overall, seconds)

    def expected_wait(self, node: str, now: float) -> float:
        ahead = self.waiting[node] + self.serving[node]
        if not ahead:
            return 0.0
        pace = self.pace.get(node, self.overall) or 0.0
        started = self.turn_since.get(node)
        if started is not None:
            pace = max(pace, now - started)
        return ahead * pace

    def congested(self, now: float) -> frozenset[str]:
        limit = CONGESTED_SHARE * self.lock_wait
        busy = self.waiting.keys() | self.serving.keys()
        return frozenset(node for node in busy if self.expected_wait(node, now) > limit)

    @staticmethod
    def _drop(counts: Counter[str], node: str) -> None:
        counts[node] -= 1
        if counts[node] <= 0:
            del counts[node]


def _average(previous: float | None, latest: float) -> float:
    return latest if previous is None else previous + PACE_WEIGHT * (latest - previous)

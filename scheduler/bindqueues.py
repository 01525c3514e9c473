"""Which nodes a new bind would wait on too long (pure: times are passed in).

HAMi's node lock lets one pod per node be between its bind and its Allocate, so binds to one
node queue in the extender (scheduler/bind.py), and a bind that waits longer than
`--lock-wait` fails and sends its pod back to kube-scheduler's queue with its backoff and a
BindingFailed event. Under binpack a burst queues its pods on the fullest nodes; at 1,000 kwok
nodes 5 % of a 2,000-pod burst failed that way once kube-scheduler could place pods faster
than nodes served them. A node is *congested* when the binds queued for it, at the pace its
recent binds went, would take more than half the wait a new bind is allowed; /filter then
prefers the policy's next node that fits (filtering.py), and picks a congested one only when
every fitting node is.
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
    pace: dict[str, float] = field(default_factory=dict)  # seconds one bind holds a node's turn
    overall: float | None = None  # the same over every node: the guess for a node with none yet

    def queued(self, node: str) -> None:
        self.waiting[node] += 1

    def left_queue(self, node: str, served: bool) -> None:
        """The bind got the node's turn (`served`) or gave up waiting for it."""
        self._drop(self.waiting, node)
        if served:
            self.serving[node] += 1

    def finished(self, node: str, seconds: float) -> None:
        """A bind that had the node's turn ended after holding it `seconds` (its wait for the
        lock included: that is the previous pod's Allocate)."""
        self._drop(self.serving, node)
        self.pace[node] = _average(self.pace.get(node), seconds)
        self.overall = _average(self.overall, seconds)

    def expected_wait(self, node: str) -> float:
        ahead = self.waiting[node] + self.serving[node]
        pace = self.pace.get(node, self.overall)
        return ahead * pace if ahead and pace is not None else 0.0

    def congested(self) -> frozenset[str]:
        limit = CONGESTED_SHARE * self.lock_wait
        busy = self.waiting.keys() | self.serving.keys()
        return frozenset(node for node in busy if self.expected_wait(node) > limit)

    @staticmethod
    def _drop(counts: Counter[str], node: str) -> None:
        counts[node] -= 1
        if counts[node] <= 0:
            del counts[node]


def _average(previous: float | None, latest: float) -> float:
    return latest if previous is None else previous + PACE_WEIGHT * (latest - previous)

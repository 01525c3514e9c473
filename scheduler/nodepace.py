"""How many binds one node may have queued: as many as its own pace serves within a budget
(pure: times are passed in).

HAMi's node lock admits one pod per node between its bind and its Allocate, so the k-th bind
queued on a node waits about k handoffs of that node's lock (the holder's Binding, its
Allocate, the release, the next take). binpack sends a burst to the fullest node, and
kube-scheduler places pods far faster than a node serves them: on a slow machine the last
binds queued there outwait --lock-wait and fail (measured with `bench/scale.py --contend`,
docs/performance.md). A fixed limit per node (`--node-bind-queue N`) spreads a burst even where
the node would serve it in time, which costs binpack its packing; this limit follows what each
node's handoffs take: a node serving a bind every 0.3 s may queue 33 within 10 s, one that
takes 1.3 s may queue 7.

A handoff is measured when a bind takes a node's lock after waiting for the bind before it:
the time since that bind took the lock is what the node needs per pod. A node with no recent
handoff of its own uses the mean of every node's; with none at all there is no limit (a burst's
first binds, and a quiet cluster, keep binpack's choice).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Estimate:
    seconds: float  # a moving average of handoffs
    at: float  # monotonic time of its newest sample


@dataclass
class NodePace:
    budget: float  # seconds the binds queued on one node may take to be served at its pace
    window: float = 60.0  # a node's estimate older than this is forgotten
    weight: float = 0.3  # of the newest handoff in the moving average
    _took: dict[str, float] = field(default_factory=dict)  # node -> when a bind last took its lock
    _nodes: dict[str, _Estimate] = field(default_factory=dict)
    _all: _Estimate | None = None
    _forgot_at: float = 0.0

    def took(self, node: str, now: float, waited: bool) -> None:
        """A bind took `node`'s lock at `now`; `waited`: it had waited for the bind before it
        on this node (only then is the time since that bind's take a handoff)."""
        self._forget(now)
        previous = self._took.get(node)
        self._took[node] = now
        if not waited or previous is None or now - previous > self.window:
            return
        handoff = now - previous
        self._nodes[node] = self._average(self._nodes.get(node), handoff, now)
        self._all = self._average(self._all, handoff, now)

    def handoff(self, node: str, now: float) -> float | None:
        """Seconds per bind on `node`: its own recent estimate, else every node's, else None."""
        for estimate in (self._nodes.get(node), self._all):
            if estimate is not None and now - estimate.at <= self.window:
                return estimate.seconds
        return None

    def limit(self, node: str, now: float) -> int:
        """Binds that may be in flight on `node` (0: no limit). At least 1: a node that is slow
        still takes a bind when it has none."""
        seconds = self.handoff(node, now)
        if self.budget <= 0 or seconds is None or seconds <= 0:
            return 0
        return max(1, int(self.budget / seconds))

    def _forget(self, now: float) -> None:
        """Drop what is older than the window, once a window: nodes come and go, and this keeps
        the tables to the nodes binding lately."""
        if now - self._forgot_at < self.window:
            return
        self._forgot_at = now
        self._took = {node: at for node, at in self._took.items() if now - at <= self.window}
        self._nodes = {node: e for node, e in self._nodes.items() if now - e.at <= self.window}

    def _average(self, estimate: _Estimate | None, handoff: float, now: float) -> _Estimate:
        if estimate is None or now - estimate.at > self.window:
            return _Estimate(handoff, now)
        return _Estimate(estimate.seconds + self.weight * (handoff - estimate.seconds), now)

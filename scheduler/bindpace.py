"""How many binds may be in flight at once: as many as the binds' own pace drains within a
budget (pure: times are passed in).

HAMi's node lock admits one pod per node between its bind and its Allocate, so a bind waits
for the binds queued before it. By Little's law the mean wait of a bind is the binds in flight
over the rate they end: 128 in flight (the listener's cap) at 9.7 binds/s is 13 s, and the
slowest of them outwait --lock-wait, fail and go back to kube-scheduler's backoff, which slows
the burst further. Measured with `bench/scale.py --contend` at 1,000 kwok nodes
(docs/performance.md, No collapse when the machine is slower). So `/filter` (the start of every bind:
kube-scheduler's scheduling loop is serial) waits while the binds in flight exceed what the
rate of the last `window` seconds ends within `budget`; on a fast machine the limit is above
the listener's cap and nothing waits. `floor` binds are always let through (a burst's start,
before any bind has ended).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class BindPace:
    budget: float  # seconds the binds in flight may take to end at the measured pace
    floor: int = 8  # binds always allowed in flight
    window: float = 10.0  # seconds of bind ends the pace is measured over
    _ended: deque[float] = field(default_factory=deque)

    def ended(self, now: float) -> None:
        """A bind ended with its pod bound (a failed bind is not pace)."""
        self._ended.append(now)
        self._trim(now)

    def rate(self, now: float) -> float:
        """Binds ended per second over the window (0 when none did)."""
        self._trim(now)
        if not self._ended:
            return 0.0
        return len(self._ended) / max(now - self._ended[0], 1.0)

    def limit(self, now: float) -> int:
        """Binds that may be in flight now."""
        return max(self.floor, int(self.rate(now) * self.budget))

    def room(self, in_flight: int, now: float) -> bool:
        """Whether one more bind may start."""
        return self.budget <= 0 or in_flight < self.limit(now)

    def _trim(self, now: float) -> None:
        while self._ended and self._ended[0] < now - self.window:
            self._ended.popleft()

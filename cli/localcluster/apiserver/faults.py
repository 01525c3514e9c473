"""Fault injection: a share of requests answered 500, 409 or delayed, for reliability tests.

Two families:
* before the store: 500 and 409 are decided before the request touches the store, so such a
  failure never half-applies a write;
* after the store (`post_commit_rate`, writes only): the write is applied, then the client
  gets a 500 or no answer at all (the connection is dropped, as a timeout behind a load
  balancer looks). Real API servers do this; it is what makes a client's view of its own
  write uncertain ("did my lock patch land?").

Off by default; reproducible through `seed`.

    server.faults.configure(seed=7, error_rate=0.1, conflict_rate=0.2, post_commit_rate=0.03,
                            match=lambda method, path: path.endswith("/binding"))
    ...
    server.faults.clear()
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

RequestMatch = Callable[[str, str], bool]  # (HTTP method, URL path) -> may this request be hit

# Fault names `decide` returns.
ERROR = "500"
CONFLICT = "409"
ERROR_AFTER_COMMIT = "500-after-commit"  # applied, then answered 500
LOST_AFTER_COMMIT = "lost-after-commit"  # applied, then the connection dropped without an answer
AFTER_COMMIT = frozenset({ERROR_AFTER_COMMIT, LOST_AFTER_COMMIT})


def _any_request(_method: str, _path: str) -> bool:
    return True


@dataclass
class Faults:
    """Rates are shares in 0..1, drawn independently per request in the order delay, 500,
    409, post-commit. `injected` counts what was injected by kind (the names above, and
    "delay")."""

    error_rate: float = 0.0  # share answered 500 InternalError
    conflict_rate: float = 0.0  # share of writes answered 409 Conflict
    post_commit_rate: float = 0.0  # share of writes applied, then answered 500 or dropped
    post_commit_lost_share: float = 0.5  # of those, the share dropped without an answer
    delay_rate: float = 0.0  # share delayed by delay_seconds before being served (or failed)
    delay_seconds: float = 0.0
    match: RequestMatch = _any_request
    seed: int = 0
    injected: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()

    @property
    def delay_ms(self) -> float:
        return self.delay_seconds * 1000

    @delay_ms.setter
    def delay_ms(self, value: float) -> None:
        self.delay_seconds = value / 1000

    @property
    def total(self) -> int:
        """How many faults were injected so far, all kinds together."""
        with self._lock:
            return sum(self.injected.values())

    @property
    def active(self) -> bool:
        return bool(self.error_rate or self.conflict_rate or self.post_commit_rate
                    or (self.delay_rate and self.delay_seconds))

    def configure(self, **settings: object) -> Faults:
        """Set any of the fields above (or `delay_ms`); setting `seed` restarts the RNG."""
        with self._lock:
            for name, value in settings.items():
                if name.startswith("_") or not hasattr(self, name) or name in ("total", "active", "injected"):
                    raise AttributeError(f"unknown fault setting {name}")
                setattr(self, name, value)
            if "seed" in settings:
                self._random = random.Random(self.seed)
        return self

    def clear(self) -> None:
        """Stop injecting (the counter is kept: tests read it afterwards)."""
        self.configure(error_rate=0.0, conflict_rate=0.0, post_commit_rate=0.0, delay_rate=0.0, delay_seconds=0.0,
                       match=_any_request)

    def reset_counts(self) -> None:
        with self._lock:
            self.injected.clear()

    def decide(self, method: str, path: str) -> tuple[str | None, float]:
        """(fault to answer: one of the names above or None; seconds to delay first)."""
        if not self.active:  # the common case, without taking the lock
            return None, 0.0
        with self._lock:
            if not self.match(method, path):
                return None, 0.0
            delay = 0.0
            if self.delay_rate and self._random.random() < self.delay_rate:
                delay = self.delay_seconds
                self.injected["delay"] += 1
            if self.error_rate and self._random.random() < self.error_rate:
                self.injected[ERROR] += 1
                return ERROR, delay
            if method not in WRITE_METHODS:
                return None, delay
            if self.conflict_rate and self._random.random() < self.conflict_rate:
                self.injected[CONFLICT] += 1
                return CONFLICT, delay
            if self.post_commit_rate and self._random.random() < self.post_commit_rate:
                lost = self._random.random() < self.post_commit_lost_share
                fault = LOST_AFTER_COMMIT if lost else ERROR_AFTER_COMMIT
                self.injected[fault] += 1
                return fault, delay
            return None, delay

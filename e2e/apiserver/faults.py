"""Fault injection: a share of requests answered 500, 409 or delayed, for reliability tests."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


@dataclass
class Faults:
    """Off by default. `match(method, path)` limits which requests may be hit."""

    error_rate: float = 0.0  # share answered 500
    conflict_rate: float = 0.0  # share of writes answered 409
    delay_rate: float = 0.0  # share delayed by delay_seconds
    delay_seconds: float = 0.0
    match: Callable[[str, str], bool] = lambda _method, _path: True
    seed: int = 0
    injected: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()

    def configure(self, **settings: object) -> None:
        with self._lock:
            for name, value in settings.items():
                if not hasattr(self, name):
                    raise AttributeError(f"unknown fault setting {name}")
                setattr(self, name, value)
            if "seed" in settings:
                self._random = random.Random(self.seed)

    def clear(self) -> None:
        self.configure(error_rate=0.0, conflict_rate=0.0, delay_rate=0.0, delay_seconds=0.0,
                       match=lambda _m, _p: True)

    def decide(self, method: str, path: str) -> tuple[str | None, float]:
        """(fault to answer or None, seconds to delay first)."""
        with self._lock:
            if not self.match(method, path):
                return None, 0.0
            delay = 0.0
            if self.delay_rate and self._random.random() < self.delay_rate:
                delay = self.delay_seconds
                self.injected["delay"] += 1
            if self.error_rate and self._random.random() < self.error_rate:
                self.injected["500"] += 1
                return "500", delay
            if method in WRITE_METHODS and self.conflict_rate and self._random.random() < self.conflict_rate:
                self.injected["409"] += 1
                return "409", delay
            return None, delay

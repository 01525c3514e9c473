"""What a server does with a failure it did not answer itself, the same in every component:
`common.protocol.errors.judge` decides expected or bug; an expected failure is logged as one line, a
bug with its traceback and the pod or node it concerned, and counted in
`hami_dcu_internal_errors_total{component}`, one metric name for every component so one alert
covers them all.

The webhook can share the extender's registry (one process, `--serve-webhook`), so the counter
is made once per registry and shared by the components that serve it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from enum import StrEnum

from prometheus_client import CollectorRegistry, Counter

from hami_dcu.common.protocol.errors import Failure, judge


class Component(StrEnum):
    """The `component` label's values, and the name a bug's message gives."""

    WEBHOOK = "webhook"
    SCHEDULER = "scheduler"
    DEVICE_PLUGIN = "device-plugin"
    DRA_DRIVER = "dra-driver"


INTERNAL_ERRORS = "hami_dcu_internal_errors"  # served as hami_dcu_internal_errors_total

_counters: weakref.WeakKeyDictionary[CollectorRegistry, Counter] = weakref.WeakKeyDictionary()
_counters_lock = threading.Lock()


def internal_errors(registry: CollectorRegistry) -> Counter:
    """The bug counter of `registry`, made on first use."""
    with _counters_lock:
        counter = _counters.get(registry)
        if counter is None:
            counter = Counter(INTERNAL_ERRORS, "Failures that were bugs in hami-dcu (answered 500 or INTERNAL), "
                              "by component", ["component"], registry=registry)
            _counters[registry] = counter
        return counter


class FailureReporter:
    """One component's shell's way to answer what it caught."""

    def __init__(self, component: Component, registry: CollectorRegistry, log: logging.Logger) -> None:
        self.component = component
        self.log = log  # the server's own logger: its lines read as the server's
        self.counter = internal_errors(registry)
        self.counter.labels(component)  # served at 0 from the start, so a rate() sees the first bug

    def failed(self, exc: BaseException, subject: str) -> Failure:
        """Log (and count, for a bug) `exc`, raised while serving `subject` ("Allocate for pod
        ns/p on node n"); the answer to give."""
        failure = judge(exc, self.component)
        if failure.expected:
            self.log.warning("%s %s: %s", self.component, subject, failure.message)
        else:
            self.log.error("%s %s: internal error", self.component, subject, exc_info=exc)
            self.counter.labels(self.component).inc()
        return failure

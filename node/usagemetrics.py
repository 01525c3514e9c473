"""The usage metrics' wiring, the same for `hami-dcu device-plugin` and `hami-dcu dra-driver`:
each publishes per-container usage in the registry its --metrics-bind endpoint serves, from
its own view of what it granted (deviceplugin/usageview.py, dra/usageview.py)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry

from hami_dcu.common.io.failures import Component, FailureReporter
from hami_dcu.node.podresources import PodResourcesClient
from hami_dcu.node.smi import RsmiBackend, SmiError
from hami_dcu.node.usage import NodeView
from hami_dcu.node.usagecollector import UsageCollector
from hami_dcu.node.usagesmi import CardQuery, DmiUsage, MockUsage, Readings, UsageError, UsageReader, VdevQuery

log = logging.getLogger(__name__)


class Unreadable:
    """A reader whose library could not be loaded: every scrape says so (usage_source_up 0)."""

    def __init__(self, why: str) -> None:
        self.why = why

    def read(self, cards: Sequence[CardQuery], vdevs: Sequence[VdevQuery]) -> Readings:
        raise UsageError(self.why)


def usage_reader(args: argparse.Namespace) -> UsageReader:
    """The readings the flags name: made up for mock cards, else ROCm SMI and libhydmi."""
    if args.smi == "mock":
        return MockUsage()
    try:
        return DmiUsage(RsmiBackend(args.rsmi_library).lib, args.hydmi_library)
    except SmiError as exc:  # the plugin serves its cards without usage metrics
        return Unreadable(str(exc))


def register(registry: CollectorRegistry, component: Component, view: Callable[[], NodeView],
             args: argparse.Namespace, reader: UsageReader | None = None) -> UsageCollector:
    """Publish per-container usage in `registry` under the naming set's series names."""
    socket = args.pod_resources_socket
    collector = UsageCollector(args.naming, args.node_name, view, reader or usage_reader(args),
                               PodResourcesClient(socket) if socket else None,
                               FailureReporter(component, registry, log))
    registry.register(collector)
    return collector

"""The usage metrics' shell: at each scrape of the node's /metrics, ask the kubelet who holds
what (pod resources API) and the SMI what is in use, and hand both to usage.usage_samples.

A prometheus-client custom collector, registered into the plugin's (or driver's) registry, so
the series come out of the metrics endpoint the node already serves. A scrape never fails for
it: a source that does not answer leaves its part out and says so in
`hami_dcu_usage_source_up{node, source}` (and the log, once per change).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from hami_dcu.common.io.failures import FailureReporter
from hami_dcu.node.podresources import ContainerHoldings, PodResourcesClient, PodResourcesError
from hami_dcu.node.usage import Names, NodeView, usage_samples
from hami_dcu.node.usagesmi import CardQuery, Readings, UsageError, UsageReader, VdevQuery

log = logging.getLogger(__name__)
SOURCE_UP = "hami_dcu_usage_source_up"
POD_RESOURCES, SMI = "podresources", "smi"


class UsageCollector(Collector):
    def __init__(self, family: str, node: str, view: Callable[[], NodeView], reader: UsageReader,
                 pod_resources: PodResourcesClient | None, failures: FailureReporter | None = None) -> None:
        self.failures = failures  # the plugin's: a bug here is logged and counted as its bugs are
        self.names = Names(family)
        self.node = node
        self.view = view
        self.reader = reader
        self.pod_resources = pod_resources
        self._up: dict[str, bool] = {}

    def _families(self) -> dict[str, GaugeMetricFamily]:
        return {name: GaugeMetricFamily(name, self.names.help(name), labels=self.names.label_names(name))
                for name in self.names.all}

    def describe(self) -> Iterator[Metric]:
        yield from self._families().values()
        yield GaugeMetricFamily(SOURCE_UP, "1 when the usage source answered at the last scrape",
                                labels=["node", "source"])

    def _mark(self, source: str, up: bool, why: str = "") -> None:
        if self._up.get(source, True) != up:
            if up:
                log.info("node %s: usage source %s answers again", self.node, source)
            else:
                log.warning("node %s: usage source %s does not answer, its part of the usage metrics is left out: "
                            "%s", self.node, source, why)
        self._up[source] = up

    def _holdings(self) -> list[ContainerHoldings]:
        if self.pod_resources is None:
            return []
        try:
            found = self.pod_resources.list()
        except PodResourcesError as exc:
            self._mark(POD_RESOURCES, False, str(exc))
            return []
        self._mark(POD_RESOURCES, True)
        return found

    def _readings(self, view: NodeView) -> Readings:
        cards = [CardQuery(c.index, c.serial, c.memory_mib) for c in view.cards]
        vdevs = [VdevQuery(v.vdev, v.card_index, v.memory_mib) for v in view.vdevs]
        try:
            readings = self.reader.read(cards, vdevs)
        except (UsageError, OSError) as exc:
            self._mark(SMI, False, str(exc))
            return Readings()
        self._mark(SMI, True)
        return readings

    def collect(self) -> Iterator[Metric]:
        families = self._families()
        try:
            view = self.view()
            samples = usage_samples(self.names.family, view, self._holdings(), self._readings(view))
        except Exception as exc:  # a bug here must not take the node's other metrics down with it
            if self.failures is not None:
                self.failures.failed(exc, f"usage metrics on node {self.node}")
            else:
                log.exception("node %s: usage metrics failed", self.node)
            samples = []
            self._up = {POD_RESOURCES: False, SMI: False}
        for sample in samples:
            families[sample.name].add_metric([value for _, value in sample.labels], sample.value)
        yield from families.values()
        up = GaugeMetricFamily(SOURCE_UP, "1 when the usage source answered at the last scrape",
                               labels=["node", "source"])
        for source in (POD_RESOURCES, SMI) if self.pod_resources is not None else (SMI,):
            up.add_metric([self.node, source], 1.0 if self._up.get(source, False) else 0.0)
        yield up

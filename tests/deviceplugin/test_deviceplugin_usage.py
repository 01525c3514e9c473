"""Per-container usage through the device plugin's own /metrics endpoint: the plugin's view of
its grants (the kubelet ids each vDCU was granted for, after a restart too), a kubelet stand-in
answering the pod resources List on a real unix socket, the mock SMI's numbers changing between
two scrapes, and sources that do not answer (or a bug) never failing the scrape."""

import logging
import urllib.request
from concurrent import futures

import grpc
import pytest
from dp_helpers import dev
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from hami_dcu.cli.localcluster.kubelet import short_socket_dir
from hami_dcu.common.io.failures import Component, FailureReporter
from hami_dcu.common.io.metricsserver import serve
from hami_dcu.deviceplugin.usageview import plugin_view
from hami_dcu.node.api.podresources.v1 import api_pb2 as pr
from hami_dcu.node.api.podresources.v1 import api_pb2_grpc
from hami_dcu.node.podresources import PodResourcesClient
from hami_dcu.node.usagecollector import UsageCollector
from hami_dcu.node.usagesmi import MockUsage, UsageError

RESOURCE = "hygon.com/dcunum"


class Kubelet(api_pb2_grpc.PodResourcesListerServicer):
    """Answers what a kubelet would after admitting these pods: container -> the ids it passed
    to Allocate."""

    def __init__(self) -> None:
        self.pods: dict[str, list[str]] = {}

    def List(self, request, context):
        return pr.ListPodResourcesResponse(pod_resources=[
            pr.PodResources(name=name, namespace="default", containers=[pr.ContainerResources(
                name="c", devices=[pr.ContainerDevices(resource_name=RESOURCE, device_ids=ids)])])
            for name, ids in self.pods.items()])


@pytest.fixture
def kubelet():
    directory = short_socket_dir("pr-")
    socket = str(directory / "kubelet.sock")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = Kubelet()
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    yield servicer, socket
    server.stop(None)


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def of(families, name: str, **labels: str) -> list[float]:
    return [s.value for s in families.get(name, []) if labels.items() <= s.labels.items()]


def test_each_pods_vdcu_usage_is_served_with_its_namespace_pod_and_container_and_changes(dcu_node, kubelet):
    servicer, socket = kubelet
    core = dcu_node.core()
    dcu_node.bind("left", [("c", [dev("S1", 2000, 15)])])
    core.allocate([["DCU-S1-fake-2"]])
    dcu_node.bind("right", [("c", [dev("S1", 3000, 25)])])
    core.allocate([["DCU-S1-fake-0"]])
    dcu_node.bind("whole", [("c", [dev("S2", 65520, 100)])])
    core.allocate([["DCU-S2-fake-3"]])
    servicer.pods = {"left": ["DCU-S1-fake-2"], "right": ["DCU-S1-fake-0"], "whole": ["DCU-S2-fake-3"]}
    clock = Clock()
    core.metrics.registry.register(UsageCollector("dcu", "n1", lambda: plugin_view(core), MockUsage(clock=clock),
                                                  PodResourcesClient(socket, timeout=5)))
    server = serve(core.metrics, "127.0.0.1:0")
    try:
        first = scrape(server.server_port)
        clock.now += 1
        second = scrape(server.server_port)
    finally:
        server.shutdown()
    for name, memory, cus in (("left", 2000, 18), ("right", 3000, 30)):
        (before,) = of(first, "vdcu_utilizationrate", dcu_pod_namespace="default", dcu_pod_name=name, container="c",
                       node="n1", device_id="S1", minor_number="0", vdcu_computer_unit=str(cus),
                       vdcu_memory_cap=str(memory * 1024 * 1024))
        (after,) = of(second, "vdcu_utilizationrate", dcu_pod_name=name)
        assert before != after
        (used,) = of(first, "vdcu_usedmemory_bytes", dcu_pod_name=name)
        assert 0 < used < memory * 1024 * 1024
        assert of(first, "vdcu_usedmemory_bytes", dcu_pod_name=name) != of(second, "vdcu_usedmemory_bytes",
                                                                            dcu_pod_name=name)
    assert of(first, "dcu_utilizationrate", dcu_pod_name="whole", minor_number="1", pcieBus_number="0000:9F:00.0")
    assert of(first, "dcu_utilizationrate", minor_number="0", dcu_pod_name="") and not of(
        first, "dcu_utilizationrate", minor_number="0", dcu_pod_name="left")
    assert of(first, "hami_dcu_usage_source_up", source="podresources") == [1.0]
    assert of(first, "hami_dcu_usage_source_up", source="smi") == [1.0]


def test_the_ids_survive_a_restart_and_go_with_the_grant(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("a", [("c", [dev("S1", 1000, 15)])])
    core.allocate([["DCU-S2-fake-1"]])  # the kubelet's pick on another card: the grant follows the scheduler
    view = plugin_view(dcu_node.core())  # a restarted plugin
    (vdev,) = view.vdevs
    assert view.by_device_id["DCU-S2-fake-1"].vdev == vdev.vdev and view.by_device_id["DCU-S2-fake-1"].card_index == 0
    assert (vdev.cu_count, vdev.memory_mib) == (18, 1000)
    dcu_node.kube.delete_pod("default", "a")
    assert core.reconcile()
    assert not list(dcu_node.paths.state_dir.glob("*.ids"))
    assert plugin_view(core).by_device_id["DCU-S2-fake-1"].vdev is None  # a slot id of a card again


class Broken:
    def read(self, cards, vdevs):
        raise UsageError("driver gone")


def test_sources_that_do_not_answer_leave_their_part_out_and_the_scrape_stands(dcu_node, tmp_path):
    core = dcu_node.core()
    dcu_node.bind("a", [("c", [dev("S1", 1000, 15)])])
    core.allocate([["DCU-S1-fake-0"]])
    nowhere = PodResourcesClient(str(tmp_path / "no-kubelet.sock"), timeout=0.5)
    core.metrics.registry.register(UsageCollector("hcu", "n1", lambda: plugin_view(core), MockUsage(), nowhere))
    server = serve(core.metrics, "127.0.0.1:0")
    try:
        families = scrape(server.server_port)
    finally:
        server.shutdown()
    assert of(families, "hami_dcu_usage_source_up", source="podresources") == [0.0]
    assert of(families, "vhcu_utilizationrate", hcu_pod_name="")  # usage still, without whose
    assert "hami_dcu_plugin_vdevs" in families  # the plugin's own metrics are untouched

    broken = UsageCollector("hcu", "n1", lambda: plugin_view(core), Broken(), None)
    names = {f.name: f for f in broken.collect()}
    assert not names["vhcu_utilizationrate"].samples
    assert [s.value for s in names["hami_dcu_usage_source_up"].samples] == [0.0]

    def failing_view():
        raise RuntimeError("a bug")

    registry = CollectorRegistry()
    failures = FailureReporter(Component.DEVICE_PLUGIN, registry, logging.getLogger("t"))
    crashed = {f.name: f for f in UsageCollector("hcu", "n1", failing_view, MockUsage(), None, failures).collect()}
    assert not crashed["vhcu_utilizationrate"].samples and crashed["hami_dcu_usage_source_up"].samples[0].value == 0
    # a bug, counted as the plugin's bugs are
    assert registry.get_sample_value("hami_dcu_internal_errors_total", {"component": "device-plugin"}) == 1

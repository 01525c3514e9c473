"""The usage metrics' wiring from the shared node flags: made-up numbers for mock cards, a
reader that says why when the SMI library cannot be loaded, the kubelet's socket by default
and none when the flag is empty."""

import argparse

from prometheus_client import CollectorRegistry

from hami_dcu.common.io.failures import Component
from hami_dcu.node import usagemetrics
from hami_dcu.node.flags import add_node_arguments
from hami_dcu.node.podresources import DEFAULT_SOCKET
from hami_dcu.node.usage import CardFacts, NodeView
from hami_dcu.node.usagesmi import MockUsage


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_node_arguments(parser)
    args = parser.parse_args(["--node-name", "n1", *argv])
    args.naming = "hcu"  # a COMMON_FLAGS flag the cli adds to every subcommand
    return args


VIEW = NodeView("n1", (CardFacts(0, "S0", "K100_AI", "0000:3D:00.0", 65520),))


def test_mock_cards_get_made_up_numbers_and_the_kubelets_socket_by_default():
    args = parse("--smi", "mock")
    assert args.pod_resources_socket == DEFAULT_SOCKET and args.hydmi_library == "libhydmi.so"
    assert isinstance(usagemetrics.usage_reader(args), MockUsage)
    registry = CollectorRegistry()
    collector = usagemetrics.register(registry, Component.DEVICE_PLUGIN, lambda: VIEW, parse("--smi", "mock",
                                                                                          "--pod-resources-socket", ""))
    assert collector.pod_resources is None
    assert registry.get_sample_value("hcu_utilizationrate", {
        "device_id": "S0", "minor_number": "0", "name": "K100_AI", "node": "n1", "pcieBus_number": "0000:3D:00.0",
        "hcu_pod_namespace": "", "hcu_pod_name": "", "container": ""}) is not None
    assert registry.get_sample_value("hami_dcu_usage_source_up", {"node": "n1", "source": "smi"}) == 1


def test_an_smi_library_that_cannot_be_loaded_is_said_at_every_scrape_not_a_crash():
    args = parse("--rsmi-library", "/nonexistent/librocm_smi64.so", "--pod-resources-socket", "")
    registry = CollectorRegistry()
    usagemetrics.register(registry, Component.DRA_DRIVER, lambda: VIEW, args)
    assert registry.get_sample_value("hami_dcu_usage_source_up", {"node": "n1", "source": "smi"}) == 0
    assert registry.get_sample_value("hcu_utilizationrate", {"minor_number": "0"}) is None

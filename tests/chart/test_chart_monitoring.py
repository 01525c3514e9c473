"""The Grafana dashboard and the Prometheus monitors the chart ships (all off by default)."""

import json
import re
import subprocess

import pytest
from chart_paths import CHART
from prometheus_client import CollectorRegistry

from e2e.tools import SET_IMAGE
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.deviceplugin.metrics import PluginMetrics
from hami_dcu.dra.metrics import DriverMetrics
from hami_dcu.node.usage import NodeView
from hami_dcu.node.usagecollector import UsageCollector
from hami_dcu.node.usagesmi import MockUsage
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.metrics import SchedulerMetrics
from hami_dcu.webhook import certs
from hami_dcu.webhook.server import WebhookMetrics

METRIC_NAME = re.compile(r"\bhami_dcu_[a-z0-9_]+\b")
# Hygon's exporter series (per-pod usage): a name, not a label, is followed by its selector.
USAGE_NAME = re.compile(r"\b(v?(?:dcu|hcu)_[a-z_]+)\{")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
ON = ["--set", "metrics.dashboard.enabled=true", "--set", "metrics.serviceMonitor.enabled=true",
      "--set", "metrics.podMonitor.enabled=true", "--set", "devicePlugin.metricsPort=9400"]


@pytest.fixture(scope="module")
def exposed(tmp_path_factory) -> set[str]:
    """Every series name our processes can expose, from the registries they really build."""
    cert = tmp_path_factory.mktemp("tls") / "tls.crt"
    cert.write_bytes(certs.issue(["svc"]).cert)
    scheduler = SchedulerMetrics(ClusterCache(naming=DCU_NAMING))
    scheduler.watch_certificate(str(cert))
    WebhookMetrics(scheduler.registry)  # the extender serves the webhook, into its own registry
    names = set()
    for registry in (scheduler.registry, PluginMetrics(CollectorRegistry()).registry, DriverMetrics().registry):
        for family in registry.collect():
            names |= {family.name + suffix for suffix in SUFFIXES[family.type]}
    for naming in ("dcu", "hcu"):  # the node's usage series, in either naming set
        usage = UsageCollector(naming, "n1", lambda: NodeView("n1", ()), MockUsage(), None)
        names |= {family.name for family in usage.describe()}
    return names


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def dashboard_of(docs) -> dict:
    (config_map,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    return json.loads(config_map["data"]["hami-dcu.json"])


def test_everything_is_off_by_default(render):
    docs = render()
    assert not [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    assert not by_kind(docs, "ServiceMonitor") and not by_kind(docs, "PodMonitor")


def test_every_dashboard_query_names_a_metric_that_exists(render, exposed):
    dashboard = dashboard_of(render(*ON))
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 20
    named = {name for q in queries for name in METRIC_NAME.findall(q) + USAGE_NAME.findall(q)}
    assert named - exposed == set()
    # per-pod usage in both naming sets, vDCUs and cards held whole
    assert {"vdcu_utilizationrate", "vhcu_utilizationrate", "vdcu_usedmemory_bytes", "vhcu_usedmemory_bytes",
            "dcu_utilizationrate", "hcu_usedmemory_bytes", "hami_dcu_usage_source_up"} <= named
    # capacity sits beside allocation, so utilisation is computed, and the certificate is watched
    assert {"hami_dcu_card_memory_mib", "hami_dcu_card_allocated_memory_mib",
            "hami_dcu_certificate_expiry_timestamp_seconds", "hami_dcu_pods_bind_phase",
            "hami_dcu_scheduler_node_lock_takeovers_total"} <= named
    for query in queries:
        assert query.count("(") == query.count(")"), query


def test_a_query_naming_a_missing_metric_is_caught(exposed):
    # The check above compares against real names: a typo is not among them.
    assert "hami_dcu_card_memory_mb" not in exposed and "hami_dcu_card_memory_mib" in exposed


def test_dashboard_configmap_carries_the_grafana_sidecar_label(render):
    docs = render(*ON, "--set", "metrics.dashboard.namespace=monitoring")
    (config_map,) = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert dashboard_of(docs)["uid"] == "hami-dcu"


def test_monitors_scrape_the_metrics_ports(render):
    docs = render(*ON, "--set", "metrics.serviceMonitor.labels.release=prom")
    (service_monitor,) = by_kind(docs, "ServiceMonitor")
    assert service_monitor["metadata"]["labels"]["release"] == "prom"
    assert [e["port"] for e in service_monitor["spec"]["endpoints"]] == ["metrics"]
    selected = service_monitor["spec"]["selector"]["matchLabels"]
    services = [s for s in by_kind(docs, "Service")
                if selected.items() <= s["metadata"]["labels"].items()]
    assert sorted(s["metadata"]["name"] for s in services) == ["hami-dcu-device-plugin-metrics",
                                                                "hami-dcu-scheduler-metrics"]
    (pod_monitor,) = by_kind(docs, "PodMonitor")
    assert [e["port"] for e in pod_monitor["spec"]["podMetricsEndpoints"]] == ["metrics"]
    # the ports they name exist on the pods the Services select
    for workload in by_kind(docs, "Deployment") + by_kind(docs, "DaemonSet"):
        ports = [p.get("name") for c in workload["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])]
        assert "metrics" in ports, workload["metadata"]["name"]


def test_monitor_interval_is_checked_by_the_schema(helm):
    done = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE,
                           "--set", "metrics.podMonitor.interval=soon"], capture_output=True, text=True)
    assert done.returncode != 0 and "interval" in done.stderr

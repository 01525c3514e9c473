"""The chart's NetworkPolicy against a network plugin that enforces it (issue 35, finding 9).

The policy lets the API server reach the webhook port and the `monitoring` namespace reach the
metrics ports, and nothing else reach the chart's pods. On a cluster whose network plugin does
not enforce NetworkPolicy it is words; here kube-router's firewall enforces it on the kind
cluster (e2e/kind_netpol.py), and a pod in another namespace tries every port:

* before enforcement it reaches the webhook and the metrics ports (the probe works);
* with enforcement it reaches none of them, nor kube-scheduler's port in the scheduler pod (the
  extender's own port is on the pod's loopback: closed before and after);
* a pod of the `monitoring` namespace still reaches the metrics ports, not the webhook;
* the API server still reaches the webhook: a DCU pod created meanwhile is mutated and runs.

    pytest -m kind e2e/test_kind_networkpolicy.py
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e import kind_netpol
from e2e.kindcluster import METRICS_PORT, RELEASE_NAMESPACE, WORKERS, KindBackend
from e2e.scenarios import wait_running
from hami_dcu.cli.localcluster.pods import Ctr, pod_manifest
from hami_dcu.common.protocol import keys

pytestmark = pytest.mark.kind

INTRUDER_NS, MONITORING_NS = "hami-e2e-intruder", "monitoring"
WEBHOOK_PORT, SCHEDULER_METRICS_PORT, KUBE_SCHEDULER_PORT, EXTENDER_PORT = 9443, 9395, 10259, 8443


def _pod_ip(b: KindBackend, component: str, node: str | None = None) -> str:
    selector = f"app.kubernetes.io/component={component}"
    pods = b.kube.list_pods(namespace=RELEASE_NAMESPACE, label_selector=selector).items
    pods = [p for p in pods if node is None or p["spec"].get("nodeName") == node]
    assert pods, f"no {component} pod{' on ' + node if node else ''}"
    return str(pods[0]["status"]["podIP"])


@pytest.fixture(scope="module")
def probes(kind: KindBackend) -> Iterator[KindBackend]:
    kind.ensure_mode("devicePlugin")
    kind.clean()
    for namespace in (INTRUDER_NS, MONITORING_NS):
        if namespace not in kind.kubectl("get", "namespaces", "-o", "name"):
            kind.kubectl("create", "namespace", namespace)
        kind.kube.create_pod(namespace, kind_netpol.prober("probe", namespace))
    try:
        for namespace in (INTRUDER_NS, MONITORING_NS):
            kind.kubectl("wait", "-n", namespace, "pod/probe", "--for=condition=Ready", "--timeout=120s",
                         timeout=150)
        yield kind
    finally:
        kind_netpol.uninstall(kind)
        for namespace in (INTRUDER_NS, MONITORING_NS):
            kind.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")


def test_the_chart_network_policy_holds_under_an_enforcing_network_plugin(probes: KindBackend) -> None:
    b = probes
    scheduler = _pod_ip(b, "scheduler")
    plugin = _pod_ip(b, "device-plugin", WORKERS[0])
    policies = b.kubectl("get", "networkpolicies", "-n", RELEASE_NAMESPACE, "-o", "name")
    assert "networkpolicy.networking.k8s.io/hami-dcu-scheduler" in policies.split(), policies

    # Without enforcement the intruder reaches both: the probe can tell open from closed.
    assert kind_netpol.reaches(b, INTRUDER_NS, "probe", scheduler, WEBHOOK_PORT)
    assert kind_netpol.reaches(b, INTRUDER_NS, "probe", scheduler, SCHEDULER_METRICS_PORT)
    # The extender's /filter and /bind listen on the pod's loopback only: closed with or without
    # a policy (kube-scheduler, its neighbour in the pod, is the one caller).
    assert not kind_netpol.reaches(b, INTRUDER_NS, "probe", scheduler, EXTENDER_PORT)

    kind_netpol.install(b)
    kind_netpol.wait_reachability(b, INTRUDER_NS, "probe", scheduler, SCHEDULER_METRICS_PORT, expected=False)
    closed = {f"{address}:{port}": kind_netpol.reaches(b, INTRUDER_NS, "probe", address, port)
              for address, port in ((scheduler, WEBHOOK_PORT), (scheduler, SCHEDULER_METRICS_PORT),
                                    (scheduler, KUBE_SCHEDULER_PORT), (scheduler, EXTENDER_PORT),
                                    (plugin, METRICS_PORT))}
    assert not any(closed.values()), f"reached from namespace {INTRUDER_NS}: {closed}"

    # Selective, not a wall: the monitoring namespace scrapes, and still cannot post reviews.
    assert kind_netpol.reaches(b, MONITORING_NS, "probe", scheduler, SCHEDULER_METRICS_PORT)
    assert kind_netpol.reaches(b, MONITORING_NS, "probe", plugin, METRICS_PORT)
    assert not kind_netpol.reaches(b, MONITORING_NS, "probe", scheduler, WEBHOOK_PORT)

    # The API server is let through: a DCU pod is mutated by the webhook and runs.
    b.kube.create_pod(b.namespace, pod_manifest("through", [Ctr("main", 1, 1000, 10)]))
    pod = wait_running(b, "through", timeout=120)
    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    assert (pod["metadata"].get("annotations") or {}).get(keys.DCU_NAMING.pod_devices_allocated)

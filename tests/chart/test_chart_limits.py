"""Resources, connection limits and NetworkPolicies in the chart (issue 21, item 4)."""

import pytest

WORKLOADS = ("Deployment", "DaemonSet", "Job", "CronJob", "Pod")


def pod_spec(doc: dict) -> dict:
    if doc["kind"] == "Pod":
        return doc["spec"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return doc["spec"]["template"]["spec"]


def containers(docs: list[dict]) -> list[tuple[str, dict]]:
    return [(f"{d['metadata']['name']}/{c['name']}", c) for d in docs if d["kind"] in WORKLOADS
            for c in pod_spec(d).get("containers", []) + pod_spec(d).get("initContainers", [])]


def policies(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["name"].rsplit("-", 1)[-1] if not d["metadata"]["name"].endswith("plugin")
            else "device-plugin": d["spec"] for d in docs if d["kind"] == "NetworkPolicy"}


@pytest.mark.parametrize("values", [
    [],
    ["--set", "mode=dra"],
    ["--set", "devicePlugin.smi=mock", "--set", "devicePlugin.metricsPort=9394"],
])
def test_every_container_has_requests_and_limits(render, values):
    found = containers(render(*values, kube_version="1.34.0"))  # DRA mode renders from 1.34
    assert len(found) >= 5
    for name, container in found:
        resources = container.get("resources") or {}
        for part in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources.get(part) or {}), f"{name}: no {part}"


def extender_args(docs: list[dict]) -> list[str]:
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (extender,) = [c for c in pod_spec(deployment)["containers"] if c["name"] == "extender"]
    return extender["args"]


def test_connection_limits_reach_every_server(render):
    docs = render("--set", "httpLimits.headerTimeoutSeconds=5", "--set", "httpLimits.maxConnectionsPerClient=7",
                  "--set", "devicePlugin.metricsPort=9394")
    args = extender_args(docs)
    assert "--header-timeout=5" in args and "--max-connections-per-client=7" in args
    assert "--max-connections=96" in args and "--tls-handshake-timeout=10" in args
    (plugin,) = [d for d in docs if d["kind"] == "DaemonSet"]
    assert "--header-timeout=5" in pod_spec(plugin)["containers"][0]["args"]


@pytest.mark.parametrize("setting", ["httpLimits.headerTimeoutSeconds=0", "httpLimits.maxConnections=0",
                                     "networkPolicy.apiServer.cidrs={not-a-cidr}"])
def test_nonsense_limits_are_refused(helm, setting):
    import subprocess

    from chart_paths import CHART

    from e2e.tools import SET_IMAGE

    result = subprocess.run([str(helm), "template", "x", str(CHART), *SET_IMAGE, "--set", setting], capture_output=True,
                            text=True)
    assert result.returncode != 0 and "values don't meet the specifications of the schema" in result.stderr


def test_network_policies_by_default(render):
    found = policies(render())
    scheduler, plugin = found["scheduler"], found["device-plugin"]
    webhook_rule, metrics_rule = scheduler["ingress"]
    assert webhook_rule["ports"] == [{"protocol": "TCP", "port": 9443}]
    # `helm template` cannot look up the API server's addresses: the webhook port stays open (documented).
    assert "from" not in webhook_rule
    assert metrics_rule == {"ports": [{"protocol": "TCP", "port": 9395}], "from": [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}
    assert plugin["ingress"] == [] and plugin["policyTypes"] == ["Ingress"]


def test_the_webhook_port_admits_only_the_configured_api_server(render):
    found = policies(render("--set", "networkPolicy.apiServer.cidrs={10.0.0.10/32,fd00::1/128}"))
    webhook_rule = found["scheduler"]["ingress"][0]
    blocks = [peer["ipBlock"]["cidr"] for peer in webhook_rule["from"] if "ipBlock" in peer]
    assert blocks == ["10.0.0.10/32", "fd00::1/128"]
    selectors = [peer["podSelector"]["matchLabels"] for peer in webhook_rule["from"] if "podSelector" in peer]
    assert selectors == [{"app.kubernetes.io/name": "hami-dcu", "app.kubernetes.io/instance": "hami-dcu",
                          "app.kubernetes.io/component": "test"}]  # `helm test`'s pod, and no other


def test_metrics_of_device_plugins_only_from_monitoring(render):
    found = policies(render("--set", "devicePlugin.metricsPort=9394", "--set-json",
                            'networkPolicy.metricsFrom=[{"podSelector":{"matchLabels":{"app":"prometheus"}}}]'))
    assert found["device-plugin"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": 9394}],
                                                 "from": [{"podSelector": {"matchLabels": {"app": "prometheus"}}}]}]


def test_dra_mode_closes_the_driver_and_policies_can_be_switched_off(render):
    assert policies(render("--set", "mode=dra", kube_version="1.34.0"))["driver"]["ingress"] == []
    assert policies(render("--set", "networkPolicy.enabled=false")) == {}

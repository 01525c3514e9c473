"""The node DaemonSets reach the kubelet's pod resources socket read-only, in both modes, when
they serve metrics (the usage metrics live there), and not otherwise; the socket they are
given is the one the command looks for."""

import pytest

from hami_dcu.node.podresources import DEFAULT_SOCKET

POD_RESOURCES = "/var/lib/kubelet/pod-resources"


def node_pod(docs, component: str) -> dict:
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"].endswith(component)]
    return ds["spec"]["template"]["spec"]


def pod_resources(spec: dict) -> tuple[dict | None, dict | None]:
    volume = next((v for v in spec["volumes"] if v["name"] == "pod-resources"), None)
    mount = next((m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "pod-resources"), None)
    return volume, mount


@pytest.mark.parametrize("mode, component, port", [("devicePlugin", "device-plugin", "devicePlugin.metricsPort"),
                                                   ("dra", "dra-driver", "draDriver.metricsPort")])
@pytest.mark.parametrize("smi", ["rsmi", "mock"])
def test_the_pod_resources_socket_is_mounted_read_only_where_metrics_are_served(render, mode, component, port, smi):
    common = ["--set", f"mode={mode}", "--set", f"devicePlugin.smi={smi}"]
    volume, mount = pod_resources(node_pod(render(*common, "--set", f"{port}=9400", kube_version="1.35.0"),
                                           component))
    assert volume == {"name": "pod-resources", "hostPath": {"path": POD_RESOURCES, "type": "DirectoryOrCreate"}}
    assert mount == {"name": "pod-resources", "mountPath": POD_RESOURCES, "readOnly": True}
    assert DEFAULT_SOCKET.startswith(POD_RESOURCES + "/")
    assert pod_resources(node_pod(render(*common, kube_version="1.35.0"), component)) == (None, None)


@pytest.mark.parametrize("smi", ["rsmi", "mock"])
@pytest.mark.parametrize("metrics", [[], ["--set", "devicePlugin.metricsPort=9400"]])
@pytest.mark.parametrize("extender", ["false", "true"])
def test_in_volcano_mode_the_device_plugin_reaches_the_socket_with_or_without_metrics(render, smi, metrics, extender):
    """Volcano mode (the fork's or upstream Volcano's through the extender): with several pods
    awaiting an Allocate and no node lock, the device plugin asks the kubelet's List which one
    it admits (deviceplugin/admissions.py), metrics or not."""
    volcano = ["--set", "naming=hcu", "--set", "volcano.enabled=true", "--set", f"volcano.extender.enabled={extender}"]
    volume, mount = pod_resources(node_pod(render("--set", f"devicePlugin.smi={smi}", *volcano, *metrics),
                                           "device-plugin"))
    assert volume == {"name": "pod-resources", "hostPath": {"path": POD_RESOURCES, "type": "DirectoryOrCreate"}}
    assert mount == {"name": "pod-resources", "mountPath": POD_RESOURCES, "readOnly": True}

"""The whole system speaking the hcu names (HAMi master, Hygon's plugin v3), built with the
hcu Naming: the plugin registers and advertises hcu names, the extender reads them, the
allocation carries HCU ids, and a pod written with the dcu names is renamed at admission.
Nothing in the test process is switched to build it."""

from e2e.scenarios import wait_running
from hami_dcu.cli.localcluster.cluster import LocalCluster
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import decode_node_devices, decode_pod_devices

HCU = keys.HCU_NAMING


def test_the_hcu_set_end_to_end():
    with LocalCluster({"node0": default_cards("node0")}, naming=HCU) as cluster:
        written = [Ctr("main", 1, 2000, 15, names=HCU.resources)]
        created = cluster.kube.create_pod(cluster.namespace, pod_manifest("shared", written))
        assert created["spec"]["containers"][0]["resources"]["limits"] == {
            "hygon.com/hcunum": "1", "hygon.com/hcumem": "2k", "hygon.com/hcucores": "15"}
        pod = wait_running(cluster, "shared")
        annotations = pod["metadata"]["annotations"]
        ((device,),) = decode_pod_devices(annotations["hami.io/hcu-devices-allocated"])
        assert device.uuid.startswith("HCU-NODE0S") and device.type == "HCU"
        assert "hami.io/dcu-devices-allocated" not in annotations
        node = cluster.kube.get_node("node0")
        registered = decode_node_devices(node["metadata"]["annotations"]["hami.io/node-hcu-register"])
        assert [card.type for card in registered] == ["HCU-K100_AI", "HCU-K100_AI"]
        assert "hami.io/node-dcu-register" not in node["metadata"]["annotations"]
        assert node["status"]["allocatable"]["hygon.com/hcunum"] == "8"

        written_for_dcu = pod_manifest("legacy", [])
        written_for_dcu["spec"]["containers"] = [{"name": "main", "image": "busybox", "resources": {
            "limits": {"hygon.com/dcunum": "1", "hygon.com/dcumem": "1000", "hygon.com/dcucores": "10"}}}]
        renamed = cluster.kube.create_pod(cluster.namespace, written_for_dcu)
        assert renamed["spec"]["containers"][0]["resources"]["limits"] == {
            "hygon.com/hcunum": "1", "hygon.com/hcumem": "1k", "hygon.com/hcucores": "10"}
        assert wait_running(cluster, "legacy")["spec"]["nodeName"] == "node0"

"""`hami-dcu status` and `kubectl hami-dcu status` against an API server (the local one)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hami_dcu.cli.main import main
from hami_dcu.common import keys
from hami_dcu.common.codec import ContainerDevice, NodeDevice, encode_node_devices, encode_pod_devices
from hami_dcu.e2e.tools import helm_and_kubectl

BIN = Path(sys.executable).parent


@pytest.fixture
def cluster(kube, api_server):
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "team"}})
    register = encode_node_devices([NodeDevice(f"DCU-S{i}", 4, 65520, 100, "DCU-K100_AI", index=i) for i in range(2)])
    kube.create_node({"metadata": {"name": "gpu1", "annotations": {keys.NODE_REGISTER: register}}})
    kube.create_node({"metadata": {"name": "cpu1"}})
    for name, phase in (("live", "Running"), ("finished", "Succeeded")):
        allocated = encode_pod_devices([[ContainerDevice("DCU-S1", "DCU", 2000, 15)]])
        kube.create_pod("team", {
            "metadata": {"name": name, "annotations": {keys.POD_DEVICES_ALLOCATED: allocated}},
            "spec": {"nodeName": "gpu1", "containers": [{"name": "main", "image": "x"}]}})
        pod = kube.request("GET", f"/api/v1/namespaces/team/pods/{name}")
        pod["status"] = {"phase": phase}
        kube.request("PUT", f"/api/v1/namespaces/team/pods/{name}/status", body=pod)
    return api_server.kubeconfig_path


def test_status_reads_nodes_and_live_pods_through_the_api(cluster, capsys):
    assert main(["status", "--kubeconfig", str(cluster), "-o", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [n["name"] for n in document["nodes"]] == ["gpu1"]
    card = document["nodes"][0]["cards"][1]
    assert card["id"] == "DCU-S1" and card["memory_used_mib"] == 2000 and card["slots_used"] == 1
    assert [s["pod"] for s in card["shares"]] == ["live"]


def test_status_for_an_unknown_node_or_one_without_dcus_says_so(cluster, capsys):
    assert main(["status", "--kubeconfig", str(cluster), "--node", "nope"]) == 1
    assert main(["status", "--kubeconfig", str(cluster), "--node", "cpu1"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["hami-dcu status: node nope not found",
                   "hami-dcu status: node cpu1 has no DCUs registered (no hami.io/node-dcu-register)"]


def test_kubeconfig_path_list_and_context_like_kubectl(cluster, tmp_path, capsys, monkeypatch):
    missing = tmp_path / "missing"
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join([str(missing), str(cluster)]))
    assert main(["status", "--context", "local"]) == 0
    assert "cluster: 1 node, 2 cards" in capsys.readouterr().out
    assert main(["status", "--context", "elsewhere"]) == 2
    assert "elsewhere" in capsys.readouterr().err


def test_kubectl_plugin_runs_status(cluster):
    tools = helm_and_kubectl()
    if tools is None:
        pytest.skip("kubectl not available")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG": str(cluster)}
    listed = subprocess.run([str(tools[1]), "plugin", "list"], env=env, capture_output=True, text=True)
    assert "kubectl-hami_dcu" in listed.stdout
    done = subprocess.run([str(tools[1]), "hami-dcu", "status", "--node", "gpu1"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "DCU-S1" in done.stdout and "team/live/main (2000 MiB, 15%)" in done.stdout

"""`hami-dcu status` and `kubectl hami-dcu status` against an API server (the local one)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from e2e.tools import helm_and_kubectl
from hami_dcu.cli.main import main
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, NodeDevice, encode_node_devices, encode_pod_devices

DCU = keys.DCU_NAMING  # the naming set these tests speak

BIN = Path(sys.executable).parent


@pytest.fixture
def cluster(kube, api_server):
    kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "team"}})
    register = encode_node_devices([NodeDevice(f"DCU-S{i}", 4, 65520, 100, "DCU-K100_AI", index=i) for i in range(2)])
    kube.create_node({"metadata": {"name": "gpu1", "annotations": {DCU.node_register: register}}})
    kube.create_node({"metadata": {"name": "cpu1"}})
    for name, phase in (("live", "Running"), ("finished", "Succeeded")):
        allocated = encode_pod_devices([[ContainerDevice("DCU-S1", "DCU", 2000, 15)]])
        kube.create_pod("team", {
            "metadata": {"name": name, "annotations": {DCU.pod_devices_allocated: allocated}},
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
                   "hami-dcu status: node cpu1 has no DCUs registered (no hami.io/node-dcu-register and no "
                   "ResourceSlice of dra.hygon.com)"]


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


def test_status_reads_home_kube_config_as_kubectl_does(cluster, tmp_path, capsys, monkeypatch):
    # issue 23: without --kubeconfig or KUBECONFIG, kubectl reads ~/.kube/config
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(Path(cluster).read_text())
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert main(["status"]) == 0, capsys.readouterr().err
    assert "cluster: 1 node, 2 cards" in capsys.readouterr().out


def test_all_namespaces_is_accepted_and_an_unknown_namespace_is_an_error(cluster, capsys):
    assert main(["status", "--kubeconfig", str(cluster), "-A"]) == 0
    everything = capsys.readouterr().out
    assert "team/live/main" in everything
    assert main(["status", "--kubeconfig", str(cluster), "--all-namespaces", "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["pods"] == 1
    assert main(["status", "--kubeconfig", str(cluster), "-n", "nosuchns"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == "hami-dcu status: namespace nosuchns not found\n"
    assert main(["status", "--kubeconfig", str(cluster), "-n", "team"]) == 0
    assert "team/live/main" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["status", "--kubeconfig", str(cluster), "-n", "team", "-A"])
    assert exited.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_status_shows_a_waiting_dcu_pod_with_its_request_and_latest_reason(cluster, kube, capsys):
    waiting = kube.create_pod("team", {
        "metadata": {"name": "waits"},
        "spec": {"schedulerName": keys.DEFAULT_SCHEDULER_NAME, "containers": [{"name": "main", "image": "x",
                 "resources": {"limits": {DCU.resources.count: "1", DCU.resources.memory: "3000",
                                          DCU.resources.cores: "30"}}}]}})
    kube.create_pod("team", {"metadata": {"name": "plain"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    kube.create_event(waiting, "FilteringFailed", "an older reason", "Warning", component="hami-scheduler")
    time.sleep(1.1)  # events carry seconds: the next one is the latest
    kube.create_event(waiting, "FailedScheduling", "0/1 nodes are available: 1 insufficient card memory",
                      "Warning", component="hami-scheduler")
    kube.create_event(waiting, "Scheduled", "a Normal event is no reason", "Normal")
    assert main(["status", "--kubeconfig", str(cluster)]) == 0
    out = capsys.readouterr().out
    header, row = [line for line in out.splitlines() if "team/waits" in line or line.startswith("PENDING POD")]
    assert header.split() == ["PENDING", "POD", "REQUEST", "AGE", "REASON"]
    assert "1 x (3000 MiB, 30%)" in row and row.endswith("0/1 nodes are available: 1 insufficient card memory")
    assert "team/plain" not in out
    assert main(["status", "--kubeconfig", str(cluster), "-o", "json"]) == 0
    (pending,) = json.loads(capsys.readouterr().out)["pending"]
    assert pending["name"] == "waits" and pending["reason_source"] == "FailedScheduling (hami-scheduler)"
    assert main(["status", "--kubeconfig", str(cluster), "-n", "default"]) == 0
    assert "PENDING" not in capsys.readouterr().out


# --- issue 39 -----------------------------------------------------------------------------


def test_an_unknown_context_names_the_ones_there_are(cluster, capsys):
    assert main(["status", "--kubeconfig", str(cluster), "--context", "nope"]) == 2
    assert capsys.readouterr().err == f"hami-dcu status: no context nope in {cluster} (contexts: local)\n"


def test_a_context_without_any_kubeconfig_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("KUBECONFIG", raising=False)
    assert main(["status", "--context", "nope"]) == 2
    assert capsys.readouterr().err == ("hami-dcu status: no context nope: there is no kubeconfig to take it from (no "
                                       "--kubeconfig, KUBECONFIG or ~/.kube/config)\n")


def test_status_in_the_other_naming_set_says_which_one_the_cluster_speaks(cluster, capsys):
    # The cluster speaks dcu: with --naming hcu status showed no card and a waiting pod's REQUEST "-".
    assert main(["status", "--kubeconfig", str(cluster), "--naming", "hcu"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "hami-dcu status: no hcu registrations found; this cluster speaks dcu: try --naming dcu\n"
    assert main(["status", "--kubeconfig", str(cluster), "--naming", "hcu", "--node", "gpu1"]) == 1
    assert "try --naming dcu" in capsys.readouterr().err


def test_the_naming_hint_only_when_the_other_set_is_there():
    from hami_dcu.cli.cardusage import naming_hint

    hcu, dcu = keys.HCU_NAMING, keys.DCU_NAMING
    dcu_node = {"metadata": {"name": "n", "annotations": {dcu.node_handshake: "Reported now"}}}
    hcu_node = {"metadata": {"name": "m", "annotations": {hcu.node_register: ""}}}
    asking = {"metadata": {"name": "p"},
              "spec": {"containers": [{"name": "c", "resources": {"limits": {dcu.resources.count: "1"}}}]}}
    assert naming_hint([], [], hcu) is None  # nothing of either: nothing to hint at
    assert naming_hint([dcu_node], [], dcu) is None
    assert naming_hint([dcu_node, hcu_node], [], hcu) is None  # a mixed cluster speaks both
    assert naming_hint([{"metadata": {"name": "plain"}}], [asking], hcu) == (
        "no hcu registrations found; this cluster speaks dcu: try --naming dcu")
    assert naming_hint([hcu_node], [], dcu) == "no dcu registrations found; this cluster speaks hcu: try --naming hcu"

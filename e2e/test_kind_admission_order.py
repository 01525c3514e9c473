"""Which pod a kubelet's Allocate serves when several await one on a node (issue 34: a Volcano
gang places several DCU shares on one node in one session, past HAMi's one-pod node lock).

A real kubelet (kind, v1.37) and a throwaway device plugin of its own resource
(e2e/kind/admission_probe.py): four pods asking for it are bound straight to one node in quick
succession (spec.nodeName, as Volcano's binder binds), one of them with two such containers.
Inside each Allocate the probe asks the kubelet's pod resources List and holds the call a
moment; every container it serves is told the number of its call (PROBE_SEQ), which says which
container each call really served. The kubelet's source says what to expect
(docs/architecture.md, Which pod an Allocate serves without the lock); this holds it to it:

- the Allocates come strictly one after another, never two at once;
- during each, the pod being admitted is listed, its container being served holding no ids,
  and every other pod of the gang either is not listed yet or is listed with all its ids;
- deviceplugin/admitting.py, given the gang as the API shows it (all Pending, all awaiting) and
  the List answer of the call, names the pod the call served.

    pytest -m kind e2e/test_kind_admission_order.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from e2e.kindcluster import WORKERS, KindBackend
from e2e.scenarios import wait_until
from hami_dcu.cli.localcluster.pods import POD_IMAGE
from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin import admitting, lockless

pytestmark = pytest.mark.kind

RESOURCE = "hami-dcu.test/admission-probe"
PROBE = "admission-probe"
SCRIPT = Path(__file__).resolve().parent / "kind" / "admission_probe.py"
HOLD_SECONDS = "1"  # each Allocate is held this long: a second call made meanwhile would overlap it
# The gang: pod name -> how many of the probe's devices each of its containers asks for.
GANG = {"gang-0": [1], "gang-1": [2], "gang-2": [1, 1], "gang-3": [1]}
JSON = dict[str, Any]


def _probe_pod(kind: KindBackend, node: str) -> JSON:
    plugins, podresources = "/var/lib/kubelet/device-plugins", "/var/lib/kubelet/pod-resources"
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": PROBE},
        "spec": {
            "nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "probe", "image": kind.image, "imagePullPolicy": "Never",
                "command": ["python3", "/probe/admission_probe.py", RESOURCE, HOLD_SECONDS],
                "securityContext": {"runAsUser": 0},
                "volumeMounts": [{"name": "script", "mountPath": "/probe"},
                                 {"name": "plugins", "mountPath": plugins},
                                 {"name": "podresources", "mountPath": podresources}],
            }],
            "volumes": [{"name": "script", "configMap": {"name": PROBE}},
                        {"name": "plugins", "hostPath": {"path": plugins}},
                        {"name": "podresources", "hostPath": {"path": podresources}}],
        },
    }


def _gang_pod(name: str, asks: list[int], node: str) -> JSON:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": f"c{i}", "image": POD_IMAGE, "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", "echo PROBE_SEQ=$PROBE_SEQ; sleep 3600"],
                "resources": {"limits": {RESOURCE: str(n)}},
            } for i, n in enumerate(asks)],
        },
    }


def _events(kind: KindBackend) -> list[JSON]:
    log = kind.kubectl("logs", "-n", kind.namespace, PROBE, timeout=30)
    return [json.loads(line) for line in log.splitlines() if line.startswith("{")]


def _cleanup(kind: KindBackend) -> None:
    kind.kubectl("delete", "pods", "-n", kind.namespace, PROBE, *GANG, "--ignore-not-found", "--wait=true",
                 "--grace-period=1", timeout=120)
    kind.kubectl("delete", "configmap", "-n", kind.namespace, PROBE, "--ignore-not-found")


def test_the_kubelet_admits_one_pod_at_a_time_and_pod_resources_shows_which(kind: KindBackend) -> None:
    node = WORKERS[0]
    _cleanup(kind)
    kind.kubectl("create", "configmap", "-n", kind.namespace, PROBE, f"--from-file=admission_probe.py={SCRIPT}")
    try:
        kind.kube.create_pod(kind.namespace, _probe_pod(kind, node))

        def offered() -> bool:
            allocatable = kind.kube.get_node(node)["status"].get("allocatable") or {}
            return int(allocatable.get(RESOURCE, "0")) > 0

        wait_until(f"the probe's {RESOURCE} offered by {node}", offered, timeout=60, interval=0.5)

        created = [kind.kube.create_pod(kind.namespace, _gang_pod(name, asks, node)) for name, asks in GANG.items()]

        def all_running() -> bool:
            for name in GANG:
                status = kind.kube.get_pod(kind.namespace, name).get("status") or {}
                assert status.get("phase") != "Failed", f"{name} failed: {status.get('message')}"
                if status.get("phase") != "Running":
                    return False
            return True

        wait_until("the gang Running", all_running, timeout=90, interval=0.5)

        # Which container each Allocate served, from the containers themselves.
        served: dict[int, tuple[str, str]] = {}
        for name, asks in GANG.items():
            for i in range(len(asks)):
                out = wait_until(f"{name}/c{i}'s output", lambda n=name, c=i: kind.kubectl(
                    "logs", "-n", kind.namespace, n, "-c", f"c{c}", timeout=30).strip(), timeout=30, interval=0.5)
                served[int(out.removeprefix("PROBE_SEQ="))] = (name, f"c{i}")
        events = _events(kind)
    finally:
        _cleanup(kind)

    calls = [e for e in events if e["event"] in ("enter", "exit")]
    assert sorted(served) == list(range(1, 1 + sum(len(a) for a in GANG.values()))), (served, events)
    # One after another: every call ends before the next begins.
    assert [(e["event"], e["seq"]) for e in calls] == [
        (kind_, seq) for seq in sorted(served) for kind_ in ("enter", "exit")], calls
    assert all(e["inflight"] == 1 for e in calls if e["event"] == "enter"), calls

    awaiting = [a.pod for a in lockless.awaiting_pods(created, node, RESOURCE, keys.DCU_NAMING.pod_devices_to_allocate)]
    assert {p["metadata"]["name"] for p in awaiting} == set(GANG)
    admitted: set[str] = set()
    for listing in (e for e in events if e["event"] == "list"):
        seq = listing["seq"]
        pod, container = served[seq]
        listed = {p["name"]: p["containers"] for p in listing["pods"] if p["namespace"] == kind.namespace}
        assert pod in listed, f"call {seq} served {pod}, which List did not show: {listed}"
        assert listed[pod][container] == [], f"call {seq} served {pod}/{container}, listed with {listed[pod]}"
        for other in set(GANG) - {pod}:
            if other in admitted:
                assert all(listed[other].values()), f"call {seq}: {other}, admitted earlier, listed as {listed[other]}"
            else:
                assert other not in listed, f"call {seq}: {other}, not admitted yet, listed as {listed[other]}"
        answer = [admitting.Listed(p["namespace"], p["name"], {c: tuple(ids) for c, ids in p["containers"].items()})
                  for p in listing["pods"]]
        [enter] = [e for e in events if e["event"] == "enter" and e["seq"] == seq]
        named = admitting.admitting_pod(awaiting, created, answer, RESOURCE, len(enter["ids"][0]))
        assert named["metadata"]["name"] == pod, f"call {seq} served {pod}, admitting_pod named {named['metadata']}"
        admitted.add(pod)

"""Card health as device taints, on a real control plane (issue 36, item 1): kube-apiserver
and kube-scheduler v1.37.2 (DRADeviceTaints and DRADeviceTaintRules GA, on by default), the
chart in DRA mode, one node with two cards behind the mock SMI. A card made unhealthy (the
driver pod's mock SMI file rewritten, as a failing card would answer) stays in the slice with a
taint saying why: the claim on it keeps running, new claims go to the other card, a claim that
tolerates the taint still gets it, and recovery clears it. With
draDriver.unhealthyTaintEffect=NoExecute (a `helm upgrade`), kube-controller-manager evicts the
pods on the card that do not tolerate it. A DeviceTaintRule takes a card out for maintenance,
and `hami-dcu status` says which cards are tainted and why.

A module of its own: it needs a two-card node, where test_realcluster_dra.py's cases count
on one card.

    pytest e2e/test_realcluster_dra_health.py
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.realcluster.cluster import RELEASE, SYSTEM_NAMESPACE, _merge, unavailable
from e2e.realcluster.dra_cluster import DraRealCluster
from e2e.scenarios import phase, wait_until
from e2e.tools import ROOT
from hami_dcu.cli.localcluster.pods import MockCard
from hami_dcu.cli.main import main as cli_main
from hami_dcu.common.protocol.dra import names
from hami_dcu.dra.slices import UNHEALTHY_TAINT

JSON = dict[str, Any]
NODE = "node0"
CARD_A = MockCard(serial="HA", pci_bus_id="0000:3D:00.0")
CARD_B = MockCard(serial="HB", pci_bus_id="0000:9F:00.0")
DEV_A, DEV_B = names.device_name(CARD_A.pci_bus_id), names.device_name(CARD_B.pci_bus_id)
CLAIMS = f"{names.RESOURCE_API}/namespaces/hami-e2e/resourceclaims"
RULES = f"{names.RESOURCE_API}/devicetaintrules"
_REASON = unavailable()
pytestmark = pytest.mark.realcluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[DraRealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    with DraRealCluster({NODE: [CARD_A, CARD_B]}) as real:
        yield real


@pytest.fixture
def dra(cluster: DraRealCluster) -> Iterator[DraRealCluster]:
    _clean(cluster)
    yield cluster
    set_health(cluster, healthy=True)
    for rule in cluster.kube.request("GET", RULES).get("items") or []:
        cluster.kube.request("DELETE", f"{RULES}/{rule['metadata']['name']}")


# --- helpers ---------------------------------------------------------------------------------


def set_health(cluster: DraRealCluster, healthy: bool) -> None:
    """Card B as the mock SMI reports it: the driver pod's mock file, rewritten in place of the
    one its ConfigMap volume holds (the driver reads it every second)."""
    [pod] = cluster._system_pods("dra-driver", NODE)
    running = cluster.kubelets[NODE].running[pod["metadata"]["uid"]]
    target = running.root / "volumes" / "mock-devices" / f"{NODE}.yaml"
    entries = [CARD_A.as_mock_entry(), {**CARD_B.as_mock_entry(), "healthy": healthy}]
    tmp = target.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(entries))
    os.replace(tmp, target)


def device(cluster: DraRealCluster, name: str) -> JSON:
    published = cluster.resource_slice(NODE)
    assert published is not None
    return next(d for d in published["spec"]["devices"] if d["name"] == name)


def generation_of(cluster: DraRealCluster) -> int:
    published = cluster.resource_slice(NODE)
    assert published is not None
    return int(published["spec"]["pool"]["generation"])


def create_claim(cluster: DraRealCluster, name: str, on: str | None = None, tolerate: str | None = None) -> None:
    """`tolerate`: the taint effect the claim's request tolerates dra.hygon.com/unhealthy with."""
    exactly: JSON = {"deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1,
                     "capacity": {"requests": {"cores": "10", "memory": "1Gi"}}}
    if on is not None:
        exactly["selectors"] = [{"cel": {"expression": f'device.attributes["{names.DRIVER}"].pciBusID == "{on}"'}}]
    if tolerate:
        exactly["tolerations"] = [{"key": UNHEALTHY_TAINT, "operator": "Exists", "effect": tolerate}]
    cluster.kube.request("POST", CLAIMS, body={
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "dcu", "exactly": exactly}]}}})


def run_claim(cluster: DraRealCluster, name: str, on: str | None = None, tolerate: str | None = None) -> None:
    create_claim(cluster, name, on, tolerate)
    cluster.kube.create_pod(cluster.namespace, {
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 0, "resourceClaims": [{"name": "dcu", "resourceClaimName": name}],
                 "containers": [{"name": "main", "image": "busybox", "resources": {"claims": [{"name": "dcu"}]}}]}})


def wait_running(cluster: DraRealCluster, name: str, timeout: float = 90) -> None:
    try:
        wait_until(f"pod {name} Running", lambda: phase(cluster.kube, cluster.namespace, name) == "Running",
                   timeout=timeout, interval=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\nkubelet DRA errors: {cluster.kubelets[NODE].prepare_errors}\n"
                             f"{cluster.diagnose()}") from None


def allocated_device(cluster: DraRealCluster, name: str) -> str:
    claim = cluster.kube.request("GET", f"{CLAIMS}/{name}")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    return str(result["device"])


def unschedulable(cluster: DraRealCluster, name: str) -> str:
    """The PodScheduled=False message of a pod kube-scheduler could not place."""
    def message() -> str | None:
        pod = cluster.kube.get_pod(cluster.namespace, name)
        assert not pod["spec"].get("nodeName"), f"{name} was scheduled"
        scheduled = next((c for c in (pod.get("status") or {}).get("conditions") or []
                          if c["type"] == "PodScheduled"), None)
        return scheduled["message"] if scheduled and scheduled["status"] == "False" else None

    return wait_until(f"kube-scheduler to give up on {name} for now", message, timeout=30, interval=0.5)


def status_output(cluster: DraRealCluster, capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    capsys.readouterr()
    assert cli_main(["status", "--kubeconfig", str(cluster.kubeconfig), *flags]) == 0
    return capsys.readouterr().out


def set_taint_effect(cluster: DraRealCluster, effect: str) -> None:
    """`helm upgrade` with draDriver.unhealthyTaintEffect; returns once the new driver pod has
    registered with the kubelet."""
    cluster.extra_values = _merge(cluster.extra_values, {"draDriver": {"unhealthyTaintEffect": effect}})
    values = cluster.workdir / "values-taint-effect.yaml"
    values.write_text(yaml.safe_dump(cluster.values()))
    kubelet = cluster.kubelets[NODE]
    before = kubelet.dra_registrations
    cluster.helm_run("upgrade", RELEASE, str(ROOT / "chart"), "--namespace", SYSTEM_NAMESPACE, "-f", str(values),
                     "--wait", "--timeout", "5m")
    wait_until(f"the DRA driver with {effect} registered", lambda: kubelet.dra_registrations > before, timeout=120)
    [pod] = cluster._system_pods("dra-driver", NODE)
    assert f"--unhealthy-taint-effect {effect}" in " ".join(pod["spec"]["containers"][0].get("args") or [])


def show(capsys: pytest.CaptureFixture[str], *what: object) -> None:
    """Print past capsys (which holds the CLI's output), for the run's record."""
    with capsys.disabled():
        print(*what)


def _clean(cluster: DraRealCluster) -> None:
    cluster.clear_pods()
    cluster.clear_claims()
    wait_until("both cards untainted", lambda: not any(device(cluster, d).get("taints") for d in (DEV_A, DEV_B)),
               timeout=30)


# --- tests -----------------------------------------------------------------------------------


def test_an_unhealthy_card_is_tainted_keeps_its_claim_is_avoided_tolerated_and_recovers(
        dra: DraRealCluster, capsys: pytest.CaptureFixture[str]) -> None:
    bus_b = CARD_B.pci_bus_id.lower()
    run_claim(dra, "on-b", on=bus_b)
    wait_running(dra, "on-b")
    assert allocated_device(dra, "on-b") == DEV_B

    set_health(dra, healthy=False)
    taints = wait_until("card B tainted in the ResourceSlice", lambda: device(dra, DEV_B).get("taints"), timeout=30)
    show(capsys, "\ncard B's taints in the ResourceSlice as stored:", json.dumps(taints))
    assert len(taints) == 1
    [taint] = taints
    assert (taint["key"], taint["value"], taint["effect"]) == (UNHEALTHY_TAINT, "SMIReportsUnhealthy", "NoSchedule")
    assert taint.get("timeAdded")
    assert not device(dra, DEV_A).get("taints")
    generation, tainted_at = generation_of(dra), time.monotonic()
    # The card is still published, whole: its claim still names a device the slice has.
    assert device(dra, DEV_B)["capacity"]["cores"]["value"] == "120"

    # New claims avoid it: unconstrained ones land on card A, one that asks for B waits.
    for name in ("new-1", "new-2"):
        run_claim(dra, name)
    for name in ("new-1", "new-2"):
        wait_running(dra, name)
        assert allocated_device(dra, name) == DEV_A
    run_claim(dra, "wants-b", on=bus_b)
    message = unschedulable(dra, "wants-b")
    show(capsys, "a claim that asks for the tainted card:", message)
    # A diagnostics claim that tolerates the taint gets it.
    run_claim(dra, "diagnose-b", on=bus_b, tolerate="NoSchedule")
    wait_running(dra, "diagnose-b")
    assert allocated_device(dra, "diagnose-b") == DEV_B
    # The claim already on it kept running all along (NoSchedule evicts nothing).
    assert phase(dra.kube, dra.namespace, "on-b") == "Running"
    assert allocated_device(dra, "on-b") == DEV_B

    out = status_output(dra, capsys)
    show(capsys, out)
    assert f"{UNHEALTHY_TAINT}=SMIReportsUnhealthy:NoSchedule" in out
    # The tainted slice, as stored, is what the driver would write: no rewrite every cycle
    # (registerIntervalSeconds is 5 here).
    time.sleep(max(0.0, tainted_at + 6 - time.monotonic()))
    assert generation_of(dra) == generation
    assert phase(dra.kube, dra.namespace, "wants-b") == "Pending"

    set_health(dra, healthy=True)
    wait_until("card B's taint cleared", lambda: not device(dra, DEV_B).get("taints"), timeout=30)
    wait_running(dra, "wants-b", timeout=90)
    assert allocated_device(dra, "wants-b") == DEV_B
    assert UNHEALTHY_TAINT not in status_output(dra, capsys)


def test_a_device_taint_rule_takes_a_card_out_and_status_says_so(dra: DraRealCluster,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rule = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "maintain-card-a"},
            "spec": {"deviceSelector": {"driver": names.DRIVER, "pool": NODE, "device": DEV_A},
                     "taint": {"key": "example.com/maintenance", "value": "firmware-update", "effect": "NoSchedule"}}}
    dra.kube.request("POST", RULES, body=rule)
    time.sleep(1)  # kube-scheduler's informer sees the rule
    run_claim(dra, "wants-a", on=CARD_A.pci_bus_id.lower())
    unschedulable(dra, "wants-a")
    run_claim(dra, "any")
    wait_running(dra, "any")
    assert allocated_device(dra, "any") == DEV_B

    out = status_output(dra, capsys)
    show(capsys, out)
    assert "example.com/maintenance=firmware-update:NoSchedule (DeviceTaintRule maintain-card-a)" in out
    document = json.loads(status_output(dra, capsys, "-o", "json"))
    card_a = next(c for c in document["dra"]["cards"] if c["device"] == DEV_A)
    assert [(t["key"], t["rule"]) for t in card_a["taints"]] == [("example.com/maintenance", "maintain-card-a")]

    dra.kube.request("DELETE", f"{RULES}/maintain-card-a")
    wait_running(dra, "wants-a", timeout=90)
    assert allocated_device(dra, "wants-a") == DEV_A


def test_with_no_execute_the_pods_on_an_unhealthy_card_are_evicted_unless_they_tolerate_it(
        dra: DraRealCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """draDriver.unhealthyTaintEffect=NoExecute: kube-controller-manager's device taint eviction
    deletes the pods whose claims do not tolerate the taint; one that tolerates it stays."""
    bus_b = CARD_B.pci_bus_id.lower()
    set_taint_effect(dra, "NoExecute")
    try:
        run_claim(dra, "victim", on=bus_b)
        run_claim(dra, "tolerant", on=bus_b, tolerate="NoExecute")
        run_claim(dra, "elsewhere", on=CARD_A.pci_bus_id.lower())
        for name in ("victim", "tolerant", "elsewhere"):
            wait_running(dra, name)
        set_health(dra, healthy=False)
        [taint] = wait_until("card B tainted NoExecute", lambda: device(dra, DEV_B).get("taints"), timeout=30)
        show(capsys, "\ncard B's taints with NoExecute:", json.dumps([taint]))
        assert (taint["key"], taint["value"], taint["effect"]) == (UNHEALTHY_TAINT, "SMIReportsUnhealthy", "NoExecute")
        wait_until("the pod that does not tolerate it evicted",
                   lambda: phase(dra.kube, dra.namespace, "victim") in ("Gone", "Failed"), timeout=60)
        assert phase(dra.kube, dra.namespace, "tolerant") == "Running"
        assert phase(dra.kube, dra.namespace, "elsewhere") == "Running"
    finally:
        set_health(dra, healthy=True)
        set_taint_effect(dra, "NoSchedule")

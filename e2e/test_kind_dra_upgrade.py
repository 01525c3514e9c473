"""Issue 36, item 4, on kind: `helm upgrade` of the DRA driver in the middle of a burst of DRA
pods, with a real kubelet (v1.37) holding both driver instances' registrations.

The DaemonSet rolls one node at a time with a surge pod: the new driver pod registers beside
the old one (sockets named after its pod UID), becomes ready once the kubelet registered it,
and only then is the old pod stopped. Meanwhile pods keep arriving and their claims are
prepared by whichever instance the kubelet calls. Every pod must run, no claim of a running pod
may be unprepared, no Prepare may fail, and the kubelet's log must show the two registrations.

    flock /tmp/kind.lock pytest -m kind e2e/test_kind_dra_upgrade.py
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.kindcluster import RELEASE, RELEASE_NAMESPACE, ROOT, WORKERS, KindBackend
from e2e.scenarios import wait_until
from hami_dcu.cli.localcluster.pods import POD_IMAGE
from hami_dcu.common.protocol.dra import names

pytestmark = pytest.mark.kind
JSON = dict[str, Any]
BURST = 20
SLOTS = 8  # 2 workers x 2 cards x 8 slots: room for the whole burst
PACE = 2.0
# The kubelet logs a DRA plugin's registration at verbosity 3 (pkg/kubelet/cm/dra/plugin).
KUBELET_VERBOSITY = "3"
REGISTERED = re.compile(r'"Registered DRA plugin".*driverName="dra\.hygon\.com" endpoint="([^"]+)".*numPlugins=(\d+)')
DRIVER_SELECTOR = "app.kubernetes.io/component=dra-driver"


@pytest.fixture
def dra(kind: KindBackend) -> Any:
    kind.ensure_mode("dra")
    kind.clean_claims()
    yield kind
    # Leave the release as the other DRA tests expect it: its own values, no claims.
    kind.clean_claims()
    upgrade(kind, kind.values("dra"))
    for node in WORKERS:
        set_kubelet_verbosity(kind, node, "0")


def upgrade(b: KindBackend, values: JSON) -> None:
    path = Path(b.cluster.path) / "values-dra-upgrade.yaml"
    path.write_text(yaml.safe_dump(values))
    subprocess.run([str(b.helm), "upgrade", RELEASE, str(ROOT / "chart"), "--namespace", RELEASE_NAMESPACE,
                    "--kubeconfig", str(b.kubeconfig), "-f", str(path), "--wait", "--timeout", "5m"],
                   check=True, capture_output=True, text=True, timeout=400)


def set_kubelet_verbosity(b: KindBackend, node: str, level: str) -> None:
    """The kubelet's /debug/flags/v, through the API server's node proxy: no restart."""
    subprocess.run([str(b.world.kubectl), "--kubeconfig", str(b.kubeconfig), "replace", "--raw",
                    f"/api/v1/nodes/{node}/proxy/debug/flags/v", "-f", "-"], input=level, check=True,
                   capture_output=True, text=True, timeout=30)


def driver_pods(b: KindBackend) -> dict[str, JSON]:
    """node -> its one driver pod (none while two are there or the pod is going)."""
    pods = b.kube.list_pods(namespace=RELEASE_NAMESPACE, label_selector=DRIVER_SELECTOR).items
    found: dict[str, list[JSON]] = {}
    for pod in pods:
        found.setdefault(pod["spec"].get("nodeName", ""), []).append(pod)
    return {node: group[0] for node, group in found.items() if len(group) == 1
            and not group[0]["metadata"].get("deletionTimestamp")}


def rolled_out(b: KindBackend, before: dict[str, str]) -> dict[str, JSON] | None:
    """Each worker's one driver pod, ready and not the one it had before."""
    now = driver_pods(b)
    for node in WORKERS:
        pod = now.get(node)
        if pod is None or pod["metadata"]["uid"] == before.get(node):
            return None
        conditions = {c["type"]: c["status"] for c in (pod.get("status") or {}).get("conditions") or []}
        if conditions.get("Ready") != "True":
            return None
    return now


def share(b: KindBackend, name: str) -> None:
    exactly = {"deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1,
               "capacity": {"requests": {"cores": "10", "memory": "1Gi"}}}
    b.kube.request("POST", f"{names.RESOURCE_API}/namespaces/{b.namespace}/resourceclaims", body={
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "dcu", "exactly": exactly}]}}})
    b.kube.create_pod(b.namespace, {
        "metadata": {"name": name},
        "spec": {"terminationGracePeriodSeconds": 1, "resourceClaims": [{"name": "dcu", "resourceClaimName": name}],
                 "containers": [{"name": "main", "image": POD_IMAGE, "imagePullPolicy": "IfNotPresent",
                                 "command": ["sleep", "infinity"], "resources": {"claims": [{"name": "dcu"}]}}]}})


def follow_logs(b: KindBackend, pod: str, out: Path) -> subprocess.Popen[bytes]:
    """`kubectl logs -f` of a driver pod into `out`, until its container ends (its log is gone
    with the pod, which the rollout deletes)."""
    with out.open("wb") as sink:
        return subprocess.Popen([str(b.world.kubectl), "--kubeconfig", str(b.kubeconfig), "-n", RELEASE_NAMESPACE,
                                 "logs", "-f", pod], stdout=sink, stderr=subprocess.STDOUT)


def prepared_in(log: str, namespace: str, pods: list[str]) -> set[str]:
    """The burst's claims a driver's log says it prepared (dra/core.py's line)."""
    found = re.findall(rf": prepared ResourceClaim {re.escape(namespace)}/(\S+) ", log)
    return set(found) & set(pods)


def kubelet_log(b: KindBackend, node: str, since: str) -> str:
    return b.node_exec(node, "journalctl", "-u", "kubelet", "--no-pager", "-o", "cat", "--since", since, timeout=120)


def test_a_helm_upgrade_mid_burst_runs_every_pod_and_unprepares_no_running_claim(dra: KindBackend,
                                                                                 tmp_path: Path) -> None:
    b = dra
    since = b.node_exec(WORKERS[0], "date", "+%Y-%m-%d %H:%M:%S").strip()
    for node in WORKERS:
        set_kubelet_verbosity(b, node, KUBELET_VERBOSITY)
    # Room for the burst: a first rollout, with no claim prepared yet (8 slots per card).
    first = {node: pod["metadata"]["uid"] for node, pod in driver_pods(b).items()}
    values = b.values("dra")
    values["devicePlugin"]["slotsPerCard"] = SLOTS
    upgrade(b, values)
    old = wait_until("the first rollout on every worker", lambda: rolled_out(b, first), timeout=180, interval=1)
    wait_until(f"{SLOTS} slots per card published", lambda: all(
        (b.resource_slice(n) or {}).get("spec", {}).get("devices", [{}])[0].get("capacity", {}).get("slices", {})
        .get("value") == str(SLOTS) for n in WORKERS), timeout=120, interval=1)

    logs = {node: tmp_path / f"old-driver-{node}.log" for node in WORKERS}
    followers = [follow_logs(b, pod["metadata"]["name"], logs[node]) for node, pod in old.items()]
    # The burst: a pod every PACE seconds, some 40 s, so that it outlasts the rollout of both
    # workers; the upgrade (a new --register-interval) starts after the fourth.
    pods = [f"burst-{i:02d}" for i in range(BURST)]
    values["draDriver"]["registerIntervalSeconds"] = 6
    upgrade_error: list[BaseException] = []
    upgraded_at: list[float] = []

    def run_upgrade() -> None:
        try:
            upgrade(b, values)
            upgraded_at.append(time.monotonic())
        except BaseException as exc:  # reported by the test thread
            upgrade_error.append(exc)

    upgrading = threading.Thread(target=run_upgrade)
    started = time.monotonic()
    for i, name in enumerate(pods):
        share(b, name)
        if i == 3:
            upgrading.start()
        time.sleep(PACE)
    print(f"{BURST} pods created in {time.monotonic() - started:.0f} s")
    upgrading.join(420)
    assert not upgrade_error, upgrade_error
    print(f"helm upgrade --wait returned {upgraded_at[0] - started:.0f} s after the first pod")
    new = wait_until("the second rollout on every worker", lambda: rolled_out(b, {
        n: p["metadata"]["uid"] for n, p in old.items()}), timeout=180, interval=1)
    print("driver pods: " + ", ".join(f"{n}: {old[n]['metadata']['uid']} -> {new[n]['metadata']['uid']}"
                                      for n in WORKERS))

    def all_running() -> bool:
        return all((b.kube.get_pod(b.namespace, p).get("status") or {}).get("phase") == "Running" for p in pods)

    wait_until(f"all {BURST} pods Running", all_running, timeout=300, interval=2)
    placed = {p: b.kube.get_pod(b.namespace, p)["spec"]["nodeName"] for p in pods}
    print(f"{BURST} of {BURST} Running: " + ", ".join(f"{n}: {sum(1 for v in placed.values() if v == n)}"
                                                    for n in WORKERS))
    for follower in followers:
        follower.wait(60)

    # No Prepare failed on the way (the kubelet reports one as an event on the pod).
    events = b.kube.request("GET", f"/api/v1/namespaces/{b.namespace}/events").get("items") or []
    failed = [f"{e['involvedObject']['name']}: {e.get('message')}" for e in events
              if e.get("reason") == "FailedPrepareDynamicResources"]
    assert not failed, failed

    # No claim of a running pod was unprepared, by either instance.
    claims = {p: b.kube.request("GET", f"{names.RESOURCE_API}/namespaces/{b.namespace}/resourceclaims/{p}")
              ["metadata"]["uid"] for p in pods}
    new_logs = {n: b.kubectl("-n", RELEASE_NAMESPACE, "logs", new[n]["metadata"]["name"]) for n in WORKERS}
    driver_logs = {n: logs[n].read_text() + new_logs[n] for n in WORKERS}
    # The upgrade was mid-burst: the old instances prepared some of the burst, the new ones the rest.
    by_old = {n: prepared_in(logs[n].read_text(), b.namespace, pods) for n in WORKERS}
    by_new = {n: prepared_in(new_logs[n], b.namespace, pods) for n in WORKERS}
    print("burst claims prepared by the old / new driver: " + ", ".join(
        f"{n}: {len(by_old[n])} / {len(by_new[n])}" for n in WORKERS))
    assert any(by_old.values()) and any(by_new.values()), (by_old, by_new)
    for node, text in driver_logs.items():
        gone = [line for line in text.splitlines() if ("unprepared claim" in line or "freed claim" in line)
                and any(uid in line for uid in claims.values())]
        assert not gone, f"{node}: {gone}"
        # The old instance left cleanly: its sockets removed at exit.
        left = logs[node].read_text()
        assert re.search(r"DRA driver dra\.hygon\.com stopped: sockets .* removed", left), left[-2000:]
    # ... and each one's vDCU and CDI spec are still on its node.
    for node in WORKERS:
        specs = " ".join(b.cdi_specs(node))
        vdevs = " ".join(b.vdev_files(node))
        for pod, where in placed.items():
            if where == node:
                assert claims[pod] in specs and claims[pod] in vdevs, f"{pod}'s claim has lost its files on {node}"
        # Only the running instance's registration socket is left in the kubelet's registry.
        registry = b.node_exec(node, "ls", "/var/lib/kubelet/plugins_registry").split()
        assert [s for s in registry if s.startswith(names.DRIVER)] == [
            f"{names.DRIVER}-{new[node]['metadata']['uid']}-reg.sock"], registry

    # The kubelet registered both instances, the new one while the old one was still there.
    for node in WORKERS:
        lines = [m for m in (REGISTERED.search(line) for line in kubelet_log(b, node, since).splitlines()) if m]
        print(f"{node}: kubelet registrations of {names.DRIVER}:\n" + "\n".join(m.group(0) for m in lines))
        endpoints = [m.group(1) for m in lines]
        old_uid, new_uid = old[node]["metadata"]["uid"], new[node]["metadata"]["uid"]
        assert any(old_uid in e for e in endpoints), endpoints
        beside = [m for m in lines if new_uid in m.group(1)]
        assert beside and beside[0].group(2) == "2", [m.group(0) for m in beside]

"""A burst of admission reviews from the real kube-apiserver, more at once than the webhook
takes connections from one client (`httpLimits.maxConnectionsPerClient`, here 2): every pod is
created, none refused with a 500.

What it guards against (kind, CI, `hundred_pods_over_ten_nodes`): kube-apiserver's Go client
reuses a kept-alive connection for its next review at any moment, and a POST written on a
connection the server has just closed fails with "connection reset by peer"; Go does not retry
a POST. The webhook pushed out the API server's own kept-alive connections to admit its newer
ones, so a burst beyond the cap (pod creates, the status updates and bindings the webhook also
reviews) made pod creation fail at random.

    pytest -m realcluster e2e/test_realcluster_webhook_burst.py
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from e2e.realcluster.cluster import RealCluster, unavailable
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, pod_manifest
from hami_dcu.common.io.kube import Kube, KubeError

PER_CLIENT = 2
WORKERS = 8
ROUNDS = 40
_REASON = unavailable()
pytestmark = pytest.mark.realcluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[RealCluster]:
    if _REASON:
        pytest.skip(_REASON)
    values = {"httpLimits": {"maxConnectionsPerClient": PER_CLIENT}}
    with RealCluster({"node0": default_cards("node0", 2)}, values=values) as started:
        yield started


def test_a_burst_beyond_the_per_client_cap_creates_every_pod(cluster: RealCluster) -> None:
    local = threading.local()

    def create(i: int) -> str | None:
        if not hasattr(local, "kube"):
            local.kube = Kube.from_kubeconfig(str(cluster.kubeconfig))
        name = f"burst{i:03d}"
        try:
            created = local.kube.create_pod(cluster.namespace, pod_manifest(name, [Ctr("c", 1, 1000, 5)]))
        except KubeError as exc:
            return f"{name}: {exc}"
        # Reviewed by the webhook (not failed open): it routed the pod to hami-scheduler.
        return None if created["spec"].get("schedulerName") == "hami-scheduler" else f"{name}: not routed"

    # Rounds of reviews at once, with pauses around the time a kept-alive connection waits
    # before the book may give its place away: each round leaves connections parked, each
    # pause lets them in while the API server's kept-alive ones sit in its pool.
    failures: list[str] = []
    rng = random.Random(7)
    with ThreadPoolExecutor(WORKERS) as pool:
        for round_ in range(ROUNDS):
            failures += [f for f in pool.map(create, range(round_ * WORKERS, (round_ + 1) * WORKERS)) if f]
            time.sleep(rng.uniform(0.15, 0.6))
    assert not failures, f"{len(failures)} of {ROUNDS * WORKERS} creates failed, first: {failures[0]}"

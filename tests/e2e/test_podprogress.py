"""bench/realcluster.py times its bursts with one watch (e2e/realcluster/podprogress.py), not by
polling lists: each pod is stamped when the watch first shows it bound and first shows it
Running, pods outside the selector are not counted, and a wait ends at its deadline."""

import time

import pytest

from e2e.realcluster.podprogress import BOUND, RUNNING, PodProgress
from hami_dcu.cli.localcluster.apiserver import LocalApiServer
from hami_dcu.common.io.kube import Kube

NS = "bench"


@pytest.fixture
def kube(tmp_path):
    api = LocalApiServer(kubeconfig_path=tmp_path / "kubeconfig").start()
    try:
        client = Kube.from_kubeconfig(str(api.kubeconfig_path))
        client.request("POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
        yield client
    finally:
        api.stop()


def create(kube: Kube, name: str, label: str) -> None:
    kube.create_pod(NS, {"metadata": {"name": name, "labels": {"bench": label}},
                         "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "x"}]}})


def bind(kube: Kube, name: str, node: str) -> None:
    kube.request("POST", f"/api/v1/namespaces/{NS}/pods/{name}/binding",
                 body={"metadata": {"name": name}, "target": {"kind": "Node", "name": node}})


def test_each_pod_is_stamped_when_bound_and_when_running(kube):
    progress = PodProgress(kube, NS, "bench=a").start()
    try:
        for i in range(3):
            create(kube, f"a{i}", "a")
        create(kube, "other", "b")
        bind(kube, "other", "n9")
        started = time.monotonic()
        for i in range(3):
            bind(kube, f"a{i}", f"n{i % 2}")
        assert progress.when_all(BOUND, 3, time.monotonic() + 10) >= started
        assert progress.count(BOUND) == 3  # "other" is not followed
        assert progress.nodes() == {"n0", "n1"}
        assert progress.when_all(RUNNING, 1, time.monotonic() + 0.3) is None  # none Running yet
        kube.patch_pod_status(NS, "a0", {"phase": "Running"})
        kube.patch_pod_status(NS, "a1", {"phase": "Running"})
        assert progress.when_all(RUNNING, 2, time.monotonic() + 10) is not None
        assert progress.count(RUNNING) == 2
    finally:
        progress.stop()


def test_pods_already_bound_when_it_starts_are_counted(kube):
    create(kube, "a0", "a")
    bind(kube, "a0", "n0")
    progress = PodProgress(kube, NS, "bench=a").start()
    try:
        assert progress.when_all(BOUND, 1, time.monotonic() + 5) is not None
    finally:
        progress.stop()

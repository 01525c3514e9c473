"""Post-commit faults: the write is applied, then the client gets a 500 or no answer at all."""

import pytest

from hami_dcu.cli.localcluster.apiserver.faults import ERROR_AFTER_COMMIT, LOST_AFTER_COMMIT, Faults
from hami_dcu.common.io.kube import Kube, KubeError, UnreachableError


@pytest.fixture
def kube(api_server) -> Kube:
    return Kube.from_kubeconfig(str(api_server.kubeconfig_path))


def labels(kube, name):
    return kube.get_node(name)["metadata"].get("labels") or {}


def test_a_500_after_commit_leaves_the_write_applied(api_server, kube):
    kube.create_node({"metadata": {"name": "n1"}})
    api_server.faults.configure(post_commit_rate=1.0, post_commit_lost_share=0.0,
                                match=lambda method, _path: method == "PATCH")
    with pytest.raises(KubeError) as info:
        kube.patch_node_metadata("n1", labels={"written": "yes"})
    assert info.value.status == 500
    api_server.faults.clear()
    assert labels(kube, "n1") == {"written": "yes"}
    assert api_server.faults.injected[ERROR_AFTER_COMMIT] == 1


def test_a_lost_answer_after_commit_looks_unreachable_but_the_write_is_applied(api_server, kube):
    kube.create_node({"metadata": {"name": "n1"}})
    api_server.faults.configure(post_commit_rate=1.0, post_commit_lost_share=1.0,
                                match=lambda method, _path: method == "PATCH")
    with pytest.raises(UnreachableError):
        kube.patch_node_metadata("n1", labels={"written": "yes"})
    api_server.faults.clear()
    assert labels(kube, "n1") == {"written": "yes"}
    assert api_server.faults.injected[LOST_AFTER_COMMIT] == 1


def test_post_commit_faults_never_hit_reads():
    faults = Faults(seed=3, post_commit_rate=1.0)
    assert faults.decide("GET", "/api/v1/nodes") == (None, 0.0)
    assert faults.decide("PATCH", "/api/v1/nodes/n1")[0] in (ERROR_AFTER_COMMIT, LOST_AFTER_COMMIT)
    faults.clear()
    assert not faults.active

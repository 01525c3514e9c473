"""Node lock ownership: a lock belongs to the attempt that wrote it (its exact value), a write
whose answer was lost is read back, and a lock whose holder is done is taken over."""

from datetime import UTC, datetime, timedelta

import pytest

from hami_dcu.common.io.kube import Kube, KubeError
from hami_dcu.common.io.nodelock import LockContention, LockUncertain, NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol import lockpurpose as purpose
from hami_dcu.common.protocol.codec import decode_lock


def make_pod(kube: Kube, name: str) -> None:
    kube.create_pod("default", {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}})


def lock_value(kube: Kube, node: str) -> str | None:
    return (kube.get_node(node)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def lock_patches_only(method: str, path: str) -> bool:
    return method == "PATCH" and "/nodes/" in path


def test_a_second_attempt_for_the_same_pod_does_not_own_the_first_attempts_lock(kube, node):
    make_pod(kube, "p")
    first = NodeLock(kube).take(node, "default", "p")
    with pytest.raises(LockContention) as info:
        NodeLock(kube).take(node, "default", "p")
    assert info.value.same_pod
    assert lock_value(kube, node) == first.value


def test_release_value_removes_only_that_exact_lock(kube, node):
    make_pod(kube, "p")
    lock = NodeLock(kube)
    held = lock.take(node, "default", "p")
    # the same pod, another attempt, an earlier second: not ours
    other = held.value.replace(held.value.split(",")[0], "2020-01-01T00:00:00Z")
    assert lock.release_value(node, other) is False
    assert lock_value(kube, node) == held.value
    assert lock.release_value(node, held.value) is True
    assert lock_value(kube, node) is None


@pytest.mark.parametrize("lost_share", [0.0, 1.0], ids=["500-after-commit", "answer-lost"])
def test_a_lock_write_whose_answer_failed_after_commit_is_read_back_as_ours(kube, node, api_server, lost_share):
    make_pod(kube, "p")
    api_server.faults.configure(post_commit_rate=1.0, post_commit_lost_share=lost_share, match=lock_patches_only)
    held = NodeLock(kube).take(node, "default", "p")
    api_server.faults.clear()
    assert lock_value(kube, node) == held.value
    assert decode_lock(held.value).name == "p"


def test_a_lock_write_that_failed_before_commit_is_retried(kube, node, api_server):
    make_pod(kube, "p")
    api_server.faults.configure(seed=1, error_rate=0.5, match=lock_patches_only)
    held = NodeLock(kube).take(node, "default", "p")
    api_server.faults.clear()
    assert lock_value(kube, node) == held.value


def test_an_unresolvable_write_hands_its_value_to_the_caller(kube, node, api_server):
    """Answer lost and the read-back fails too: the caller gets the value to clean up with."""
    make_pod(kube, "p")
    api_server.faults.configure(post_commit_rate=1.0, post_commit_lost_share=1.0, error_rate=0.0,
                                match=lock_patches_only)
    real_get = kube.get_node
    reads = {"n": 0}

    def failing_read_back(name):
        reads["n"] += 1
        if reads["n"] > 1:  # the first read decides; every read after the write fails
            raise KubeError(500, "InternalError", "injected")
        return real_get(name)

    kube.get_node = failing_read_back
    try:
        with pytest.raises(LockUncertain) as info:
            NodeLock(kube).take(node, "default", "p")
    finally:
        kube.get_node = real_get
        api_server.faults.clear()
    assert lock_value(kube, node) == info.value.value
    assert NodeLock(kube).release_value(node, info.value.value) is True


def test_a_release_whose_answer_was_lost_reports_the_lock_gone(kube, node, api_server):
    make_pod(kube, "p")
    lock = NodeLock(kube)
    held = lock.take(node, "default", "p")
    api_server.faults.configure(post_commit_rate=1.0, post_commit_lost_share=1.0, match=lock_patches_only)
    assert lock.release_value(node, held.value) is True
    api_server.faults.clear()
    assert lock_value(kube, node) is None


def test_a_lock_whose_holder_is_running_here_is_taken_over(kube, node):
    make_pod(kube, "done")
    make_pod(kube, "next")
    NodeLock(kube).take(node, "default", "done")
    kube.create_binding("default", "done", node)
    kube.patch_pod_status("default", "done", {"phase": "Running"})
    held = NodeLock(kube).take(node, "default", "next")
    assert held.takeover is not None and held.takeover.reason == purpose.HOLDER_RUNNING
    assert decode_lock(lock_value(kube, node)).name == "next"


def test_a_lock_of_an_unbound_holder_is_taken_over_after_the_bind_window(kube, node):
    make_pod(kube, "stuck")
    make_pod(kube, "next")
    NodeLock(kube, clock=lambda: datetime.now(UTC) - timedelta(seconds=40)).take(node, "default", "stuck")
    with pytest.raises(LockContention):
        NodeLock(kube, bind_window=timedelta(seconds=60)).take(node, "default", "next")
    held = NodeLock(kube, bind_window=timedelta(seconds=30)).take(node, "default", "next")
    assert held.takeover is not None and held.takeover.reason == purpose.HOLDER_UNBOUND

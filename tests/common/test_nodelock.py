"""The node lock through the real `kubernetes` client against the local API server."""

import threading
from datetime import UTC, datetime, timedelta

import pytest

from hami_dcu.common.io.kube import Kube
from hami_dcu.common.io.nodelock import LockContention, NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import decode_lock


def make_pod(kube: Kube, name: str, namespace: str = "default") -> None:
    kube.create_pod(namespace, {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}})


def lock_value(kube: Kube, node: str) -> str | None:
    return (kube.get_node(node)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def test_acquire_writes_reference_format_and_release_removes(kube, node):
    make_pod(kube, "p1")
    lock = NodeLock(kube)
    assert lock.acquire(node, "default", "p1") is None
    value = decode_lock(lock_value(kube, node))
    assert (value.namespace, value.name) == ("default", "p1")
    assert abs(datetime.now(UTC) - value.since) < timedelta(seconds=5)
    assert lock.release(node, "default", "p1") is True
    assert lock_value(kube, node) is None


def test_same_pod_relock_is_success_and_keeps_value(kube, node):
    make_pod(kube, "p1")
    lock = NodeLock(kube)
    lock.acquire(node, "default", "p1")
    before = lock_value(kube, node)
    assert lock.acquire(node, "default", "p1") is None
    assert lock_value(kube, node) == before


def test_contention_names_the_holder(kube, node):
    make_pod(kube, "holder")
    make_pod(kube, "other")
    lock = NodeLock(kube)
    lock.acquire(node, "default", "holder")
    with pytest.raises(LockContention) as info:
        lock.acquire(node, "default", "other")
    assert "default/holder" in str(info.value)
    assert info.value.node == node
    assert decode_lock(lock_value(kube, node)).name == "holder"


def test_expired_lock_is_taken_over(kube, node):
    make_pod(kube, "old")
    make_pod(kube, "new")
    old_clock = NodeLock(kube, clock=lambda: datetime.now(UTC) - timedelta(seconds=301))
    old_clock.acquire(node, "default", "old")
    takeover = NodeLock(kube, timeout=timedelta(seconds=300)).acquire(node, "default", "new")
    assert takeover is not None and takeover.reason == "expired"
    assert decode_lock(lock_value(kube, node)).name == "new"


def test_lock_of_deleted_holder_is_taken_over(kube, node):
    make_pod(kube, "gone")
    make_pod(kube, "next")
    lock = NodeLock(kube)
    lock.acquire(node, "default", "gone")
    kube.delete_pod("default", "gone")
    takeover = lock.acquire(node, "default", "next")
    assert takeover is not None and takeover.reason == "holder-gone"
    assert decode_lock(lock_value(kube, node)).name == "next"


def test_legacy_fresh_lock_without_holder_is_contention(kube, node):
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    kube.patch_node_metadata(node, annotations={keys.NODE_LOCK: stamp})
    with pytest.raises(LockContention) as info:
        NodeLock(kube).acquire(node, "default", "p")
    assert "legacy" in str(info.value)


def test_malformed_lock_is_replaced(kube, node):
    make_pod(kube, "p")
    kube.patch_node_metadata(node, annotations={keys.NODE_LOCK: "garbage,,"})
    takeover = NodeLock(kube).acquire(node, "default", "p")
    assert takeover is not None and takeover.reason == "malformed"


def test_release_by_non_owner_leaves_the_lock(kube, node):
    make_pod(kube, "owner")
    lock = NodeLock(kube)
    lock.acquire(node, "default", "owner")
    before = lock_value(kube, node)
    assert lock.release(node, "default", "intruder") is False
    assert lock.release(node, "other-ns", "owner") is False
    assert lock_value(kube, node) == before


def test_release_without_lock_is_noop(kube, node):
    assert NodeLock(kube).release(node, "default", "p") is False


def test_lock_survives_unrelated_concurrent_node_writes(kube, node, api_server):
    """A CAS conflict caused by another annotation is retried, after reading the lock again."""
    make_pod(kube, "p")
    lock = NodeLock(kube)
    real_patch = kube.patch_node_metadata
    calls = {"n": 0}

    def racing_patch(name, annotations=None, labels=None, resource_version=None):
        calls["n"] += 1
        if calls["n"] == 1:
            real_patch(name, annotations={"unrelated": "write"})  # bumps the resourceVersion
        return real_patch(name, annotations, labels, resource_version)

    kube.patch_node_metadata = racing_patch
    try:
        lock.acquire(node, "default", "p")
    finally:
        kube.patch_node_metadata = real_patch
    assert calls["n"] == 2
    assert decode_lock(lock_value(kube, node)).name == "p"


def test_two_threads_racing_exactly_one_wins(kube_factory, node):
    kube = kube_factory()
    for name in ("a", "b"):
        make_pod(kube, name)
    for _round in range(10):
        barrier = threading.Barrier(2)
        results: dict[str, object] = {}

        def contend(name: str, barrier=barrier, results=results) -> None:
            own = NodeLock(kube_factory())
            barrier.wait()
            try:
                own.acquire(node, "default", name)
                results[name] = "won"
            except LockContention as exc:
                results[name] = exc

        threads = [threading.Thread(target=contend, args=(n,)) for n in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [n for n, r in results.items() if r == "won"]
        assert len(winners) == 1, results
        loser = "b" if winners[0] == "a" else "a"
        assert f"default/{winners[0]}" in str(results[loser])
        assert decode_lock(lock_value(kube, node)).name == winners[0]
        assert NodeLock(kube).release(node, "default", winners[0])


def test_release_with_a_stale_known_node_reads_again(kube, node):
    make_pod(kube, "p")
    lock = NodeLock(kube)
    lock.acquire(node, "default", "p")
    known = kube.get_node(node)
    kube.patch_node_metadata(node, annotations={"unrelated": "change"})  # known is now stale
    assert lock.release(node, "default", "p", known=known) is True
    assert lock_value(kube, node) is None

"""Releasing the node lock as HAMi's ReleaseNodeLock does, where we follow it (issue 24), and
where we keep our own rule (README, "Where we differ from HAMi v2.10")."""

from hami_dcu.common.io.kube import Kube
from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys


def set_lock(kube: Kube, node: str, value: str) -> None:
    kube.patch_node_metadata(node, annotations={keys.NODE_LOCK: value})


def lock_value(kube: Kube, node: str) -> str | None:
    return (kube.get_node(node)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def test_hami_release_compares_only_the_namespace_name_suffix(kube, node):
    # The time part is not RFC3339: HAMi's owner check looks only at ",<ns>,<name>".
    set_lock(kube, node, "yesterday at noon,default,p1")
    assert NodeLock(kube).release(node, "default", "p1") is True
    assert lock_value(kube, node) is None


def test_hami_release_leaves_another_pods_lock_whatever_its_time_part(kube, node):
    for value in ("yesterday,default,p2", "2026-01-01T00:00:00Z,other,p1", "2026-01-01T00:00:00Z,default,xp1"):
        set_lock(kube, node, value)
        assert NodeLock(kube).release(node, "default", "p1") is False
        assert lock_value(kube, node) == value


def test_a_legacy_bare_timestamp_lock_is_kept_by_a_named_release(kube, node):
    # HAMi releases it (it names nobody, so anyone's release takes it); we keep it: Volcano's
    # own lock helper writes that form for its pods, and only expiry proves it is not needed.
    set_lock(kube, node, "2026-01-01T00:00:00Z")
    assert NodeLock(kube).release(node, "default", "p1") is False
    assert lock_value(kube, node) == "2026-01-01T00:00:00Z"


def test_releasing_on_a_node_that_does_not_exist_is_done_not_an_error(kube):
    # HAMi returns an error; the lock went with the node, so there is nothing left to release.
    assert NodeLock(kube).release("no-such-node", "default", "p1") is False

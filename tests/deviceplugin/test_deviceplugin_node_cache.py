"""The watch-fed copy of the node and its pods (deviceplugin/nodecache.py, nodewatch.py,
cachereads.py): an admission it shows whole is served with no read, its pod write conditioned
on the pod's cached version; a copy behind the API server falls back to reading, and a stale
one found by the refused write is decided again on fresh reads. The watches resume."""

from __future__ import annotations

import copy
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from dp_helpers import dev
from test_deviceplugin_allocate_path import OverlapKube

from hami_dcu.common.io.kube import GoneError, ObjectList, UnreachableError
from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import LockValue, encode_lock
from hami_dcu.deviceplugin import cachereads
from hami_dcu.deviceplugin.core import AllocateFailed
from hami_dcu.deviceplugin.nodecache import NODE, PODS, NodeCache
from hami_dcu.deviceplugin.nodewatch import NodeWatch

AVAILABLE = ["DCU-S1-fake-0", "DCU-S1-fake-1", "DCU-S2-fake-0"]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUT = timedelta(seconds=300)


def pod(uid: str, rv: str, phase: str = "Pending", node: str = "n1", **annotations: str) -> dict:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default", "resourceVersion": rv,
                         "annotations": annotations},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


# --- the cache ------------------------------------------------------------------------------

def test_a_snapshot_needs_both_watches_in_sync():
    cache = NodeCache("n1")
    assert cache.snapshot() is None
    cache.replace_pods([pod("a", "5")])
    assert cache.snapshot() is None  # no node yet
    cache.replace_node({"metadata": {"name": "n1", "resourceVersion": "4"}})
    snapshot = cache.snapshot()
    assert snapshot is not None and [p["metadata"]["uid"] for p in snapshot.pending] == ["a"]
    cache.lost(PODS)
    assert cache.snapshot() is None and cache.pods() is None  # never served while the watch is broken
    cache.pod_event("MODIFIED", pod("a", "6"))  # the resumed watch delivers again
    assert cache.snapshot() is not None


def test_our_write_is_not_rolled_back_by_an_older_event():
    cache = NodeCache("n1")
    cache.replace_pods([pod("a", "5")])
    cache.wrote_pod(pod("a", "9", **{keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS}))
    cache.pod_event("MODIFIED", pod("a", "7"))  # the watch is behind our own write
    assert cache.pods()[0]["metadata"]["resourceVersion"] == "9"
    cache.pod_event("MODIFIED", pod("a", "10"))
    assert cache.pods()[0]["metadata"]["resourceVersion"] == "10"
    cache.wrote_pod(pod("b", "11", node="n2"))  # bound elsewhere: not this node's
    cache.pod_event("DELETED", pod("a", "12"))
    assert cache.pods() == []


def test_only_pending_pods_are_in_the_snapshot_and_a_deleted_node_is_out_of_sync():
    cache = NodeCache("n1")
    cache.replace_node({"metadata": {"name": "n1", "resourceVersion": "1"}})
    cache.replace_pods([pod("a", "2"), pod("b", "3", phase="Running")])
    assert [p["metadata"]["uid"] for p in cache.snapshot().pending] == ["a"]
    cache.node_event("DELETED", {"metadata": {"name": "n1", "resourceVersion": "4"}})
    assert cache.snapshot() is None and cache.node_object() is None


# --- the rule --------------------------------------------------------------------------------

@pytest.mark.parametrize(("value", "trusted"), [
    (encode_lock(LockValue(NOW - timedelta(seconds=10), "default", "p")), True),
    (encode_lock(LockValue(NOW - TIMEOUT + cachereads.MARGIN, "default", "p")), False),  # about to expire
    (encode_lock(LockValue(NOW - timedelta(seconds=10))), False),  # a legacy lock names nobody
    ("not a lock", False),
    (None, False),
])
def test_only_a_lock_naming_a_pod_and_far_from_expiry_is_trusted(value, trusted):
    assert (cachereads.trusted_lock(value, NOW, TIMEOUT) is not None) is trusted


def test_only_a_pod_bound_here_pending_and_allocating_is_awaiting():
    allocating = {keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING}
    assert cachereads.awaiting(pod("a", "1", **allocating), "n1")
    assert not cachereads.awaiting(pod("a", "1", node="n2", **allocating), "n1")
    assert not cachereads.awaiting(pod("a", "1", phase="Running", **allocating), "n1")
    assert not cachereads.awaiting(pod("a", "1", **{keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS}), "n1")
    assert not cachereads.awaiting(pod("a", "", **allocating), "n1")  # nothing to condition the write on


# --- the plugin with a cache ----------------------------------------------------------------

@pytest.fixture
def counted(dcu_node, kube_factory):
    """The plugin's client counts its calls; the cache is fed by a client of its own."""
    watcher_kube = kube_factory()
    counting = OverlapKube(dcu_node.kube)
    dcu_node.kube = counting
    return dcu_node, counting, watcher_kube


def frozen(kube, node: str = "n1") -> NodeCache:
    """A copy as the watches would have left it now, then followed no more."""
    cache = NodeCache(node)
    cache.replace_node(kube.get_node(node))
    cache.replace_pods(kube.list_pods(field_selector=f"spec.nodeName={node}").items)
    return cache


def wait_until(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the watch did not deliver within the timeout"
        time.sleep(0.02)


def shows_allocating(cache: NodeCache, name: str) -> bool:
    snapshot = cache.snapshot()
    return snapshot is not None and any(
        p["metadata"]["name"] == name and cachereads.awaiting(p, "n1") for p in snapshot.pending
    ) and bool((snapshot.node["metadata"].get("annotations") or {}).get(keys.NODE_LOCK))


def test_a_watched_admission_is_served_without_a_read(counted):
    node, counting, watcher_kube = counted
    cache = NodeCache("n1")
    watch = NodeWatch(watcher_kube, "n1", cache).start()
    try:
        core = node.core(cache=cache)
        node.bind("p", [("c", [dev("S2", 1000, 25)])])
        wait_until(lambda: shows_allocating(cache, "p"))
        counting.calls.clear()
        advice = core.preferred(AVAILABLE, [], 1)
        assert advice == ["DCU-S2-fake-0"] and counting.calls == []  # steered from memory
        core.allocate([advice])
        assert core.idle(5)
        assert counting.calls == ["PATCH", "PATCH"]  # the pod's outcome, then the lock release: no read
        assert node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
        assert node.lock_value() is None
        assert core.metrics.value("hami_dcu_plugin_cache_reads_total", node="n1", outcome="served") == 2
        # The next pod: the cache follows the release and the new lock.
        node.bind("q", [("c", [dev("S1", 1000, 25)])])
        wait_until(lambda: shows_allocating(cache, "q"))
        counting.calls.clear()
        core.allocate([core.preferred(AVAILABLE, [], 1)])
        assert core.idle(5) and counting.calls == ["PATCH", "PATCH"]
        assert node.annotation("q", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    finally:
        watch.stop()


def test_a_cache_without_the_holder_reads_from_the_api_server(counted):
    """The pod watch is behind the node watch: the lock names a pod the copy does not hold."""
    node, counting, watcher_kube = counted
    cache = frozen(watcher_kube)  # taken before the pod was bound
    node.bind("p", [("c", [dev("S2", 1000, 25)])])
    cache.replace_node(watcher_kube.get_node("n1"))  # the node watch has seen the lock
    core = node.core(cache=cache)
    counting.calls.clear()
    advice = core.preferred(AVAILABLE, [], 1)
    assert advice == ["DCU-S2-fake-0"] and counting.calls == ["GET", "GET"]
    core.allocate([advice])
    assert node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert core.metrics.value("hami_dcu_plugin_cache_reads_total", node="n1", outcome="fell-back") == 1


def test_an_admission_waits_for_a_watch_a_little_behind_the_kubelets(counted, monkeypatch):
    """The kubelet calls as soon as its own watch shows the pod: ours delivers a moment later,
    and the call is served from it rather than read."""
    node, counting, watcher_kube = counted
    monkeypatch.setattr(cachereads, "CATCH_UP", 30.0)  # generous: the wait ends at the delivery
    cache = frozen(watcher_kube)
    node.bind("p", [("c", [dev("S2", 1000, 25)])])
    core = node.core(cache=cache)
    counting.calls.clear()
    delivery = threading.Timer(0.05, lambda: (cache.replace_node(watcher_kube.get_node("n1")), cache.replace_pods(
        watcher_kube.list_pods(field_selector="spec.nodeName=n1").items)))
    delivery.start()
    try:
        assert core.preferred(AVAILABLE, [], 1) == ["DCU-S2-fake-0"]
    finally:
        delivery.join()
    assert counting.calls == []


def test_a_cache_without_the_lock_reads_from_the_api_server(counted):
    node, counting, watcher_kube = counted
    cache = frozen(watcher_kube)
    node.bind("p", [("c", [dev("S2", 1000, 25)])])
    cache.replace_pods(watcher_kube.list_pods(field_selector="spec.nodeName=n1").items)  # the node watch lags
    core = node.core(cache=cache)
    counting.calls.clear()
    core.allocate([["DCU-S2-fake-0"]])
    assert counting.calls[:2] == ["GET", "GET"]
    assert node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS


def test_a_stale_cache_is_caught_by_the_conditioned_write_and_the_call_decided_again(counted):
    """The copy still shows pod `old` holding the lock, allocating; in fact `old` was deleted,
    its lock released and `new` bound with the lock. The write on `old` is refused (404): what
    the call did is undone, and fresh reads serve `new`."""
    node, counting, watcher_kube = counted
    node.bind("old", [("c", [dev("S2", 1000, 25)])])
    cache = frozen(watcher_kube)
    node.kube.delete_pod("default", "old")
    NodeLock(node.kube).release("n1", "default", "old")
    node.bind("new", [("c", [dev("S1", 2000, 50)])])
    core = node.core(cache=cache)
    counting.calls.clear()
    core.allocate([["DCU-S1-fake-0"]])
    assert core.idle(5)
    assert counting.calls[0] == "PATCH" and counting.calls[1:3] == ["GET", "GET"]  # refused, then read
    assert node.annotation("new", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    new_uid = node.kube.get_pod("default", "new")["metadata"]["uid"]
    assert [d.name.split("_")[0] for d in (node.root / "vgpu").iterdir()] == [new_uid]  # nothing of old's left
    assert core.metrics.value("hami_dcu_plugin_cache_reads_total", node="n1", outcome="stale") == 1
    assert node.lock_value() is None


def test_a_holder_changed_since_the_copy_is_decided_on_fresh_reads(counted):
    """Someone wrote the holder after the copy was taken (409 on the conditioned write): the
    fresh reads decide, and the pod is served once."""
    node, counting, watcher_kube = counted
    node.bind("p", [("c", [dev("S2", 1000, 25)])])
    cache = frozen(watcher_kube)
    node.kube.patch_pod_metadata("default", "p", labels={"touched": "yes"})
    core = node.core(cache=cache)
    counting.calls.clear()
    core.allocate([["DCU-S2-fake-0"]])
    assert core.idle(5)
    assert counting.calls.count("PATCH") == 3  # refused write, the write, the release
    assert node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert len(list((node.root / "vgpu").iterdir())) == 1
    assert core.metrics.value("hami_dcu_plugin_cache_reads_total", node="n1", outcome="stale") == 1


def test_a_failure_after_the_proving_write_fails_the_pod_as_without_a_cache(counted, monkeypatch):
    """The conditioned write landed (the pod is proven the holder), then its vDCU file could not
    be written: the pod is marked failed and the lock released, not decided again."""
    node, counting, watcher_kube = counted
    node.bind("p", [("c", [dev("S2", 1000, 25)])])
    core = node.core(cache=frozen(watcher_kube))

    def disk_full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(core.vdevs, "write", disk_full)
    counting.calls.clear()
    with pytest.raises(AllocateFailed, match="No space left"):
        core.allocate([["DCU-S2-fake-0"]])
    assert counting.calls[:3] == ["PATCH", "PATCH", "POST"]  # the write, then "failed" and its event: no fresh reads
    assert node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_FAILED
    assert node.lock_value() is None
    assert core.vdevs.live == 0  # the grant undone
    assert core.metrics.value("hami_dcu_plugin_cache_reads_total", node="n1", outcome="stale") == 0


def test_a_refusal_is_never_decided_on_the_cache(counted):
    """The copy shows a rival pod: no refusal (which would write events, fail pods) from it."""
    node, counting, watcher_kube = counted
    node.bind("p", [("c", [dev("S2", 1000, 25)])])
    cache = frozen(watcher_kube)
    stale_rival = copy.deepcopy(cache.pods()[0])
    stale_rival["metadata"].update(uid="rival-uid", name="rival", resourceVersion="1")
    cache.pod_event("ADDED", stale_rival)  # a rival the API server does not have
    core = node.core(cache=cache)
    counting.calls.clear()
    core.allocate([["DCU-S2-fake-0"]])
    assert counting.calls[:2] == ["GET", "GET"]  # fresh reads: no rival there
    assert node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS


def test_the_reconcile_reads_the_cache_while_in_sync(counted):
    node, counting, watcher_kube = counted
    cache = frozen(watcher_kube)
    core = node.core(cache=cache)
    counting.calls.clear()
    core.reconcile()
    assert counting.calls == []
    cache.lost(NODE)
    core.reconcile()
    assert counting.calls == ["GET"]  # the node read again; the pods still from memory


# --- the watches -----------------------------------------------------------------------------

class ScriptedKube:
    """Lists and watch streams played from a script: each watch call takes the next item, an
    exception to raise or a list of events."""

    def __init__(self, streams: list) -> None:
        self.streams = streams
        self.lists = 0
        self.watched_from: list[str] = []

    def list_pods(self, field_selector=None):
        self.lists += 1
        return ObjectList(items=[pod("a", "5")], resource_version="5", continue_token="")

    def watch_pods(self, version, timeout_seconds=300, field_selector=None):
        assert field_selector == "spec.nodeName=n1"
        self.watched_from.append(version)
        step = self.streams.pop(0) if self.streams else []
        if isinstance(step, Exception):
            raise step
        yield from step


def test_a_broken_watch_marks_the_cache_out_of_sync_and_resumes_from_its_version():
    cache = NodeCache("n1")
    kube = ScriptedKube([[{"type": "MODIFIED", "object": pod("a", "7")}], UnreachableError("connection reset")])
    watch = NodeWatch(kube, "n1", cache, retry_seconds=0)
    watch.step(PODS)
    assert (kube.lists, watch.versions[PODS], kube.watched_from) == (1, "7", ["5"])
    assert cache.pods() is not None
    with pytest.raises(UnreachableError):
        watch.step(PODS)
    cache.lost(PODS)  # what follow() does on the error
    assert cache.pods() is None
    kube.streams = [[{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}]]
    watch.step(PODS)
    assert watch.versions[PODS] == "9"
    assert kube.lists == 1 and kube.watched_from[-1] == "7"  # resumed, not listed again
    assert cache.pods() is not None  # the resumed stream spoke: in sync again


def test_follow_lists_again_after_410_and_resumes_after_other_errors():
    cache = NodeCache("n1")
    kube = ScriptedKube([GoneError(410, "Expired", "too old"), UnreachableError("reset"),
                         [{"type": "ADDED", "object": pod("b", "8")}]])
    watch = NodeWatch(kube, "n1", cache, retry_seconds=0)
    original_step = watch.step

    def step(kind):
        if not kube.streams:
            watch.stop()
        original_step(kind)

    watch.step = step
    watch.follow(PODS)
    assert kube.lists == 2  # the first list, and again after the 410
    assert kube.watched_from[:4] == ["5", "5", "5", "8"]  # after the reset: resumed from the list's version
    assert sorted(p["metadata"]["uid"] for p in cache.pods()) == ["a", "b"]


def test_the_watches_follow_a_real_api_server_through_compaction(dcu_node, api_server, kube_factory):
    cache = NodeCache("n1")
    watch = NodeWatch(kube_factory(), "n1", cache, watch_seconds=2, retry_seconds=0.05).start()
    try:
        wait_until(lambda: cache.node_object() is not None and cache.pods() is not None)
        api_server.compact()  # a resumed watch now gets 410 and lists again
        dcu_node.bind("p", [("c", [dev("S2", 1000, 25)])])
        wait_until(lambda: shows_allocating(cache, "p"))
    finally:
        watch.stop()

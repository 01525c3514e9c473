"""Allocate's critical path (issues 14 and 22): the node and the pod list are read together
(GetPreferredAllocation's too), the last pod write and the lock release go out together while
the files are written, the answer waits for the pod write only (the next Allocate waits for the
release too), and the container's vdev0.conf is written without fsync because
the plugin's durable record puts it back at restart."""

from __future__ import annotations

import threading

import pytest
from dp_helpers import dev

from hami_dcu.common.io.kube import Kube
from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin.core import AllocateFailed


def conf_of(node, pod) -> tuple[str, str]:
    (d,) = [p for p in node.paths.vdev_dir.iterdir() if p.name.startswith(pod["metadata"]["uid"])]
    return (d / "vdev0.conf").read_text(), d.name


def test_a_lost_or_edited_vdev_conf_is_put_back_from_the_record_at_restart(dcu_node):
    core = dcu_node.core()
    crashed = dcu_node.bind("crashed", [("c", [dev("S1", 1000, 25)])])
    core.allocate([["DCU-S1-fake-0"]])
    edited = dcu_node.bind("edited", [("c", [dev("S2", 2000, 25)])])
    core.allocate([["DCU-S2-fake-0"]])
    written = {name: conf_of(dcu_node, pod) for name, pod in (("crashed", crashed), ("edited", edited))}
    for name, (text, dirname) in written.items():
        assert (dcu_node.paths.state_dir / f"{dirname}.conf").read_text() == text
        conf = dcu_node.paths.vdev_dir / dirname / "vdev0.conf"
        conf.write_text("" if name == "crashed" else text.replace("0000:9F:00.0", "0000:3D:00.0"))
    restarted = dcu_node.core()
    assert restarted.vdevs.state == core.vdevs.state
    for name, (text, _) in written.items():
        assert conf_of(dcu_node, crashed if name == "crashed" else edited)[0] == text


class OverlapKube(Kube):
    """Counts the API calls in flight at once."""

    def __init__(self, inner: Kube) -> None:
        super().__init__(inner.api_client, inner.timeout)
        self.in_flight = 0
        self.most = 0
        self.guard = threading.Lock()
        self.calls: list[str] = []

    def request(self, method, path, **kwargs):
        with self.guard:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.calls.append(method)
        try:
            return super().request(method, path, **kwargs)
        finally:
            with self.guard:
                self.in_flight -= 1


def test_allocate_reads_in_one_round_trip_and_writes_the_outcome_beside_the_lock_release(dcu_node, monkeypatch):
    """Two round trips on the node's critical path: the reads together, then the pod's outcome
    and the lock release together (the next bind to the node waits for the release, the
    answer for the outcome only)."""
    counting = OverlapKube(dcu_node.kube)
    dcu_node.kube = counting
    core = dcu_node.core()
    reads = threading.Barrier(2, timeout=5)  # only overlapping reads get through
    writes = threading.Barrier(2, timeout=5)  # only an outcome and a release in flight together
    original = Kube.request

    def gated(self, method, path, **kwargs):
        if method == "GET":
            reads.wait()
        if method == "PATCH":
            writes.wait()
        return original(self, method, path, **kwargs)

    dcu_node.bind("p", [("c", [dev("S1", 1000, 25)])])
    counting.calls.clear()
    monkeypatch.setattr(Kube, "request", gated)
    core.allocate([["DCU-S1-fake-0"]])
    assert core.idle(5)
    monkeypatch.undo()
    assert counting.calls == ["GET", "GET", "PATCH", "PATCH"]
    assert counting.most == 2
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert dcu_node.lock_value() is None


def test_allocate_answers_without_waiting_for_the_lock_release(dcu_node, monkeypatch):
    core = dcu_node.core()
    release_may_go = threading.Event()
    original = Kube.request

    def gated(self, method, path, **kwargs):
        if method == "PATCH" and "/nodes/" in path:  # the lock release
            assert release_may_go.wait(5)
        return original(self, method, path, **kwargs)

    dcu_node.bind("p", [("c", [dev("S1", 1000, 25)])])
    monkeypatch.setattr(Kube, "request", gated)
    core.allocate([["DCU-S1-fake-0"]])  # answered while the release is held back
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS  # written before the answer
    assert not core.idle(0.2)  # the next Allocate still waits for the release
    release_may_go.set()
    assert core.idle(5)
    monkeypatch.undo()
    assert dcu_node.lock_value() is None


def test_the_next_allocate_reads_the_node_only_after_the_previous_lock_release(dcu_node, monkeypatch):
    core = dcu_node.core()
    release_may_go = threading.Event()
    seen: list[str] = []
    original = Kube.request

    def gated(self, method, path, **kwargs):
        if method == "PATCH" and "/nodes/" in path:
            assert release_may_go.wait(5)
            seen.append("release")
        elif method == "GET" and "/nodes/" in path:
            seen.append("read node")
        return original(self, method, path, **kwargs)

    dcu_node.bind("p", [("c", [dev("S1", 1000, 25)])])
    monkeypatch.setattr(Kube, "request", gated)
    core.allocate([["DCU-S1-fake-0"]])
    outcome: list[BaseException | None] = []

    def next_allocate() -> None:
        try:
            core.allocate([["DCU-S2-fake-0"]])
            outcome.append(None)
        except AllocateFailed as exc:  # no pod holds the lock now: nothing was bound since
            outcome.append(exc)

    second = threading.Thread(target=next_allocate)
    second.start()
    second.join(0.3)
    assert second.is_alive() and seen == ["read node"]  # waiting, not reading a lock about to go
    release_may_go.set()
    second.join(5)
    assert seen == ["read node", "release", "read node"]
    assert "no pod holds the node lock" in str(outcome[0])


def test_a_file_that_cannot_be_written_leaves_the_pod_failed_though_success_went_out_beside_it(dcu_node):
    """The last pod write overlaps the files: when they fail, "failed" lands after it."""
    core = dcu_node.core()
    dcu_node.bind("p", [("c", [dev("S1", 1000, 25)])])
    dcu_node.paths.vdev_dir.mkdir(parents=True, exist_ok=True)
    dcu_node.paths.vdev_dir.rmdir()
    dcu_node.paths.vdev_dir.write_text("not a directory")  # every vdev dir write fails
    with pytest.raises(AllocateFailed):
        core.allocate([["DCU-S1-fake-0"]])
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_FAILED
    assert dcu_node.lock_value() is None
    assert not core.vdevs.state.vdevs_used
    assert list(dcu_node.paths.state_dir.iterdir()) == []


def test_preferred_allocation_reads_in_one_round_trip(dcu_node, monkeypatch):
    """GetPreferredAllocation comes just before every Allocate: its two reads (the node, for the
    lock holder, and the pod) overlap rather than follow each other."""
    counting = OverlapKube(dcu_node.kube)
    dcu_node.kube = counting
    core = dcu_node.core()
    reads = threading.Barrier(2, timeout=5)  # only overlapping reads get through
    original = Kube.request

    def gated(self, method, path, **kwargs):
        if method == "GET":
            reads.wait()
        return original(self, method, path, **kwargs)

    dcu_node.bind("p", [("c", [dev("S2", 1000, 25)])])
    counting.calls.clear()
    monkeypatch.setattr(Kube, "request", gated)
    advice = core.preferred(["DCU-S1-fake-0", "DCU-S1-fake-1", "DCU-S2-fake-0"], [], 1)
    monkeypatch.undo()
    assert advice == ["DCU-S2-fake-0"]  # the holder's card
    assert counting.calls == ["GET", "GET"] and counting.most == 2


def test_preferred_allocation_without_a_lock_holder_pending_here_gives_the_kubelets_order(dcu_node):
    core = dcu_node.core()
    available = ["DCU-S1-fake-0", "DCU-S2-fake-0"]
    assert core.preferred(available, [], 1) == ["DCU-S1-fake-0"]  # no lock at all
    dcu_node.bind("p", [("c", [dev("S2", 1000, 25)])])
    core.allocate([["DCU-S2-fake-0"]])
    assert core.idle(5)
    lock_for_gone = NodeLock(dcu_node.kube)
    lock_for_gone.take("n1", "default", "gone")  # names a pod that does not exist
    assert core.preferred(available, [], 1) == ["DCU-S1-fake-0"]

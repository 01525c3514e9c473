"""Allocate's critical path (issue 14): the node and the pod list are read together, the last
pod write and the lock release go out together, and the container's vdev0.conf is written
without fsync because the plugin's durable record puts it back at restart."""

from __future__ import annotations

import threading

import pytest
from dp_helpers import dev

from hami_dcu.common import keys
from hami_dcu.common.kube import Kube
from hami_dcu.deviceplugin.plugin import AllocateFailed


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
    assert restarted.state == core.state
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


def test_allocate_makes_four_api_calls_and_overlaps_them_in_pairs(dcu_node, monkeypatch):
    counting = OverlapKube(dcu_node.kube)
    dcu_node.kube = counting
    core = dcu_node.core()
    # each call waits for its pair to be in flight too: only overlapping calls get through
    barrier = threading.Barrier(2, timeout=5)
    original = Kube.request

    def paired(self, method, path, **kwargs):
        barrier.wait()
        return original(self, method, path, **kwargs)

    dcu_node.bind("p", [("c", [dev("S1", 1000, 25)])])
    counting.calls.clear()
    monkeypatch.setattr(Kube, "request", paired)
    core.allocate([["DCU-S1-fake-0"]])
    monkeypatch.undo()
    assert sorted(counting.calls) == ["GET", "GET", "PATCH", "PATCH"]
    assert counting.most == 2
    assert dcu_node.annotation("p", keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS
    assert dcu_node.lock_value() is None


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
    assert not core.state.vdevs_used
    assert list(dcu_node.paths.state_dir.iterdir()) == []

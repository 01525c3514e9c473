"""What the demo prints once its pods settle, and when it stops waiting: against a stand-in
cluster, so a refactor of demo.py cannot change a line unnoticed (the real demo runs in
tests/cli/test_cli_errors.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from hami_dcu.cli import demo
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, encode_pod_devices

JSON = dict[str, Any]


class Kube:
    def __init__(self, pods: list[JSON], events: list[JSON] | None = None) -> None:
        self.pods, self.events, self.lists = pods, events or [], 0

    def list_pods(self, namespace: str) -> SimpleNamespace:
        self.lists += 1
        return SimpleNamespace(items=self.pods)

    def request(self, method: str, path: str) -> JSON:
        return {"items": self.events}


def cluster(pods: list[JSON], events: list[JSON] | None = None, vdev: dict[str, str] | None = None) -> Any:
    stats = SimpleNamespace(filter_failures={}, bind_failures={})
    return SimpleNamespace(kube=Kube(pods, events), namespace="demo", naming=keys.DCU_NAMING,
                           vdev_files=lambda node: vdev or {}, scheduler_loop=SimpleNamespace(stats=stats),
                           nodes={"node-1": SimpleNamespace(paths=SimpleNamespace(vdev_dir="/vdev"))})


def pod(name: str, phase: str, node: str | None = None, allocated: str | None = None,
        containers: tuple[str, ...] = ("main",), init: tuple[str, ...] = ()) -> JSON:
    annotations = {keys.DCU_NAMING.pod_devices_allocated: allocated} if allocated else {}
    spec: JSON = {"containers": [{"name": c} for c in containers]}
    if init:
        spec["initContainers"] = [{"name": c} for c in init]
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "uid": f"uid-{name}", "annotations": annotations}, "spec": spec,
            "status": {"phase": phase}}


def devices(*per_container: list[tuple[str, int, int]]) -> str:
    return encode_pod_devices([[ContainerDevice(u, "DCU", m, c) for u, m, c in d] for d in per_container])


def test_the_placements_table_the_reasons_and_the_example_vdev_file(capsys: pytest.CaptureFixture[str]) -> None:
    pods = [pod("train-15pct", "Running", "node-1", devices([("card-0", 2000, 15)])),
            pod("two-workers", "Running", "node-1", devices([("card-1", 4096, 20)], [], [("card-0", 2048, 10)]),
                containers=("worker", "logger", "helper")),
            pod("init-share", "Running", "node-1", devices([("card-1", 1000, 10)], [("card-1", 0, 100)]),
                init=("setup",)),
            pod("whole-card", "Running", "node-1"),
            pod("too-big", "Pending")]
    events = [{"involvedObject": {"name": "too-big"}, "reason": "FailedScheduling", "message": "old"},
              {"involvedObject": {"name": "too-big"}, "reason": "FailedScheduling", "message": "0/2 nodes"},
              {"involvedObject": {"name": "too-big"}, "reason": "FilteringFailed", "message": "card by card"}]
    vdev = {"uid-train-15pct_main_0_0_0_00000000000000ff_0000000000000000": "line\n", "other": "x\n"}
    demo._print_placements(cluster(pods, events, vdev), {"refused-one": "too much"})
    assert capsys.readouterr().out == EXPECTED


EXPECTED = """
POD                CONTAINER  NODE      CARD           MEMORY      CORES   CU MASK (hex, 120 CUs)
train-15pct        main       node-1    card-0         2000 MiB    15%     0x00000000000000ff
two-workers        worker     node-1    card-1         4096 MiB    20%     whole card
two-workers        helper     node-1    card-0         2048 MiB    10%     whole card
whole-card         -          -         Running
too-big            -          -         Pending
init-share         setup      node-1    card-1         1000 MiB    10%     whole card
init-share         main       node-1    card-1         0 MiB       100%    whole card

too-big is Pending (FailedScheduling): 0/2 nodes
too-big is Pending (FilteringFailed): card by card
refused-one was refused at admission: too much

vdev0.conf of pod train-15pct on node-1 (/vdev/uid-train-15pct_main_0_0_0_00000000000000ff_0000000000000000):
line

"""


def test_a_pending_pod_without_events_waits_for_the_scheduler(capsys: pytest.CaptureFixture[str]) -> None:
    demo._print_placements(cluster([pod("x", "Pending")]), {})
    assert capsys.readouterr().out.endswith("\nx is Pending: waiting for the scheduler\n\n")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(demo.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(demo.time, "sleep", fake.sleep)
    return fake


def test_waiting_ends_when_every_pod_settled_but_the_expected_pending(clock: Clock) -> None:
    settled = cluster([pod("a", "Running", "n"), pod("b", "Failed"), pod("c", "Pending")])
    assert demo._wait_for_pods(settled, 10, {"c"}) == (set(), set())


def test_waiting_names_the_pods_not_settled_when_time_runs_out(clock: Clock,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    stuck = cluster([pod("a", "Running", "n"), pod("b", "Pending"), pod("c", "ContainerCreating", "n")])
    assert demo._wait_for_pods(stuck, 5, set()) == ({"b", "c"}, set())
    assert capsys.readouterr().out == "waiting for 2 of 3 pods: b, c\n" * 2


def test_a_pod_the_scheduler_keeps_failing_once_the_rest_settled_cannot_be_placed(clock: Clock) -> None:
    unplaced = cluster([pod("a", "Running", "n"), pod("b", "Pending")])
    failures = unplaced.scheduler_loop.stats.filter_failures
    failures["demo/b"] = 1
    listed = unplaced.kube.list_pods

    def failing_more(namespace: str) -> SimpleNamespace:
        failures["demo/b"] += 1
        return listed(namespace)

    unplaced.kube.list_pods = failing_more
    assert demo._wait_for_pods(unplaced, 60, set()) == (set(), {"b"})
    assert clock.now >= demo.QUIET_SECONDS


def test_a_pod_that_stopped_failing_is_waited_for_until_time_runs_out(clock: Clock) -> None:
    # Its failures may predate the extender's cache: only failures that keep coming mean no room.
    once = cluster([pod("a", "Running", "n"), pod("b", "Pending")])
    once.scheduler_loop.stats.bind_failures["demo/b"] = 1
    assert demo._wait_for_pods(once, 10, set()) == ({"b"}, set())
    assert clock.now >= 10

"""Volcano mode's namespace DCU quota at admission (issue 35, finding 2).

Volcano's pods never pass /filter, so the webhook's check is the only one they meet. Before,
it counted only what placed pods hold: with a 4,000 MiB quota, three Volcano pods of 4,000 MiB
and a whole-card pod (0 MiB at admission) were all admitted and placed, 77,520 MiB held. Now an
admitted pod counts from its admission: by what it asks while it waits for a node (the watch
shows it unplaced), and before that by what this process reserved for it when it admitted it;
a whole card counts as the largest card a node registers.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import jsonpatch
from prometheus_client import CollectorRegistry
from scheduler_helpers import DCU, dcu_pod, dcu_settings, node_object

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, encode_pod_devices
from hami_dcu.scheduler.quotas import AdmissionView, admission_view
from hami_dcu.scheduler.service import SchedulerService
from hami_dcu.scheduler.slim import slim_pod
from hami_dcu.webhook.decision import Settings, review
from hami_dcu.webhook.server import build_app

JSON = dict[str, Any]
NOW = datetime.now(UTC)
QUOTA = {"metadata": {"name": "team-dcu", "namespace": "default", "resourceVersion": "1"},
         "spec": {"hard": {"limits.hygon.com/dcumem": "4000"}}}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cluster(nodes: int = 1) -> SchedulerService:
    service = SchedulerService(None, dcu_settings())
    for i in range(nodes):
        service.cache.apply_node(node_object(f"n{i + 1}"), NOW)
    service.quotas.apply(QUOTA)
    return service


def volcano_settings(view: AdmissionView) -> Settings:
    """As the extender's command mounts the webhook in Volcano mode (scheduler/command.py)."""
    return Settings(naming=DCU, volcano_scheduler="volcano", quota=view, reservations=view.reservations)


def volcano_pod(name: str, memory: int | None = 4000, cores: int | None = 10, count: int = 1) -> JSON:
    return dcu_pod(name, memory=memory, cores=cores, count=count, scheduler="volcano")


def review_of(pod: JSON, uid: str, dry_run: bool = False) -> JSON:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "default",
                        "operation": "CREATE", "object": pod, "dryRun": dry_run,
                        "userInfo": {"username": "tenant"}}}


async def admit(client: Any, pod: JSON, uid: str, dry_run: bool = False) -> tuple[JSON, JSON | None]:
    """The answer, and the pod as the API server stores it when admitted (with a uid)."""
    response = await client.post("/webhook", json=review_of(pod, uid, dry_run))
    assert response.status == 200
    answer = (await response.json())["response"]
    if not answer["allowed"]:
        return answer, None
    patch = json.loads(base64.b64decode(answer["patch"])) if answer.get("patch") else []
    stored = jsonpatch.apply_patch(pod, patch)
    stored["metadata"]["uid"] = f"pod-{uid}"
    return answer, stored


def placed(pod: JSON, node: str = "n1", memory: int = 4000) -> JSON:
    """The pod once Volcano placed it: bound, with its allocation."""
    card = ContainerDevice(f"DCU-{node}-S0", "DCU", memory, 10)
    bound = json.loads(json.dumps(pod))
    bound["spec"]["nodeName"] = node
    bound["metadata"]["annotations"][DCU.pod_devices_allocated] = encode_pod_devices([[card]])
    bound["metadata"]["annotations"][keys.POD_NODE] = node
    return bound


async def test_the_attack_sequence_three_pods_of_the_quota_and_a_whole_card_admit_only_the_first(aiohttp_client):
    """The reported sequence, the watch catching up after each creation: before, all four
    were admitted (12,000 MiB asked and a whole card counted as 0 against 4,000)."""
    service = cluster()
    view = admission_view(service.quotas, service.cache, waiting=True)
    client = await aiohttp_client(build_app(volcano_settings(view), CollectorRegistry()))
    answers = {}
    for name, pod in (("a", volcano_pod("a")), ("b", volcano_pod("b")), ("c", volcano_pod("c")),
                      ("w", volcano_pod("w", memory=None, cores=None))):
        answers[name], stored = await admit(client, pod, f"r-{name}")
        if stored is not None:
            service.cache.apply_pod(stored)  # the watch shows it, not placed yet
    assert [name for name, answer in answers.items() if answer["allowed"]] == ["a"]
    # The decision's words: the waiting pod is in use, a whole card the largest card registered.
    settings = volcano_settings(view)
    assert review(volcano_pod("b"), settings).message == (
        "pod exceeds ResourceQuota team-dcu limits.hygon.com/dcumem: quota 4000, used 4000, requested 4000")
    assert review(volcano_pod("w", memory=None, cores=None), settings).message.endswith(
        "quota 4000, used 4000, requested 65520")


async def test_pods_admitted_before_the_watch_shows_them_are_reserved(aiohttp_client):
    """Created back to back: the second review comes before the watch shows the first pod."""
    service = cluster()
    view = admission_view(service.quotas, service.cache, waiting=True)
    client = await aiohttp_client(build_app(volcano_settings(view), CollectorRegistry()))
    answer, first = await admit(client, volcano_pod("a", memory=3000), "r-a")
    assert answer["allowed"] and first is not None
    # The admitted pod carries its reservation, so the watch can tell when it is stored.
    assert first["metadata"]["annotations"][keys.QUOTA_RESERVATION] == "r-a"
    assert view("default")[1].memory == 3000  # reserved, not shown by the watch yet
    answer, _ = await admit(client, volcano_pod("b", memory=2000), "r-b")
    assert not answer["allowed"]
    assert (await admit(client, volcano_pod("c", memory=1000), "r-c"))[0]["allowed"]
    # Once the watch shows the pods, they count by their own objects, not twice.
    service.cache.apply_pod(first)
    assert view("default")[1].memory == 4000


async def test_a_waiting_pod_counts_once_placed_and_stops_counting_when_gone(aiohttp_client):
    service = cluster()
    view = admission_view(service.quotas, service.cache, waiting=True)
    client = await aiohttp_client(build_app(volcano_settings(view), CollectorRegistry()))
    _, first = await admit(client, volcano_pod("a"), "r-a")
    assert first is not None
    service.cache.apply_pod(first)
    assert view("default")[1].memory == 4000
    service.cache.apply_pod(placed(first))  # Volcano placed it: it holds its card now
    assert view("default")[1].memory == 4000
    service.cache.delete_pod(first)
    assert view("default")[1].memory == 0
    assert (await admit(client, volcano_pod("b"), "r-b"))[0]["allowed"]


async def test_a_pod_stored_and_deleted_before_the_next_review_frees_its_share(aiohttp_client):
    service = cluster()
    view = admission_view(service.quotas, service.cache, waiting=True)
    client = await aiohttp_client(build_app(volcano_settings(view), CollectorRegistry()))
    _, first = await admit(client, volcano_pod("a"), "r-a")
    assert first is not None
    service.cache.apply_pod(first)
    service.cache.delete_pod(first)  # no review in between
    assert (await admit(client, volcano_pod("b"), "r-b"))[0]["allowed"]


async def test_a_reservation_the_watch_never_shows_lapses_after_its_deadline(aiohttp_client):
    """A pod refused after us (another webhook, a policy) is never stored: its reservation goes
    after 30 s; a dry run reserves nothing."""
    service, clock = cluster(), Clock()
    view = admission_view(service.quotas, service.cache, waiting=True, clock=clock)
    client = await aiohttp_client(build_app(volcano_settings(view), CollectorRegistry()))
    assert (await admit(client, volcano_pod("dry"), "r-dry", dry_run=True))[0]["allowed"]
    assert view("default")[1].memory == 0
    assert (await admit(client, volcano_pod("a"), "r-a"))[0]["allowed"]
    assert not (await admit(client, volcano_pod("b"), "r-b"))[0]["allowed"]
    clock.now += 29
    assert not (await admit(client, volcano_pod("b"), "r-b2"))[0]["allowed"]
    clock.now += 2
    assert (await admit(client, volcano_pod("b"), "r-b3"))[0]["allowed"]


def test_hami_scheduler_pods_count_the_waiting_volcano_pods_too():
    service = cluster()
    view = admission_view(service.quotas, service.cache, waiting=True)
    waiting = volcano_pod("a", memory=3000)
    waiting["metadata"]["uid"] = "ua"
    service.cache.apply_pod(waiting)
    decision = review(dcu_pod("h", memory=2000, cores=10), volcano_settings(view))
    assert not decision.allowed and "used 3000, requested 2000" in decision.message


def test_a_whole_card_with_no_card_registered_anywhere_is_refused_with_what_to_do():
    service = SchedulerService(None, dcu_settings())
    service.quotas.apply(QUOTA)
    view = admission_view(service.quotas, service.cache, waiting=True)
    decision = review(volcano_pod("w", memory=None, cores=None), volcano_settings(view))
    assert not decision.allowed and decision.reason == "quota-whole-card-unknown"
    assert "no node has registered its cards yet" in decision.message
    assert f"ask {DCU.resources.memory} in MiB" in decision.message
    # A share is counted as it asks.
    assert review(volcano_pod("s", memory=1000), volcano_settings(view)).allowed


def test_the_largest_card_of_any_node_is_what_a_whole_card_counts():
    service = cluster()
    service.cache.apply_node(node_object("small", memory=16000), NOW)
    service.cache.apply_node(node_object("big", memory=98304), NOW)
    view = admission_view(service.quotas, service.cache, waiting=True)
    service.quotas.apply({**QUOTA, "spec": {"hard": {"limits.hygon.com/dcumem": "100000"}}})
    decision = review(volcano_pod("w", memory=None, cores=None, count=2), volcano_settings(view))
    assert not decision.allowed and decision.message.endswith("used 0, requested 196608")


def test_outside_volcano_mode_admission_counts_as_before():
    """Device-plugin mode keeps /filter as the check that knows the card: a waiting pod and a
    whole card count nothing at admission there."""
    service = cluster()
    view = admission_view(service.quotas, service.cache)
    pending = dcu_pod("a", memory=3000, cores=10, uid="ua")
    service.cache.apply_pod(pending)
    settings = Settings(naming=DCU, quota=view, reservations=view.reservations)
    assert view.reservations is None
    assert review(dcu_pod("b", memory=3000, cores=10), settings).allowed
    assert review(dcu_pod("w", memory=None, cores=None), settings).allowed


def test_a_listed_waiting_pod_keeps_what_it_asks_and_a_relist_forgets_it_once_gone():
    """The informer lists pods trimmed (slim.py): an unbound pod keeps its extended resources."""
    service = cluster()
    view = admission_view(service.quotas, service.cache, waiting=True)
    pod = volcano_pod("a")
    pod["metadata"].update(uid="ua", annotations={keys.QUOTA_RESERVATION: "r-a"})
    pod["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "2"
    pod["spec"]["containers"][0]["env"] = [{"name": "X", "value": "y"}]
    listed = slim_pod(pod)
    assert listed["spec"]["containers"] == [{"name": "main", "resources": {"limits": {
        DCU.resources.count: "1", DCU.resources.memory: "4000", DCU.resources.cores: "10"}}}]
    service.cache.replace_pods([listed])
    assert view("default")[1].memory == 4000 and "r-a" in service.cache.reservations_seen
    service.cache.replace_pods([])
    assert view("default")[1].memory == 0 and not service.cache.waiting
    assert "r-a" in service.cache.reservations_seen  # seen stored once: its reservation is done with
    plain = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "x", "resources": {"limits": {"cpu": "1"}}}]}}
    assert "containers" not in slim_pod(plain)["spec"]

"""DRA mode: claims created in parallel against the namespace DCU quota (issue 35, finding 3).

The webhook counts the claims kube-apiserver has stored, under a lock per namespace; but the
lock ended when the review was answered, before the API server stored the claim, so the next
review did not see it: 8 claims of 8 GiB created at once against a 10 GiB quota, two admitted in
4 rounds of 13. Now each admitted claim stays reserved in the webhook's process until a list of
the namespace's claims shows it (it carries `hami.io/quota-reservation`), or 30 s pass.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any

import jsonpatch
from prometheus_client import CollectorRegistry
from test_webhook_dra import FakeKube

from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.quota import Amount, Limit, QuotaLimits
from hami_dcu.scheduler.drainformer import DraInformer, slim_claim
from hami_dcu.scheduler.drausage import DraUsage
from hami_dcu.webhook.decision import DRA, Settings
from hami_dcu.webhook.draclaims import DraClaims
from hami_dcu.webhook.server import build_app

JSON = dict[str, Any]
TEN_GIB = QuotaLimits(memory=Limit(10240, "team-dcu"))
SETTINGS = Settings(naming=keys.DCU_NAMING, mode=DRA, quota=lambda ns: (TEN_GIB, Amount()) if ns == "team" else None)


class SlowLists(FakeKube):
    """Lists take a moment, as over the network, so reviews in flight overlap."""

    def request(self, method: str, path: str, *, query: JSON | None = None, body: Any = None) -> JSON:
        if path.endswith("/resourceclaims"):
            time.sleep(0.02)
        return super().request(method, path, query=query, body=body)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def claim(memory: str = "8Gi", name: str | None = None) -> JSON:
    meta: JSON = {"name": name} if name else {"generateName": "p-dcu-"}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": {"requests": [{"name": "dcu", "exactly": {
                "deviceClassName": "dra.hygon.com", "allocationMode": "ExactCount", "count": 1,
                "capacity": {"requests": {"memory": memory}}}}]}}}


def claim_review(obj: JSON, uid: str, dry_run: bool = False) -> JSON:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"},
                        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"},
                        "namespace": "team", "operation": "CREATE", "object": obj, "dryRun": dry_run,
                        "userInfo": {"username": "tenant"}}}


async def webhook(aiohttp_client: Any, fake: FakeKube, clock: Clock | None = None,
                  settings: Settings = SETTINGS) -> tuple[Any, DraClaims]:
    dra = DraClaims(AsyncKube(fake), clock=clock or time.monotonic)  # type: ignore[arg-type]
    return await aiohttp_client(build_app(settings, CollectorRegistry(), dra=dra)), dra


async def answer(client: Any, body: JSON) -> JSON:
    response = await client.post("/webhook", json=body)
    assert response.status == 200
    return (await response.json())["response"]


def stored(obj: JSON, response: JSON, uid: str) -> JSON:
    """The claim as kube-apiserver stores it once admitted: patched, with a uid."""
    patch = json.loads(base64.b64decode(response["patch"])) if response.get("patch") else []
    kept = jsonpatch.apply_patch(obj, patch)
    kept["metadata"] = {**kept["metadata"], "uid": f"claim-{uid}", "name": kept["metadata"].get("name") or uid}
    return kept


async def test_eight_claims_of_8_gib_created_at_once_against_10_gib_admit_one(aiohttp_client):
    """The reported race, in one webhook process: the API server stores none of them before
    every review is answered. Before, all eight were admitted here."""
    for _ in range(5):
        client, dra = await webhook(aiohttp_client, SlowLists())
        answers = await asyncio.gather(*(answer(client, claim_review(claim(), f"r{i}")) for i in range(8)))
        admitted = [a for a in answers if a["allowed"]]
        assert len(admitted) == 1, f"{len(admitted)} of 8 claims of 8 GiB admitted against 10 GiB"
        assert all("ResourceClaim exceeds" in a["status"]["message"] for a in answers if not a["allowed"])
        assert dra.in_flight("team", [], set()).memory == 8192  # what the refused ones found in use


async def test_the_admitted_claim_carries_its_reservation_and_counts_once_when_listed(aiohttp_client):
    fake = SlowLists()
    quota20 = Settings(naming=keys.DCU_NAMING, mode=DRA,
                       quota=lambda ns: (QuotaLimits(memory=Limit(20480, "team-dcu")), Amount()))
    client, dra = await webhook(aiohttp_client, fake, settings=quota20)
    first = await answer(client, claim_review(claim(), "r1"))
    assert first["allowed"]
    kept = stored(claim(), first, "r1")
    assert kept["metadata"]["annotations"] == {keys.QUOTA_RESERVATION: "r1"}
    fake.claims["team"] = [kept]  # stored: counted from the list, its reservation dropped
    assert (await answer(client, claim_review(claim(name="named"), "r2")))["allowed"]  # 8 + 8 <= 20
    assert dra.in_flight("team", [kept], set()).memory == 8192  # r2's only: r1 is listed
    refused = await answer(client, claim_review(claim(), "r3"))  # r2 is not stored yet
    assert not refused["allowed"]
    # A value the author wrote under the key (another claim's reservation, to have it dropped)
    # is replaced by the review's own.
    mine = claim("1Gi")
    mine["metadata"]["annotations"] = {keys.QUOTA_RESERVATION: "r2", "team": "x"}
    admitted = await answer(client, claim_review(mine, "r4"))
    assert admitted["allowed"]
    assert stored(mine, admitted, "r4")["metadata"]["annotations"] == {keys.QUOTA_RESERVATION: "r4", "team": "x"}


async def test_a_reservation_never_listed_lapses_and_a_dry_run_reserves_nothing(aiohttp_client):
    """A claim refused after our webhook (Kubernetes' own device quota, another webhook) is
    never stored: its reservation goes after 30 s."""
    clock = Clock()
    client, _dra = await webhook(aiohttp_client, SlowLists(), clock)
    dry = await answer(client, claim_review(claim(), "dry", dry_run=True))
    assert dry["allowed"] and not dry.get("patch")
    assert (await answer(client, claim_review(claim(), "r1")))["allowed"]
    assert not (await answer(client, claim_review(claim(), "r2")))["allowed"]
    clock.now += 29
    assert not (await answer(client, claim_review(claim(), "r3")))["allowed"]
    clock.now += 2
    assert (await answer(client, claim_review(claim(), "r4")))["allowed"]


async def test_a_rewritten_pod_counts_the_claims_in_flight_and_reserves_nothing_itself(aiohttp_client):
    """A pod's claims are reviewed when kube-controller-manager creates them: the pod's review
    counts what is in flight but holds nothing itself."""
    fake = SlowLists()
    client, dra = await webhook(aiohttp_client, fake)
    pod = {"metadata": {"name": "p", "namespace": "team"}, "spec": {"containers": [
        {"name": "main", "image": "app", "resources": {"limits": {
            "hygon.com/dcunum": "1", "hygon.com/dcumem": "4000", "hygon.com/dcucores": "10"}}}]}}
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": "pod-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "team",
                          "operation": "CREATE", "object": pod, "userInfo": {"username": "tenant"}}}
    assert (await answer(client, review))["allowed"]
    assert dra.in_flight("team", [], set()).memory == 0  # the pod reserved nothing
    assert (await answer(client, claim_review(claim(), "r1")))["allowed"]
    assert not (await answer(client, review))["allowed"]  # 8 GiB in flight + 4000 MiB > 10 GiB


async def test_a_claim_the_watch_showed_stored_and_gone_before_the_next_list_frees_its_share(aiohttp_client):
    """Admitted, stored and deleted before the next review lists the namespace: the list never
    shows it, the extender's watch did (scheduler/drainformer.py notes every reservation it sees)."""
    watched: set[str] = set()
    dra = DraClaims(AsyncKube(SlowLists()), reservation_seen=watched.__contains__)  # type: ignore[arg-type]
    client = await aiohttp_client(build_app(SETTINGS, CollectorRegistry(), dra=dra))
    assert (await answer(client, claim_review(claim(), "r1")))["allowed"]
    assert not (await answer(client, claim_review(claim(), "r2")))["allowed"]
    watched.add("r1")  # the watch: ADDED, then DELETED
    assert (await answer(client, claim_review(claim(), "r3")))["allowed"]


async def test_the_extenders_claim_watch_notes_the_reservations_it_sees():
    informer = DraInformer(None, DraUsage())  # type: ignore[arg-type]
    stamped = {"metadata": {"uid": "c1", "resourceVersion": "5", "name": "x",
                            "annotations": {keys.QUOTA_RESERVATION: "r1", "other": "y"}}}
    assert slim_claim(stamped)["metadata"]["annotations"] == {keys.QUOTA_RESERVATION: "r1"}
    assert not informer.reservation_seen("r1")
    informer._apply("resourceclaims", {"type": "ADDED", "object": stamped})
    informer._apply("resourceclaims", {"type": "DELETED", "object": stamped})
    assert informer.reservation_seen("r1") and not informer.reservation_seen("r2")


class StoredDuringTheList(SlowLists):
    """The first claim is stored, and the extender's watch shows it, while the next review's list
    is on the wire: the list was read before the claim was stored, so it does not show it."""

    def __init__(self, watched: set[str]) -> None:
        super().__init__()
        self.watched = watched
        self.lists = 0

    def request(self, method: str, path: str, *, query: JSON | None = None, body: Any = None) -> JSON:
        listed = super().request(method, path, query=query, body=body)
        if method == "GET" and path.endswith("/resourceclaims"):
            self.lists += 1
            if self.lists == 2:  # r2's list: r1 stored after its read, seen by the watch before its answer
                self.watched.add("r1")
        return listed


async def test_a_claim_the_watch_shows_while_the_list_is_read_still_counts(aiohttp_client):
    """CI saw 2 of 8 claims of 8 GiB admitted against 10 GiB in 2 rounds of 10 on the real
    control plane: a reservation was dropped because the watch had shown its claim, though the
    list it was weighed against was read before the claim was stored. Only what the watch showed
    before the list began may free a reservation the list does not show."""
    watched: set[str] = set()
    dra = DraClaims(AsyncKube(StoredDuringTheList(watched)),  # type: ignore[arg-type]
                    reservation_seen=watched.__contains__)
    client = await aiohttp_client(build_app(SETTINGS, CollectorRegistry(), dra=dra))
    assert (await answer(client, claim_review(claim(), "r1")))["allowed"]
    assert not (await answer(client, claim_review(claim(), "r2")))["allowed"]

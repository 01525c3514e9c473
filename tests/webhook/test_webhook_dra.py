"""DRA mode in the webhook: the pure rewrite of HAMi-style requests into claims (decision.py),
and the shell that reads card sizes and get-or-creates the templates (draclaims.py, server.py)
for a review the API server is proven to have sent (webhook/callers.py)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from typing import Any

import jsonpatch
import pytest
from prometheus_client import CollectorRegistry

from hami_dcu.common.io.kube import AsyncKube, ConflictError, KubeError, NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.quota import Amount, Limit, QuotaLimits
from hami_dcu.webhook import draclaims
from hami_dcu.webhook.callers import ClientAuth
from hami_dcu.webhook.decision import DRA, Settings, review
from hami_dcu.webhook.draclaims import DraClaims, units_of
from hami_dcu.webhook.draquota import PublishedCards, merged_cards, published_cards
from hami_dcu.webhook.server import build_app

JSON = dict[str, Any]
DRA_SETTINGS = Settings(mode=DRA, card_units=(120,), naming=keys.NAMINGS["dcu"])
DRA_ONLY = Settings(naming=keys.DCU_NAMING, mode=DRA)
SHARE = {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "25"}


def pod(*containers: JSON, **spec: Any) -> JSON:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": list(containers), **spec}}


def container(name: str = "main", **limits: str) -> JSON:
    return {"name": name, "image": "app", "resources": {"limits": limits or dict(SHARE)}}


# --- the pure rewrite --------------------------------------------------------------------------


def test_a_share_is_rewritten_into_a_claim_from_a_template_with_a_warning_naming_it():
    original = pod(container(**SHARE, cpu="1"))
    decision = review(original, DRA_SETTINGS)
    assert decision.allowed and decision.reason == "claims"
    [template] = decision.templates
    name = template["metadata"]["name"]
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"] == {"memory": "2000Mi", "cores": "30"}  # 25 % of 120 CUs
    spec = jsonpatch.apply_patch(original, decision.patch)["spec"]
    assert spec["resourceClaims"] == [{"name": "dcu-main", "resourceClaimTemplateName": name}]
    assert spec["containers"][0]["resources"] == {"limits": {"cpu": "1"}, "claims": [{"name": "dcu-main"}]}
    # kube-scheduler allocates the claims, in hami-scheduler's profile, whose /prioritize packs them.
    assert spec["schedulerName"] == keys.DEFAULT_SCHEDULER_NAME
    [warning] = decision.warnings
    assert "DRA mode" in warning and name in warning and "dcu-main" in warning


@pytest.mark.parametrize(("given", "placed_by"), [("default-scheduler", keys.DEFAULT_SCHEDULER_NAME),
                                                  (keys.DEFAULT_SCHEDULER_NAME, keys.DEFAULT_SCHEDULER_NAME),
                                                  ("team-scheduler", "team-scheduler")])
def test_rewritten_pods_go_to_hami_scheduler_unless_another_scheduler_was_chosen(given, placed_by):
    original = pod(container(), schedulerName=given)
    spec = jsonpatch.apply_patch(original, review(original, DRA_SETTINGS).patch)["spec"]
    assert spec["schedulerName"] == placed_by
    assert spec["resourceClaims"]  # rewritten either way: any DRA scheduler allocates claims


def test_the_same_shape_in_two_containers_shares_one_template():
    decision = review(pod(container("a"), container("b")), DRA_SETTINGS)
    [template] = decision.templates
    spec = jsonpatch.apply_patch(pod(container("a"), container("b")), decision.patch)["spec"]
    assert [c["resourceClaimTemplateName"] for c in spec["resourceClaims"]] == [template["metadata"]["name"]] * 2


def test_the_other_naming_set_is_renamed_then_rewritten():
    hcu = {"hygon.com/hcunum": "1", "hygon.com/hcucores": "50"}
    original = pod(container(**hcu))
    decision = review(original, DRA_SETTINGS)
    assert decision.allowed and decision.reason == "claims"
    assert any("renamed" in w for w in decision.warnings)
    spec = jsonpatch.apply_patch(original, decision.patch)["spec"]
    assert spec["containers"][0]["resources"] == {"claims": [{"name": "dcu-main"}]}
    [request] = decision.templates[0]["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["capacity"]["requests"] == {"cores": "60"}


def test_a_pod_with_its_own_claims_is_left_alone_with_a_warning():
    decision = review(pod(container(), resourceClaims=[{"name": "x", "resourceClaimName": "x"}]), DRA_SETTINGS)
    assert decision.allowed and decision.reason == "own-claims"
    assert not decision.patch and not decision.templates
    assert any("resourceClaims" in w for w in decision.warnings)


def test_a_cores_percentage_without_published_cards_is_denied_with_the_reason():
    decision = review(pod(container()), Settings(naming=keys.DCU_NAMING, mode=DRA, card_units=()))
    assert not decision.allowed and decision.reason == "dra-untranslatable"
    assert "ResourceSlice" in decision.message


def test_the_shared_refusals_still_apply_in_dra_mode():
    privileged = container()
    privileged["securityContext"] = {"privileged": True}
    assert review(pod(privileged), DRA_SETTINGS).reason == "privileged"
    many = review(pod(container(**{"hygon.com/dcunum": "2", "hygon.com/dcucores": "10"})), DRA_SETTINGS)
    assert not many.allowed and many.reason == "multi-card-sharing"


def test_device_plugin_mode_still_routes_and_creates_nothing():
    decision = review(pod(container()), Settings(naming=keys.DCU_NAMING, card_units=(120,)))
    assert decision.reason == "routed" and not decision.templates
    assert {"op": "add", "path": "/spec/schedulerName", "value": keys.DEFAULT_SCHEDULER_NAME} in decision.patch


# --- the shell ---------------------------------------------------------------------------------


class FakeKube:
    """The one seam DraClaims calls (Kube.request), over dicts."""

    def __init__(self, slices: list[JSON] | None = None) -> None:
        self.slices = slices if slices is not None else [slice_of(120)]
        self.templates: dict[tuple[str, str], JSON] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail_create: KubeError | None = None
        self.plant_on_create: JSON | None = None  # created by someone else just before our create
        self.claims: dict[str, list[JSON]] = {}
        self.fail_claims: KubeError | None = None
        self.lock = threading.Lock()

    def request(self, method: str, path: str, *, query: JSON | None = None, body: Any = None) -> JSON:
        with self.lock:
            self.calls.append((method, path))
        if path.endswith("/resourceslices"):
            assert query == {"fieldSelector": "spec.driver=dra.hygon.com"}
            return {"items": self.slices}
        namespace = path.split("/namespaces/")[1].split("/")[0]
        if path.endswith("/resourceclaims"):
            if self.fail_claims is not None:
                raise self.fail_claims
            return {"items": self.claims.get(namespace, [])}
        if method == "GET":
            name = path.rsplit("/", 1)[1]
            if (namespace, name) not in self.templates:
                raise NotFoundError(404, "NotFound", name)
            return self.templates[(namespace, name)]
        assert method == "POST"
        if self.fail_create is not None:
            raise self.fail_create
        key = (namespace, body["metadata"]["name"])
        if self.plant_on_create is not None:
            self.templates[key], self.plant_on_create = self.plant_on_create, None
        if key in self.templates:
            raise ConflictError(409, "AlreadyExists", key[1])
        self.templates[key] = body
        return body


def slice_of(*units: int, driver: str = "dra.hygon.com") -> JSON:
    return {"metadata": {"name": "s"}, "spec": {"driver": driver, "pool": {"name": "n"}, "devices": [
        {"name": f"d{i}", "capacity": {"cores": {"value": str(u)}, "memory": {"value": "65520Mi"}}}
        for i, u in enumerate(units)]}}


def admission(pod_: JSON, dry_run: bool = False) -> JSON:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "team",
                        "operation": "CREATE", "object": pod_, "dryRun": dry_run}}


class Proven(ClientAuth):
    """Every caller taken as the API server, as one presenting its client certificate is (the
    certificate check itself: test_webhook_callers.py). The tests here are of what a proven
    review does; an unproven one creates nothing (test_webhook_callers.py)."""

    def refusal(self, peer: Any) -> str | None:
        return None


async def post(aiohttp_client: Any, fake: FakeKube, body: JSON, settings: Settings = DRA_ONLY) -> JSON:
    dra = DraClaims(AsyncKube(fake))  # type: ignore[arg-type]
    client = await aiohttp_client(build_app(settings, CollectorRegistry(), dra=dra, client_auth=Proven()))
    response = await client.post("/webhook", json=body)
    assert response.status == 200
    return (await response.json())["response"]


async def test_the_shell_creates_the_template_in_the_pods_namespace_before_admitting(aiohttp_client):
    fake = FakeKube()
    response = await post(aiohttp_client, fake, admission(pod(container())))
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    [claim] = next(op["value"] for op in patch if op["path"] == "/spec/resourceClaims")
    [(namespace, name)] = fake.templates
    assert (namespace, name) == ("team", claim["resourceClaimTemplateName"])
    cores = fake.templates[(namespace, name)]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert cores["capacity"]["requests"]["cores"] == "30"  # from the listed slice's 120 CUs
    assert any("DRA mode" in w for w in response["warnings"])


async def test_an_existing_template_is_reused_not_created_again(aiohttp_client):
    fake = FakeKube()
    await post(aiohttp_client, fake, admission(pod(container())))
    posts = sum(1 for method, _ in fake.calls if method == "POST")
    response = await post(aiohttp_client, fake, admission(pod(container())))
    assert response["allowed"] is True
    assert sum(1 for method, _ in fake.calls if method == "POST") == posts == 1


async def test_a_dry_run_review_creates_nothing(aiohttp_client):
    fake = FakeKube()
    response = await post(aiohttp_client, fake, admission(pod(container()), dry_run=True))
    assert response["allowed"] is True and response["patch"]
    assert not fake.templates and not any("resourceclaimtemplates" in path for _, path in fake.calls)


async def test_a_template_that_cannot_be_created_denies_the_pod_saying_why(aiohttp_client):
    fake = FakeKube()
    fake.fail_create = KubeError(403, "Forbidden", "cannot create resourceclaimtemplates")
    response = await post(aiohttp_client, fake, admission(pod(container())))
    assert response["allowed"] is False
    assert "ResourceClaimTemplate" in response["status"]["message"] and "403" in response["status"]["message"]


async def test_card_sizes_are_cached_and_relisted_when_none_were_known():
    now = [0.0]
    fake = FakeKube(slices=[])
    claims = DraClaims(AsyncKube(fake), clock=lambda: now[0], max_age=60)  # type: ignore[arg-type]
    assert await claims.card_units() == ()
    fake.slices = [slice_of(120, 60), slice_of(999, driver="other.example.com")]
    assert await claims.card_units() == (60, 120)  # none known: listed again at once
    fake.slices = [slice_of(64)]
    assert await claims.card_units() == (60, 120)  # fresh enough: no list
    now[0] = 61
    assert await claims.card_units() == (64,)


def named_slice(name: str, pool: str, *units: int) -> JSON:
    published = slice_of(*units)
    published["metadata"]["name"] = name
    published["spec"]["pool"]["name"] = pool
    return published


def test_cards_merged_per_slice_are_the_cards_of_all_the_slices_at_once():
    slices = [named_slice("s1", "n1", 120, 60), named_slice("s2", "n1", 64), named_slice("s3", "n2", 120),
              slice_of(999, driver="other.example.com")]
    assert merged_cards(published_cards([s]) for s in slices) == published_cards(slices)
    assert merged_cards([]) == PublishedCards()


async def test_card_sizes_come_from_the_watch_without_a_list_when_it_shows_any(monkeypatch):
    """Issue 40, item 6: in the extender's process the slice watch answers, merged once per
    version of it; the list it replaces was every slice whole (41 MiB decoded at 1,000 nodes)."""
    fake = FakeKube(slices=[slice_of(64)])
    shown: list[PublishedCards] = [published_cards([named_slice("s1", "n1", 120)])]
    version = [1]
    merges: list[int] = []

    def counted(parts):
        merges.append(version[0])
        return merged_cards(parts)

    monkeypatch.setattr(draclaims, "merged_cards", counted)
    claims = DraClaims(AsyncKube(fake), known_cards=lambda: (version[0], shown))  # type: ignore[arg-type]
    assert await claims.card_units() == (120,)
    assert await claims.card_units() == (120,)
    shown.append(published_cards([named_slice("s2", "n2", 60)]))
    version[0] = 2
    assert await claims.card_units() == (60, 120)
    assert fake.calls == [] and merges == [1, 2]


async def test_card_sizes_are_listed_when_the_watch_has_not_listed_or_shows_none():
    fake = FakeKube(slices=[slice_of(64)])
    known: list[tuple[int, list[PublishedCards]] | None] = [None]
    claims = DraClaims(AsyncKube(fake), known_cards=lambda: known[0], clock=lambda: 0.0)  # type: ignore[arg-type]
    assert await claims.card_units() == (64,)  # the watch has not listed yet
    known[0] = (1, [])
    fake.slices = [slice_of(60)]
    assert await claims.card_units() == (64,)  # it shows none: the cached list, fresh enough
    assert [path for _, path in fake.calls] == ["/apis/resource.k8s.io/v1/resourceslices"]


async def test_reviews_finding_the_card_sizes_expired_list_them_once_not_each():
    """Issue 40, item 6: when the minute-old view expired in a burst, every review waiting on it
    listed the slices at once (the extender's RSS went from 340 to 1,091 MiB in 5 s)."""
    now = [0.0]
    fake = FakeKube(slices=[slice_of(120)])
    claims = DraClaims(AsyncKube(fake), clock=lambda: now[0], max_age=60)  # type: ignore[arg-type]
    assert await claims.card_units() == (120,)
    now[0] = 61
    fake.slices = [slice_of(64)]
    units = await asyncio.gather(*(claims.card_units() for _ in range(20)))
    assert set(units) == {(64,)}
    assert len(fake.calls) == 2


def test_units_of_skips_unreadable_capacities():
    broken = {"spec": {"driver": "dra.hygon.com", "devices": [{"name": "x", "capacity": {"cores": {"value": "lots"}}},
                                                               {"name": "y"}]}}
    assert units_of([broken, slice_of(60)]) == (60,)


def test_dra_mode_without_api_access_refuses_to_start():
    with pytest.raises(ValueError, match="DRA mode"):
        build_app(Settings(naming=keys.DCU_NAMING, mode=DRA), CollectorRegistry())


# --- templates reused only when ours (issue 21, item 6) -----------------------------------------


def planted(template: JSON, **changes: Any) -> JSON:
    """`template` as a tenant could have created it first, under the same name."""
    return {**template, "metadata": {**template["metadata"], **changes.pop("metadata", {})}, **changes}


def whole_card_spec() -> JSON:
    return {"spec": {"devices": {"requests": [{"name": "dcu", "exactly": {
        "deviceClassName": "dra.hygon.com", "allocationMode": "ExactCount", "count": 1}}]}}}


@pytest.mark.parametrize("tampered", [
    pytest.param({"spec": whole_card_spec()}, id="a-whole-card-under-a-shares-name"),
    pytest.param({"metadata": {"labels": {}}}, id="our-spec-without-our-label"),
    pytest.param({"spec": {"metadata": {"annotations": {"x": "y"}}, **whole_card_spec()}}, id="claim-metadata-added"),
])
async def test_a_planted_template_under_our_name_refuses_the_pod_and_is_not_used(aiohttp_client, tampered):
    ours = review(pod(container()), DRA_SETTINGS).templates[0]
    fake = FakeKube()
    fake.templates[("team", ours["metadata"]["name"])] = planted(ours, **tampered)
    response = await post(aiohttp_client, fake, admission(pod(container())))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert f"ResourceClaimTemplate team/{ours['metadata']['name']}" in message and "not made by hami-dcu" in message
    assert "delete it" in message
    assert not any(method == "POST" for method, _ in fake.calls)


async def test_a_template_planted_between_our_get_and_create_is_read_and_refused(aiohttp_client):
    ours = review(pod(container()), DRA_SETTINGS).templates[0]
    fake = FakeKube()
    fake.plant_on_create = planted(ours, spec=whole_card_spec())
    response = await post(aiohttp_client, fake, admission(pod(container())))
    assert response["allowed"] is False and "not made by hami-dcu" in response["status"]["message"]


async def test_our_template_as_the_api_server_returns_it_is_reused(aiohttp_client):
    ours = review(pod(container()), DRA_SETTINGS).templates[0]
    stored = json.loads(json.dumps(ours))
    # What kube-apiserver adds: an empty claim metadata, server fields, quantities kept canonical.
    stored["spec"]["metadata"] = {"creationTimestamp": None}
    stored["metadata"].update(uid="u", resourceVersion="7", namespace="team", creationTimestamp="2026-01-01T00:00:00Z")
    stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = "2097152000"
    fake = FakeKube()
    fake.templates[("team", ours["metadata"]["name"])] = stored
    response = await post(aiohttp_client, fake, admission(pod(container())))
    assert response["allowed"] is True
    assert not any(method == "POST" for method, _ in fake.calls)


# --- the extender's watch of templates answers before a read --------------------------------


async def post_watched(aiohttp_client: Any, fake: FakeKube, watched: dict[tuple[str, str], JSON], body: JSON) -> JSON:
    dra = DraClaims(AsyncKube(fake), known_template=lambda ns, name: watched.get((ns, name)))  # type: ignore[arg-type]
    client = await aiohttp_client(build_app(DRA_ONLY, CollectorRegistry(), dra=dra, client_auth=Proven()))
    response = await client.post("/webhook", json=body)
    assert response.status == 200
    return (await response.json())["response"]


def template_reads(fake: FakeKube) -> int:
    return sum(1 for method, path in fake.calls if "resourceclaimtemplates" in path)


async def test_a_template_the_watch_shows_as_ours_costs_no_read(aiohttp_client):
    ours = review(pod(container()), DRA_SETTINGS).templates[0]
    key = ("team", ours["metadata"]["name"])
    fake = FakeKube()
    fake.templates[key] = ours
    watched = {key: json.loads(json.dumps(ours))}
    response = await post_watched(aiohttp_client, fake, watched, admission(pod(container())))
    assert response["allowed"] is True
    assert template_reads(fake) == 0


@pytest.mark.parametrize("watched_as", [
    pytest.param("planted", id="shown-but-not-ours"),
    pytest.param(None, id="not-shown-yet"),
])
async def test_a_template_the_watch_does_not_show_as_ours_is_read_as_before(aiohttp_client, watched_as):
    ours = review(pod(container()), DRA_SETTINGS).templates[0]
    key = ("team", ours["metadata"]["name"])
    fake = FakeKube()
    fake.templates[key] = planted(ours, spec=whole_card_spec())  # what the API holds now
    watched = {key: planted(ours, spec=whole_card_spec())} if watched_as else {}
    response = await post_watched(aiohttp_client, fake, watched, admission(pod(container())))
    assert response["allowed"] is False and "not made by hami-dcu" in response["status"]["message"]
    assert template_reads(fake) == 1


# --- the namespace DCU quota in DRA mode (issue 21, item 6) ------------------------------------

TEAM_QUOTA = QuotaLimits(memory=Limit(10000, "team-dcu"), cores=Limit(50, "team-dcu"))
QUOTA_SETTINGS = Settings(naming=keys.DCU_NAMING, mode=DRA,
                          quota=lambda ns: (TEAM_QUOTA, Amount()) if ns == "team" else None)


def claim_object(cores: str, memory: str = "1000Mi", name: str = "mine") -> JSON:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "dcu", "exactly": {
                "deviceClassName": "dra.hygon.com", "allocationMode": "ExactCount", "count": 1,
                "capacity": {"requests": {"cores": cores, "memory": memory}}}}]}}}


def claim_review(obj: JSON, kind: str = "ResourceClaim", namespace: str = "team") -> JSON:
    resource = "resourceclaims" if kind == "ResourceClaim" else "resourceclaimtemplates"
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-2", "kind": {"group": "resource.k8s.io", "version": "v1", "kind": kind},
                        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": resource},
                        "namespace": namespace, "operation": "CREATE", "object": obj,
                        "userInfo": {"username": "alice"}}}


async def test_a_hand_written_claim_over_the_namespace_quota_is_refused(aiohttp_client):
    fake = FakeKube()  # one K100_AI size published: 120 CUs
    fake.claims["team"] = [claim_object("36", name="held")]  # 30 %
    response = await post(aiohttp_client, fake, claim_review(claim_object("30")), QUOTA_SETTINGS)  # 25 %
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "ResourceClaim exceeds ResourceQuota team-dcu limits.hygon.com/dcucores: quota 50, used 30, requested 25" \
        in message
    fits = await post(aiohttp_client, fake, claim_review(claim_object("24")), QUOTA_SETTINGS)  # 20 %
    assert fits["allowed"] is True


async def test_a_rewritten_pod_counts_each_of_its_claims_against_the_quota(aiohttp_client):
    fake = FakeKube()
    # Two containers of 25 % each share one template but make two claims: 50 % fits exactly...
    two = pod(container("a"), container("b"))
    assert (await post(aiohttp_client, fake, admission(two), QUOTA_SETTINGS))["allowed"] is True
    # ...and with a 1 % claim already held they do not; no template is created for a refused pod.
    fake.templates.clear()
    fake.claims["team"] = [claim_object("2", memory="10Mi", name="held")]
    response = await post(aiohttp_client, fake, admission(two), QUOTA_SETTINGS)
    assert response["allowed"] is False
    assert "pod exceeds ResourceQuota team-dcu limits.hygon.com/dcucores: quota 50, used 1.67, requested 50" in \
        response["status"]["message"]
    assert not fake.templates


async def test_a_namespace_without_a_dcu_quota_lists_no_claims(aiohttp_client):
    fake = FakeKube()
    response = await post(aiohttp_client, fake, claim_review(claim_object("120"), namespace="free"), QUOTA_SETTINGS)
    assert response["allowed"] is True
    assert not any(path.endswith("/resourceclaims") for _, path in fake.calls)


async def test_claims_that_cannot_be_listed_refuse_rather_than_let_through(aiohttp_client):
    fake = FakeKube()
    fake.fail_claims = KubeError(403, "Forbidden", "cannot list resourceclaims")
    response = await post(aiohttp_client, fake, claim_review(claim_object("1")), QUOTA_SETTINGS)
    assert response["allowed"] is False and "cannot read the ResourceClaims" in response["status"]["message"]


async def test_a_template_whose_one_claim_can_never_fit_is_refused(aiohttp_client):
    fake = FakeKube()
    template = {"metadata": {"name": "t"}, "spec": {"spec": claim_object("90")["spec"]}}  # 75 % > 50 %
    response = await post(aiohttp_client, fake, claim_review(template, "ResourceClaimTemplate"), QUOTA_SETTINGS)
    assert response["allowed"] is False and "no claim made from it" in response["status"]["message"]
    template["spec"]["spec"] = claim_object("60")["spec"]  # 50 %: fits, whatever the namespace holds
    fake.claims["team"] = [claim_object("120", name="held")]
    response = await post(aiohttp_client, fake, claim_review(template, "ResourceClaimTemplate"), QUOTA_SETTINGS)
    assert response["allowed"] is True


async def test_a_malformed_claim_is_a_bad_request_not_a_crash(aiohttp_client):
    fake = FakeKube()
    dra = DraClaims(AsyncKube(fake))  # type: ignore[arg-type]
    client = await aiohttp_client(build_app(QUOTA_SETTINGS, CollectorRegistry(), dra=dra))
    bad = claim_review({"metadata": {"name": "x"}, "spec": {"devices": {"requests": "all"}}})
    response = await client.post("/webhook", json=bad)
    assert response.status == 400 and "requests is not a list" in (await response.json())["error"]


async def test_a_claim_with_malformed_metadata_is_answered_not_crashed_on(aiohttp_client):
    fake = FakeKube()
    dra = DraClaims(AsyncKube(fake))  # type: ignore[arg-type]
    client = await aiohttp_client(build_app(QUOTA_SETTINGS, CollectorRegistry(), dra=dra))
    for metadata in ("x", ["y"], {"generateName": 5}):
        response = await client.post("/webhook", json=claim_review({"metadata": metadata, **claim_object("12")}
                                                                   | {"metadata": metadata}))
        assert response.status in (200, 400)

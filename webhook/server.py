"""The webhook's HTTP shell: AdmissionReview in, decision out. No decision is made here."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from hami_dcu.common.io.body import BODY_DEADLINE, BodyError, read_body
from hami_dcu.common.io.failures import Component, FailureReporter
from hami_dcu.common.io.kube import KubeError
from hami_dcu.common.protocol.errors import Failure
from hami_dcu.common.protocol.podshape import pod_shape_problem
from hami_dcu.common.protocol.untrusted import shown
from hami_dcu.webhook import guard
from hami_dcu.webhook.callers import ApiServerAddresses, ClientAuth
from hami_dcu.webhook.decision import DRA, Decision, Settings, claim_kind, review, review_claim
from hami_dcu.webhook.draclaims import DraClaims, ForeignTemplate
from hami_dcu.webhook.draquota import PublishedCards, asked_amount, refusal
from hami_dcu.webhook.pendingtemplates import annotation_patch
from hami_dcu.webhook.quotacheck import reservation_patch
from hami_dcu.webhook.schemas import BadReview, build_response, load_review

log = logging.getLogger(__name__)

# An UPDATE review carries two pods; HAMi caps the body at 1 MiB and so do we.
MAX_BODY = 1024 * 1024
# A caller refused for want of the API server's certificate is logged at most this often.
UNAUTHENTICATED_WARN_EVERY = 10.0


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        # decision is allowed, denied, or rejected (a body that is not an AdmissionReview: 400).
        self.reviews = Counter("hami_dcu_webhook_reviews", "Admission reviews by decision and reason",
                               ["decision", "reason"], registry=registry)
        self.latency = Histogram("hami_dcu_webhook_review_seconds", "Time to answer one admission review",
                                 buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1), registry=registry)


def answer(body: bytes, settings: Settings, metrics: WebhookMetrics) -> dict[str, Any]:
    """One review: parse, decide, build the response. Raises BadReview for a bad body."""
    return respond(decide(load(body), settings), metrics)


@dataclass(frozen=True)
class Loaded:
    """A review parsed, its pod's shape checked: ready to be decided."""

    data: dict[str, Any]
    who: str  # namespace/name, for the log
    started: float

    @property
    def request(self) -> dict[str, Any]:
        return self.data["request"]

    @property
    def kind(self) -> str:
        return self.request["kind"]["kind"]


@dataclass
class Reviewed:
    data: dict[str, Any]
    who: str
    decision: Decision
    started: float

    @property
    def request(self) -> dict[str, Any]:
        return self.data["request"]

    @property
    def namespace(self) -> str:
        """The request's namespace, else the object's. A claim's metadata is not shape-checked
        (only a pod's is, in `load`): whatever is not a string there is no namespace."""
        if namespace := self.request.get("namespace"):
            return str(namespace)
        obj = self.request.get("object")
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        found = meta.get("namespace") if isinstance(meta, dict) else None
        return found if isinstance(found, str) else ""


def load(body: bytes) -> Loaded:
    """Parse the review and check the shape of its pod (pure), so that the decision reads only
    fields of the types it expects. Raises BadReview."""
    started = time.perf_counter()
    data = load_review(body)
    request = data["request"]
    pod = request.get("object") or {}
    is_pod = request["kind"]["kind"] == "Pod"
    if is_pod and (problem := pod_shape_problem(pod)):
        raise BadReview(f"pod object is malformed: {problem}")
    return Loaded(data, _who(request, pod) if is_pod else _who_else(request), started)


def decide(loaded: Loaded, settings: Settings) -> Reviewed:
    """Decide a loaded review (pure): what `answer` does before the response."""
    request = loaded.request
    pod = request.get("object") or {}
    decision = _decide(request, pod, loaded.kind == "Pod", settings)
    return Reviewed(loaded.data, loaded.who, decision, loaded.started)


def respond(reviewed: Reviewed, metrics: WebhookMetrics) -> dict[str, Any]:
    """The response for a decided review, logged and counted."""
    data, request, decision, who = reviewed.data, reviewed.request, reviewed.decision, reviewed.who
    response = build_response(data["apiVersion"], request["uid"], decision.allowed, message=decision.message,
                              patch=decision.patch, warnings=decision.warnings)
    if decision.reason == "not-a-pod-create":
        log.debug("%s %s %s: allowed (%s)", request["operation"], request["kind"]["kind"], who, decision.reason)
    elif decision.allowed:
        kind = request["kind"]["kind"]
        log.info("%s %s: allowed (%s)%s", "pod" if kind == "Pod" else kind, who, decision.reason,
                 " patched" if decision.patch else "")
    else:
        log.info("%s %s %s: denied (%s): %s", request["operation"], request["kind"]["kind"], who, decision.reason,
                 decision.message)
    metrics.reviews.labels("allowed" if decision.allowed else "denied", decision.reason).inc()
    metrics.latency.observe(time.perf_counter() - reviewed.started)
    return response


async def _check_claim_quota(reviewed: Reviewed, settings: Settings, dra: DraClaims,
                             cards: PublishedCards, holds_quota: bool = True) -> Reviewed:
    """DRA mode: the claims this review adds, against the namespace DCU quota (draquota.refusal
    decides). Only a namespace with a DCU quota costs a list of its claims. A claim admitted
    is reserved until a list shows it, unless the review may not hold quota (`holds_quota`:
    not the API server's, webhook/callers.ApiServerAddresses)."""
    decision = reviewed.decision
    if not decision.allowed or not decision.quota_claims or settings.quota is None:
        return reviewed
    found = settings.quota(reviewed.namespace)
    if found is None:
        return reviewed
    limits, pods = found
    kind = reviewed.request["kind"]["kind"]
    what = "pod" if kind == "Pod" else kind
    if decision.quota_alone:
        problem = refusal(what, decision.quota_claims, None, limits, pods, cards, settings.resources)
        return reviewed if problem is None else _refused(reviewed, "quota-exceeded", problem)
    async with dra.namespace_lock(reviewed.namespace):
        seen = dra.seen_by_watch(reviewed.namespace)  # before the list: see DraClaims.in_flight
        try:
            claims = await dra.claims_in(reviewed.namespace)
        except KubeError as exc:
            # The namespace has a quota that cannot be checked now: refused, never let through.
            return _refused(reviewed, "quota-unchecked",
                            f"DRA mode: cannot read the ResourceClaims of namespace {reviewed.namespace} to "
                            f"check its DCU quota: {exc}; retry")
        in_flight = dra.in_flight(reviewed.namespace, claims, seen)
        problem = refusal(what, decision.quota_claims, claims, limits, pods, cards, settings.resources, in_flight)
        if problem is not None:
            return _refused(reviewed, "quota-exceeded", problem)
        if kind != "ResourceClaim" or reviewed.request.get("dryRun") or not holds_quota:
            return reviewed  # a pod's claims are reviewed (and reserved) when they are created
        # Reserved before the lock is let go, so the next review counts it until a list shows it.
        reservation = str(reviewed.request["uid"])
        dra.reserve(reviewed.namespace, reservation, asked_amount(decision.quota_claims, cards))
    stamp = reservation_patch(reviewed.request.get("object") or {}, reservation)
    return replace(reviewed, decision=replace(decision, patch=[stamp, *decision.patch]))


def _reserve_pod(reviewed: Reviewed, settings: Settings, holds_quota: bool = True) -> Reviewed:
    """Volcano mode: what an admitted pod asks counts against its namespace's quota from now
    until the watch shows the pod, which carries the reservation's id (the review's uid) for
    the watch to tell. A dry run reserves nothing: nothing is stored; nor does a review that
    may not hold quota (`holds_quota`, as in _check_claim_quota)."""
    decision = reviewed.decision
    if (not decision.allowed or decision.quota_reserve is None or settings.reservations is None
            or reviewed.request.get("dryRun") or not holds_quota):
        return reviewed
    reservation = str(reviewed.request["uid"])
    settings.reservations.reserve(reviewed.namespace, reservation, decision.quota_reserve)
    stamp = reservation_patch(reviewed.request.get("object") or {}, reservation)
    return replace(reviewed, decision=replace(decision, patch=[stamp, *decision.patch]))


def _refused(reviewed: Reviewed, reason: str, message: str) -> Reviewed:
    return replace(reviewed, decision=Decision(allowed=False, reason=reason, message=message))


async def _provide_templates(reviewed: Reviewed, dra: DraClaims, proven: bool) -> Reviewed:
    """DRA mode: the templates the patched pod names. A review the API server is proven to have
    sent (webhook/callers.py) creates them before the pod is admitted (none on dryRun); any
    other creates nothing: the ones still missing are listed on the pod, for the extender to
    create once its watch shows the pod stored (webhook/deferredtemplates.py). Either way a
    template found under the name that is not ours refuses the pod."""
    templates = reviewed.decision.templates
    if not templates or not reviewed.decision.allowed:
        return reviewed
    try:
        if not proven:
            missing = await dra.missing_templates(reviewed.namespace, templates)
            if not missing:
                return reviewed
            listed = annotation_patch(reviewed.request.get("object") or {}, missing)
            return replace(reviewed, decision=replace(reviewed.decision, patch=[*reviewed.decision.patch, listed]))
        if not reviewed.request.get("dryRun"):
            await dra.ensure_templates(reviewed.namespace, templates)
    except ForeignTemplate as exc:
        return replace(reviewed, decision=Decision(allowed=False, reason="template-not-ours", message=str(exc)))
    except KubeError as exc:
        names = ", ".join(t["metadata"]["name"] for t in templates)
        return replace(reviewed, decision=Decision(
            allowed=False, reason="template-create-failed",
            message=f"DRA mode: cannot {'create' if proven else 'read'} ResourceClaimTemplate {names} in "
                    f"{reviewed.namespace} for this pod's DCU request: {exc}; retry, or ask the administrator to "
                    "check the webhook's RBAC"))
    return reviewed


QUOTA_REFUSED = "quota-exceeded"


def _brief_quota(reviewed: Reviewed, proven: bool) -> Reviewed:
    """A quota refusal answered to a caller not proven the API server's names no quota, limit or
    use: anyone reaching the webhook's port could read them for any namespace by posting a
    review. The namespace's owner reads them with kubectl (common/protocol/quota.py has the full words,
    which the extender's own refusals, seen in the pod's events, keep)."""
    decision = reviewed.decision
    if proven or decision.allowed or decision.reason != QUOTA_REFUSED:
        return reviewed
    kind = reviewed.request["kind"]["kind"]
    namespace = reviewed.namespace or "default"
    what = ("one claim of this ResourceClaimTemplate would exceed" if kind == "ResourceClaimTemplate" else
            f"{'pod' if kind == 'Pod' else kind} exceeds")
    message = (f"{what} the DCU quota of namespace {namespace} (a ResourceQuota's limits.<DCU memory or cores "
               f"resource>): `kubectl describe resourcequota -n {namespace}` shows its limits and what is used")
    return replace(reviewed, decision=replace(decision, message=message))


def _decide(request: dict[str, Any], pod: dict[str, Any], is_pod: bool, settings: Settings) -> Decision:
    # First, for every object sent here: is its writer allowed to write hami-dcu's state?
    if (why := guard.refusal(request, settings.identities)) is not None:
        return Decision(allowed=False, reason="not-an-allocation-writer", message=why)
    if settings.mode == DRA and (kind := claim_kind(request)) is not None:
        return review_claim(kind, request.get("object") or {})  # a ClaimShapeError is answered 400
    if not is_pod or request["operation"] != "CREATE" or not pod:
        return Decision(allowed=True, reason="not-a-pod-create")
    meta = pod.get("metadata") or {}
    if not meta.get("namespace") and isinstance(request.get("namespace"), str) and request["namespace"]:
        # A pod being created need not name its namespace yet; the request does (the quota is per namespace).
        pod = {**pod, "metadata": {**meta, "namespace": request["namespace"]}}
    # The pod's shape was checked in `load` (common/protocol/podshape.py): whatever else `review` raises
    # is a bug of ours, answered 500 by the shell, never passed off as the caller's mistake.
    return review(pod, settings)


def _who_else(request: dict[str, Any]) -> str:
    """namespace/name of another object; a claim made from a pod's template has only a
    generateName at admission (its metadata's shape is unchecked here)."""
    obj = request.get("object")
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    named = meta.get("name") or meta.get("generateName") if isinstance(meta, dict) else None
    return f"{request.get('namespace')}/{shown(request.get('name') or named or '?')}"


def _who(request: dict[str, Any], pod: dict[str, Any]) -> str:
    """namespace/name for the log line (the pod's shape is checked: metadata is a dict or absent)."""
    meta = pod.get("metadata") or {}
    namespace = request.get("namespace") or meta.get("namespace", "")
    return f"{namespace}/{meta.get('name') or meta.get('generateName', '?')}"


def add_webhook_routes(app: web.Application, settings: Settings, registry: CollectorRegistry,
                       body_deadline: float = BODY_DEADLINE, dra: DraClaims | None = None,
                       client_auth: ClientAuth | None = None, api_server: ApiServerAddresses | None = None) -> None:
    """Mount `POST /webhook` on `app` (the scheduler does this with --serve-webhook). In DRA
    mode `dra` reads the card sizes and creates the templates rewritten pods name. With
    `client_auth` (and a listener whose TLS asks for client certificates, common/io/tls.py) only a
    caller presenting the API server's certificate is answered (webhook/callers.py). Without
    it, with `api_server`, only a review from those addresses holds quota while its object is
    stored."""
    if settings.mode == DRA and dra is None:
        raise ValueError("the webhook in DRA mode needs API access to create ResourceClaimTemplates")
    metrics = WebhookMetrics(registry)
    failures = FailureReporter(Component.WEBHOOK, registry, log)
    warned_at = [float("-inf")]

    async def review_body(loaded: Loaded, proven: bool, holds_quota: bool) -> dict[str, Any]:
        if dra is None:
            reviewed = _reserve_pod(decide(loaded, settings), settings, holds_quota)
            return respond(_brief_quota(reviewed, proven), metrics)
        cards = await dra.cards()
        reviewed = decide(loaded, replace(settings, card_units=cards.units))
        reviewed = await _check_claim_quota(reviewed, settings, dra, cards, holds_quota)
        return respond(_brief_quota(await _provide_templates(reviewed, dra, proven), proven), metrics)

    unlisted_at = [float("-inf")]

    def holds_quota(peer: str | None) -> bool:
        if client_auth is not None or api_server is None or api_server.includes(peer):
            return True
        if time.monotonic() - unlisted_at[0] > UNAUTHENTICATED_WARN_EVERY:  # a flood must not flood the log
            unlisted_at[0] = time.monotonic()
            log.warning("admission review from %s, not an address of the API server (--api-server-cidr): answered, "
                        "but it holds no quota while its object is stored; if the API server calls from there, "
                        "list it (networkPolicy.apiServer.cidrs) or set webhook.clientAuth", peer)
        return False

    async def handle(request: web.Request) -> web.Response:
        if client_auth is not None:
            transport = request.transport
            refused = client_auth.refusal(transport.get_extra_info("peercert") if transport is not None else None)
            if refused is not None:
                metrics.reviews.labels("rejected", "unauthenticated").inc()
                if time.monotonic() - warned_at[0] > UNAUTHENTICATED_WARN_EVERY:  # a flood must not flood the log
                    warned_at[0] = time.monotonic()
                    log.warning("admission review from %s refused: %s", request.remote, refused)
                return web.json_response({"error": refused}, status=403)
        try:
            body = await read_body(request, MAX_BODY, body_deadline)
        except BodyError as exc:
            log.warning("unreadable admission review body from %s: %s", request.remote, exc)
            metrics.reviews.labels("rejected", "bad-body").inc()
            return web.json_response({"error": str(exc)}, status=exc.http_status)
        subject = f"admission review from {request.remote}"
        try:
            loaded = load(body)
            subject = f"admission review of {loaded.kind} {loaded.who} from {request.remote}"
            return web.json_response(await review_body(loaded, proven=client_auth is not None,
                                                       holds_quota=holds_quota(request.remote)))
        except Exception as exc:  # expected or a bug: common/protocol/errors.py's rule tells them apart
            failure = failures.failed(exc, subject)
            metrics.reviews.labels("rejected", _rejection(failure)).inc()
            return web.json_response({"error": failure.message}, status=failure.http_status)

    app.router.add_post("/webhook", handle)


def _rejection(failure: Failure) -> str:
    """The `reason` label of a review answered with an HTTP error."""
    if not failure.expected:
        return "internal-error"
    return "bad-request" if failure.http_status == 400 else "failed"


def build_app(settings: Settings, registry: CollectorRegistry | None = None,
              body_deadline: float = BODY_DEADLINE, dra: DraClaims | None = None,
              client_auth: ClientAuth | None = None, api_server: ApiServerAddresses | None = None) -> web.Application:
    registry = registry or CollectorRegistry()
    app = web.Application(client_max_size=MAX_BODY)
    add_webhook_routes(app, settings, registry, body_deadline, dra, client_auth, api_server)

    async def ok(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics_view(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app.router.add_get("/healthz", ok)
    app.router.add_get("/readyz", ok)
    app.router.add_get("/metrics", metrics_view)
    return app

"""Which DCU pods wait for a node, what they ask for and why they wait (pure, no I/O).

A pod waits when it is Pending and not bound (no `spec.nodeName`). It is a DCU pod when a
container names a DCU resource (device-plugin mode), when it is routed to hami-scheduler, or
when it asks through a ResourceClaim of our driver (DRA mode, where the webhook has turned
its DCU resources into claims). Why it waits is the latest Warning event about it: the
extender's FilteringFailed or BindingFailed, or kube-scheduler's FailedScheduling, which
carries the extender's per-node reasons. A pod still behind a scheduling gate waits for what set
the gate (Kueue's admission gate says so), not for a card; a pod for which the extender evicted
lower-priority pods (its DCUPreemption event) says whom it is waiting to see go.

Jobs that Kueue holds suspended have no pods yet: `held_jobs` lists those asking DCUs, so an
operator sees them waiting for their queue, not for a card.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.dra import names as dra_names
from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.requests import RequestError, names_dcu, parse_container_request

JSON = dict[str, Any]
NO_EVENT = "no scheduling event yet"
KUEUE_GATE_PREFIX = "kueue.x-k8s.io/"  # Kueue's admission gate on the pods it manages
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PREEMPTION_REASON = "DCUPreemption"  # the extender's event on a pod it evicted others for


@dataclass(frozen=True)
class PendingPod:
    namespace: str
    name: str
    request: str  # what it asks for, one phrase per container or claim
    reason: str  # the latest Warning event's message, or NO_EVENT
    reason_source: str  # the event's reason and component, e.g. "FailedScheduling (hami-scheduler)"
    age_seconds: float | None


def pending_pods(pods: Iterable[JSON], events: Iterable[JSON], claims: Iterable[JSON], now: datetime,
                 names: ResourceNames, namespace: str | None = None) -> list[PendingPod]:
    """The waiting DCU pods (of `namespace` only, when given), oldest first; `names`: the
    naming set's resources."""
    event_list = list(events)
    latest = _latest(event_list, lambda e: e.get("type") == "Warning")
    preempting = _latest(event_list, lambda e: e.get("reason") == PREEMPTION_REASON)
    claim_list = list(claims)
    waiting = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        if (pod.get("status") or {}).get("phase", "Pending") != "Pending" or spec.get("nodeName"):
            continue
        pod_namespace = meta.get("namespace") or "default"
        if namespace is not None and pod_namespace != namespace:
            continue
        request = _dcu_request(pod, claim_list, names)
        if request is None:
            continue
        key = (pod_namespace, meta.get("name") or "")
        reason, source = _gated(pod) or _why(latest.get(key), preempting.get(key))
        created = _time(meta.get("creationTimestamp"))
        waiting.append(PendingPod(
            namespace=pod_namespace, name=meta.get("name") or "?", request=request, reason=reason,
            reason_source=source, age_seconds=(now - created).total_seconds() if created else None))
    waiting.sort(key=lambda p: (-(p.age_seconds or 0.0), p.namespace, p.name))
    return waiting


def held_jobs(jobs: Iterable[JSON], now: datetime, names: ResourceNames, namespace: str | None = None
              ) -> list[PendingPod]:
    """The Jobs Kueue holds suspended whose pods would ask DCUs (of `namespace` only, when
    given), oldest first: shown as `job/<name>` among the waiting pods."""
    held = []
    for job in jobs:
        meta, spec = job.get("metadata") or {}, job.get("spec") or {}
        queue = (meta.get("labels") or {}).get(KUEUE_QUEUE_LABEL)
        job_namespace = meta.get("namespace") or "default"
        if not spec.get("suspend") or not queue or (namespace is not None and job_namespace != namespace):
            continue
        template = spec.get("template") or {}
        request = _dcu_request({"metadata": template.get("metadata") or {}, "spec": template.get("spec") or {}},
                               [], names)
        if request is None:
            continue
        created = _time(meta.get("creationTimestamp"))
        held.append(PendingPod(
            namespace=job_namespace, name=f"job/{meta.get('name') or '?'}", request=request,
            reason=f"suspended by Kueue until its workload is admitted (LocalQueue {queue}): its pods do not "
                   "exist yet and hold no card, lock or quota",
            reason_source="Kueue", age_seconds=(now - created).total_seconds() if created else None))
    held.sort(key=lambda p: (-(p.age_seconds or 0.0), p.namespace, p.name))
    return held


def _gated(pod: JSON) -> tuple[str, str] | None:
    """Why a pod behind scheduling gates waits (no scheduler has seen it), or None."""
    gates = [str(g.get("name")) for g in (pod.get("spec") or {}).get("schedulingGates") or [] if isinstance(g, dict)]
    kueue = [g for g in gates if g.startswith(KUEUE_GATE_PREFIX)]
    if kueue:
        return f"waiting for Kueue to admit its workload (scheduling gate {kueue[0]}), not for a card", "Kueue"
    if gates:
        return f"held by scheduling gate {', '.join(gates)}: not handed to a scheduler yet", "schedulingGates"
    return None


def _why(warning: JSON | None, preemption: JSON | None) -> tuple[str, str]:
    """The latest warning's words, after what the extender evicted for the pod, if it did."""
    said = " ".join(str(warning.get("message") or "").split()) if warning else NO_EVENT
    source = _source(warning) if warning else ""
    if preemption is None:
        return said, source
    evicted = " ".join(str(preemption.get("message") or "").split())
    return f"preempting ({evicted}); {said}", _source(preemption)


def _dcu_request(pod: JSON, claims: Sequence[JSON], names: ResourceNames) -> str | None:
    """What the pod asks for, or None when it is no DCU pod."""
    containers = [*((pod.get("spec") or {}).get("initContainers") or []),
                  *((pod.get("spec") or {}).get("containers") or [])]
    phrases = []
    for container in containers:
        if not isinstance(container, dict) or not names_dcu(container, names):
            continue
        try:
            request = parse_container_request(container, names)
        except RequestError as exc:
            phrases.append(f"{container.get('name')}: invalid ({exc})")
            continue
        if request is not None:
            phrases.append(f"{container.get('name')}: {request_text(request.count, request.memory_mib, request.cores)}")
    phrases.extend(_claim_phrases(pod, claims))
    if phrases:
        return "; ".join(phrases)
    if (pod.get("spec") or {}).get("schedulerName") == keys.DEFAULT_SCHEDULER_NAME:
        return "-"  # routed to hami-scheduler, with nothing we can read as a request
    return None


def request_text(count: int, memory_mib: int, cores: int) -> str:
    memory = "all memory" if memory_mib == 0 else f"{memory_mib} MiB"
    return f"{count} x ({memory}, {cores}%)" if memory_mib or cores < 100 else f"{count} whole card{'s' * (count > 1)}"


def _claim_phrases(pod: JSON, claims: Sequence[JSON]) -> list[str]:
    """One phrase per pod claim that asks our DeviceClass for a device."""
    meta = pod.get("metadata") or {}
    phrases = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(entry, dict):
            continue
        claim = _claim_of(meta, entry, claims)
        if claim is None:
            template = str(entry.get("resourceClaimTemplateName") or "")
            if template.startswith("hami-dcu-"):  # the webhook's templates; the claim is not made yet
                phrases.append(f"claim {entry.get('name')} (from template {template}, not created yet)")
            continue
        wanted = [describe_device_request(r) for r in ((claim.get("spec") or {}).get("devices") or {})
                  .get("requests") or [] if _ours(r)]
        if wanted:
            phrases.append(f"claim {entry.get('name')}: {', '.join(wanted)}")
    return phrases


def _claim_of(pod_meta: JSON, entry: JSON, claims: Sequence[JSON]) -> JSON | None:
    namespace = pod_meta.get("namespace") or "default"
    named = entry.get("resourceClaimName")
    for claim in claims:
        cmeta = claim.get("metadata") or {}
        if (cmeta.get("namespace") or "default") != namespace:
            continue
        if named and cmeta.get("name") == named:
            return claim
        owners = cmeta.get("ownerReferences") or []
        made_for_pod = any(o.get("kind") == "Pod" and o.get("uid") == pod_meta.get("uid") for o in owners)
        if not named and made_for_pod and (cmeta.get("annotations") or {}).get(
                "resource.kubernetes.io/pod-claim-name") == entry.get("name"):
            return claim
    return None


def _ours(request: JSON) -> bool:
    exactly = request.get("exactly")
    if isinstance(exactly, dict):
        return exactly.get("deviceClassName") == dra_names.DEVICE_CLASS
    return any(isinstance(s, dict) and s.get("deviceClassName") == dra_names.DEVICE_CLASS
               for s in request.get("firstAvailable") or [])


def describe_device_request(request: JSON) -> str:
    """"1 x (cores 12, memory 2000Mi)" for a claim's device request (its first alternative
    when it lists several)."""
    exactly = request.get("exactly")
    if not isinstance(exactly, dict):
        alternatives = [s for s in request.get("firstAvailable") or [] if isinstance(s, dict)]
        exactly = alternatives[0] if alternatives else {}
        more = f" or {len(alternatives) - 1} other card size{'s' * (len(alternatives) > 2)}" \
            if len(alternatives) > 1 else ""
    else:
        more = ""
    count = exactly.get("count", 1) if exactly.get("allocationMode", "ExactCount") == "ExactCount" else "all"
    capacity = ((exactly.get("capacity") or {}).get("requests") or {})
    shown = ", ".join(f"{k} {v}" for k, v in sorted(capacity.items()))
    return f"{count} x ({shown}){more}" if shown else f"{count} whole card{'s' * (count != 1)}{more}"


def _latest(events: Iterable[JSON], wanted: Callable[[JSON], bool]) -> dict[tuple[str, str], JSON]:
    """Per pod, the latest of the events `wanted` keeps."""
    latest: dict[tuple[str, str], tuple[datetime, JSON]] = {}
    for event in events:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        if involved.get("kind") != "Pod" or not wanted(event):
            continue
        key = (involved.get("namespace") or "default", involved.get("name") or "")
        when = _event_time(event)
        if when is None:
            continue
        if key not in latest or when >= latest[key][0]:
            latest[key] = (when, event)
    return {key: event for key, (_, event) in latest.items()}


def _event_time(event: JSON) -> datetime | None:
    series = event.get("series") or {}
    for value in (series.get("lastObservedTime"), event.get("lastTimestamp"), event.get("eventTime"),
                  (event.get("metadata") or {}).get("creationTimestamp")):
        when = _time(value)
        if when is not None:
            return when
    return None


def _time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _source(event: JSON) -> str:
    component = (event.get("source") or {}).get("component") or event.get("reportingComponent") or ""
    reason = event.get("reason") or "Warning"
    return f"{reason} ({component})" if component else str(reason)

"""The admission decision for one pod: pure, no I/O.

A pod *uses DCU* when any container or init container names a DCU resource in limits or
requests. Such a pod is routed to hami-scheduler, or denied with a message that says what
to change. Pods that do not use DCU pass untouched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from hami_dcu.common import keys
from hami_dcu.common.requests import RequestError, asks_for_dcu, names_dcu, parse_container_request
from hami_dcu.common.writers import Identities
from hami_dcu.webhook.advice import scheduling_warnings
from hami_dcu.webhook.quotacheck import QuotaLookup, quota_problem

JSON = dict[str, Any]


@dataclass(frozen=True)
class Settings:
    scheduler_name: str = keys.DEFAULT_SCHEDULER_NAME
    # schedulerName values we may replace; anything else is the user's explicit choice.
    overwritable_schedulers: tuple[str, ...] = (keys.KUBE_DEFAULT_SCHEDULER,)
    resources: keys.ResourceNames = keys.DEFAULT_RESOURCES
    # Who may write allocation state (common/writers.py); nobody when not configured.
    identities: Identities = field(default_factory=Identities)
    # Namespace DCU quotas and use (webhook/quotacheck.py); none when the webhook runs alone.
    quota: QuotaLookup | None = None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # a short, stable code for metrics and logs
    message: str = ""
    patch: list[JSON] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _deny(reason: str, message: str) -> Decision:
    return Decision(allowed=False, reason=reason, message=message)


DEFAULT_SETTINGS = Settings()


def review(pod: JSON, settings: Settings = DEFAULT_SETTINGS) -> Decision:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    labels = meta.get("labels") or {}
    if labels.get(keys.WEBHOOK_LABEL) == keys.WEBHOOK_IGNORE:
        return Decision(allowed=True, reason="ignored")
    init_containers = list(spec.get("initContainers") or [])
    containers = list(spec.get("containers") or [])
    names = settings.resources
    # `dcunum: 0` alone asks for no DCU (as in HAMi): such a pod is not ours to route.
    if not any(asks_for_dcu(c, names) for c in init_containers + containers):
        return Decision(allowed=True, reason="no-dcu")

    forged = sorted(set(meta.get("annotations") or {}) & keys.SCHEDULER_OWNED_POD_ANNOTATIONS)
    if forged:
        return _deny("forged-annotations",
                     f"annotations {', '.join(forged)} are written only by {settings.scheduler_name}; "
                     "remove them from the pod")
    if spec.get("nodeName"):
        return _deny("node-name-set",
                     f"spec.nodeName is set to {spec['nodeName']}: a DCU pod must be placed by "
                     f"{settings.scheduler_name}, which picks its cards; remove spec.nodeName "
                     "(use a nodeSelector or node affinity to constrain the node)")

    for container in init_containers:
        if not names_dcu(container, names):
            continue
        resources = container.get("resources") or {}
        named = {k for section in ("limits", "requests") for k in (resources.get(section) or {})}
        if names.memory in named or names.cores in named:
            return _deny("init-container-sharing",
                         f"init container {container.get('name')}: DCU sharing ({names.memory}/{names.cores}) "
                         f"is not supported in init containers; request whole cards with {names.count} only")
    for container in init_containers + containers:
        if not names_dcu(container, names):
            continue
        cname = container.get("name")
        if ((container.get("securityContext") or {}).get("privileged")) is True:
            return _deny("privileged",
                         f"container {cname} is privileged and uses a DCU: a privileged container sees every "
                         "card on the node, so its share cannot be enforced; drop privileged: true")
        try:
            request = parse_container_request(container, names)
        except RequestError as exc:
            return _deny("invalid-request", str(exc))
        if request is not None and request.count > 1 and request.shared:
            return _deny("multi-card-sharing",
                         f"container {cname}: {names.memory}/{names.cores} with {names.count} {request.count}; "
                         f"one container gets one shared vDCU, or several whole cards: use {names.count}: 1 "
                         f"with {names.memory}/{names.cores}, or drop them to get {request.count} whole cards")

    hints = scheduling_warnings(meta.get("annotations") or {})
    current = spec.get("schedulerName") or ""
    if current and current != settings.scheduler_name and current not in settings.overwritable_schedulers:
        return Decision(allowed=True, reason="other-scheduler",
                        warnings=[f"schedulerName {current} is kept: its DCU request will not be honoured by "
                                  f"{settings.scheduler_name}"[:120]])
    problem = quota_problem(pod, names, settings.quota)
    if problem:
        return _deny("quota-exceeded", f"pod {problem}")
    if current == settings.scheduler_name:
        return Decision(allowed=True, reason="already-routed", warnings=hints)
    # Only spec changes, so only spec is diffed (the whole pod costs 3x the time).
    mutated_spec = {**spec, "schedulerName": settings.scheduler_name}
    patch = jsonpatch.make_patch({"spec": spec}, {"spec": mutated_spec}).patch
    return Decision(allowed=True, reason="routed", patch=patch, warnings=hints)

"""Admission's deny rules for DCU pods: one ordered list of named pure checks.

A pod can reach kube-scheduler without the webhook having seen it: a `hami.io/webhook:
ignore` label, a webhook that is down under `failurePolicy: Ignore`, a `schedulerName` set by
hand. So the rules that keep a share enforceable are not the webhook's alone: the webhook
applies them at CREATE, the extender again at `/filter` and `/bind`, a device plugin again
before it serves `Allocate`. Each runs the same list and refuses with the same words.

Each check sees the pod once parsed (`DcuPod`) and says why it is refused, or None. A check
names the stages it belongs to: the allocation annotations and `spec.nodeName` are forged
only when the pod is created (by `/filter` and `Allocate` hami-dcu has written them itself),
what the containers ask for is checked everywhere. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from hami_dcu.common.protocol import keys, objects
from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.objects import JSON
from hami_dcu.common.protocol.requests import DcuRequest, RequestError, names_dcu, parse_container_request
from hami_dcu.common.protocol.untrusted import shown


class Stage(StrEnum):
    CREATE = "create"  # the webhook, when the pod is created
    PLACE = "place"  # the extender's /filter and /bind
    SERVE = "serve"  # a device plugin's Allocate


ALL_STAGES = frozenset(Stage)


@dataclass(frozen=True)
class CheckSettings:
    resources: ResourceNames  # the naming set's (keys.Naming.resources)
    # Named in the messages: the scheduler that alone may place DCU pods and write their state.
    scheduler_name: str = keys.DEFAULT_SCHEDULER_NAME


@dataclass(frozen=True, slots=True)
class DcuContainer:
    """A container or init container naming a DCU resource, its request parsed once."""

    container: JSON
    request: DcuRequest | RequestError | None  # None: asks for none (`dcunum: 0` alone)
    init: bool = False
    # A native sidecar: an init container with `restartPolicy: Always`, which runs beside the
    # app containers for the pod's whole life and may hold a share as they do.
    sidecar: bool = False

    @property
    def name(self) -> str:
        return str(self.container.get("name") or "<unnamed>")


@dataclass(frozen=True, slots=True)
class DcuPod:
    pod: JSON
    containers: tuple[DcuContainer, ...]  # only those naming a DCU resource, init containers first

    @property
    def asks(self) -> bool:
        """It asks for a DCU, or names one in a way that cannot be honoured."""
        return any(c.request is not None for c in self.containers)

    @property
    def annotations(self) -> dict[str, str]:
        return objects.annotations(self.pod)

    @property
    def spec(self) -> objects.PodSpec:
        return objects.pod_spec(self.pod)


def _parsed(container: JSON, names: ResourceNames) -> DcuRequest | RequestError | None:
    try:
        return parse_container_request(container, names)
    except RequestError as exc:
        return exc


def dcu_pod(pod: JSON, names: ResourceNames) -> DcuPod:
    found = [DcuContainer(c, _parsed(c, names), init=True, sidecar=c.get("restartPolicy") == "Always")
             for c in objects.init_containers(pod) if names_dcu(c, names)]
    found += [DcuContainer(c, _parsed(c, names)) for c in objects.containers(pod) if names_dcu(c, names)]
    return DcuPod(pod, tuple(found))


# --- the checks, in the order they are applied ------------------------------------------------

def forged_annotations(pod: DcuPod, settings: CheckSettings) -> str | None:
    forged = sorted(set(pod.annotations) & keys.SCHEDULER_OWNED_POD_ANNOTATIONS)
    if not forged:
        return None
    return (f"annotations {', '.join(forged)} are written only by {settings.scheduler_name}; "
            "remove them from the pod")


def node_name_set(pod: DcuPod, settings: CheckSettings) -> str | None:
    node = pod.spec.get("nodeName")
    if not node:
        return None
    return (f"spec.nodeName is set to {shown(node, 253)}: a DCU pod must be placed by {settings.scheduler_name}, "
            "which picks its cards; remove spec.nodeName (use a nodeSelector or node affinity to constrain the node)")


def init_container_sharing(pod: DcuPod, settings: CheckSettings) -> str | None:
    names = settings.resources
    for entry in pod.containers:
        if not entry.init or entry.sidecar:
            continue
        resources = entry.container.get("resources") or {}
        named = {k for section in ("limits", "requests") for k in (resources.get(section) or {})}
        if names.memory in named or names.cores in named:
            return (f"init container {entry.name}: DCU sharing ({names.memory}/{names.cores}) is not supported in "
                    f"init containers (only in native sidecars, restartPolicy: Always); request whole cards with "
                    f"{names.count} only")
    return None


def privileged(pod: DcuPod, settings: CheckSettings) -> str | None:
    for entry in pod.containers:
        if ((entry.container.get("securityContext") or {}).get("privileged")) is True:
            return (f"container {entry.name} is privileged and uses a DCU: a privileged container sees every "
                    "card on the node, so its share cannot be enforced; drop privileged: true")
    return None


def invalid_request(pod: DcuPod, settings: CheckSettings) -> str | None:
    for entry in pod.containers:
        if isinstance(entry.request, RequestError):
            return str(entry.request)
    return None


def multi_card_sharing(pod: DcuPod, settings: CheckSettings) -> str | None:
    names = settings.resources
    for entry in pod.containers:
        request = entry.request
        if isinstance(request, DcuRequest) and request.count > 1 and request.shared:
            return (f"container {entry.name}: {names.memory}/{names.cores} with {names.count} {request.count}; "
                    f"one container gets one shared vDCU, or several whole cards: use {names.count}: 1 "
                    f"with {names.memory}/{names.cores}, or drop them to get {request.count} whole cards")
    return None


@dataclass(frozen=True)
class Check:
    name: str  # a short, stable code: the webhook's reason in metrics and logs
    judge: Callable[[DcuPod, CheckSettings], str | None]
    stages: frozenset[Stage] = ALL_STAGES


CHECKS: tuple[Check, ...] = (
    Check("forged-annotations", forged_annotations, frozenset({Stage.CREATE})),
    Check("node-name-set", node_name_set, frozenset({Stage.CREATE})),
    Check("init-container-sharing", init_container_sharing),
    Check("privileged", privileged),
    Check("invalid-request", invalid_request),
    Check("multi-card-sharing", multi_card_sharing),
)


@dataclass(frozen=True, slots=True)
class Refusal:
    check: str
    message: str


def first_refusal(pod: DcuPod, settings: CheckSettings, stage: Stage) -> Refusal | None:
    """The first check of `stage` that refuses the pod; None for a pod asking for no DCU."""
    if not pod.asks:
        return None
    for check in CHECKS:
        if stage in check.stages and (message := check.judge(pod, settings)) is not None:
            return Refusal(check.name, message)
    return None


def refusal_of(pod: JSON, settings: CheckSettings, stage: Stage) -> Refusal | None:
    """first_refusal for a pod not parsed yet."""
    return first_refusal(dcu_pod(pod, settings.resources), settings, stage)

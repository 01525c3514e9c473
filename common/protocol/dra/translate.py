"""HAMi-style requests as DRA claims: pure, no I/O (the webhook that applies it does the I/O).

A container asking `dcunum`/`dcumem`/`dcucores` (either naming set) gets a pod claim made
from a ResourceClaimTemplate per request shape, so users write the same pod spec in both
modes. The template's name is a hash of its spec: the same shape in a namespace shares one
template, created once (a create that finds it is not an error), and never edited.

Shape -> device request (DeviceClass dra.hygon.com, Hygon's capacity names):
* whole cards (`dcunum: N`, no memory or cores): N devices, no capacity, so each takes all
  of a card's cores and memory (the policies' defaults);
* a share (`dcunum: 1` with `dcumem` MiB and/or `dcucores` %): `memory: <MiB>Mi`, and for
  cores below 100 % the compute units that percentage is of the card. Cards differ in
  compute units (K100_AI 120, Z100 60), so the request names them: one request pinned to
  the cards with that many units, or, with several models published, `firstAvailable`
  subrequests, one per CU count, smallest cards first (a share then leaves the big cards
  for what needs them). Cores given as 100 % (or not at all) take the whole card's units.
The dcu resources are removed from the container (no node has them in DRA mode) and the
claim is added to `spec.resourceClaims` and the container's `resources.claims`. A pod that
already has `resourceClaims` is left alone: its author wrote DRA by hand.

Where the DeviceClass names the count resource as its extendedResourceName (Kubernetes 1.37+),
a pod asking whole cards by the count alone is not rewritten: kube-scheduler makes its claim
itself, and `extended_resource_claim` says what that claim asks, for the quota.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from dataclasses import dataclass, field

import jsonpatch

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.errors import DraError
from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.objects import JSON
from hami_dcu.common.protocol.requests import DcuRequest, RequestError, names_dcu, parse_container_request

MAX_SUBREQUESTS = 8  # the API's limit on firstAvailable
REQUEST = "dcu"
TEMPLATE_PREFIX = "hami-dcu-"
LABEL_MAX = 63
EVERY_NAMING = tuple(n.resources for n in keys.NAMINGS.values())  # both sets: the webhook reads pods of either


class TranslateError(DraError, ValueError):
    """The request cannot be written as a claim; the message says what to change."""


@dataclass(frozen=True)
class Translation:
    patch: list[JSON] = field(default_factory=list)  # JSON Patch for the pod
    templates: list[JSON] = field(default_factory=list)  # ResourceClaimTemplates the pod names


def compute_units(percent: int, units: int) -> int:
    """`percent` of a card with `units` compute units, rounded up, at least one."""
    return max(1, math.ceil(percent * units / 100))


def _cores_selector(units: int) -> list[JSON]:
    return [{"cel": {"expression": f'device.capacity["{names.DRIVER}"].{names.CAP_CORES}'
                                   f'.compareTo(quantity("{units}")) == 0'}}]


_PINNED = re.compile(r'device\.capacity\["' + re.escape(names.DRIVER) + r'"\]\.' + re.escape(names.CAP_CORES)
                     + r'\.compareTo\(quantity\("([0-9]{1,6})"\)\) == 0')


def pinned_units(selectors: object) -> int | None:
    """The card size (compute units) a request's selectors pin it to, when they are the ones
    `device_request` writes; None for any other selectors (a hand-written claim's)."""
    if not isinstance(selectors, list) or len(selectors) != 1 or not isinstance(selectors[0], dict):
        return None
    cel = selectors[0].get("cel")
    expression = cel.get("expression") if isinstance(cel, dict) else None
    found = _PINNED.fullmatch(expression) if isinstance(expression, str) else None
    if found is None or selectors != _cores_selector(int(found.group(1))):
        return None
    return int(found.group(1))


def device_request(request: DcuRequest, unit_counts: tuple[int, ...]) -> JSON:
    """The claim's one device request for a container's DCU request."""
    base: JSON = {"deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount", "count": request.count}
    if not request.shared:
        return {"name": REQUEST, "exactly": base}
    capacity: JSON = {}
    if request.memory_mib:
        capacity[names.CAP_MEMORY] = f"{request.memory_mib}Mi"
    if request.cores >= 100:
        return {"name": REQUEST, "exactly": {**base, "capacity": {"requests": capacity}}}
    counts = sorted(set(unit_counts))
    if not counts:
        raise TranslateError("no DCU is published in DRA mode yet (no ResourceSlice of dra.hygon.com), so "
                             f"{request.cores}% of a card cannot be turned into compute units; try again once "
                             "the DRA driver runs on a node")
    if len(counts) > MAX_SUBREQUESTS:
        raise TranslateError(f"{len(counts)} card sizes are published; a percentage of cores can be written for "
                             f"at most {MAX_SUBREQUESTS}: ask for cores in compute units with a ResourceClaim")

    def pinned(units: int) -> JSON:
        return {**base, "selectors": _cores_selector(units), "capacity": {"requests": {
            **capacity, names.CAP_CORES: str(compute_units(request.cores, units))}}}

    if len(counts) == 1:
        return {"name": REQUEST, "exactly": pinned(counts[0])}
    return {"name": REQUEST, "firstAvailable": [{"name": f"cu{units}", **pinned(units)} for units in counts]}


def template(request: DcuRequest, unit_counts: tuple[int, ...]) -> JSON:
    return template_of({"spec": {"devices": {"requests": [device_request(request, unit_counts)]}}})


def template_name(spec: JSON) -> str:
    """The name of the template whose `spec` this is: a hash of it, so one shape is one name."""
    return TEMPLATE_PREFIX + hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def template_of(spec: JSON) -> JSON:
    """The ResourceClaimTemplate hami-dcu writes for `spec` (the template's spec: claim metadata
    and claim spec), named by its hash and labelled as ours."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": template_name(spec), "labels": {names.OWNER_LABEL: names.OWNER}},
            "spec": spec}


def pod_claim_name(container: str) -> str:
    """A DNS label per container: `dcu-<container>`, hashed when that is too long."""
    name = f"{REQUEST}-{container}"
    if len(name) <= LABEL_MAX:
        return name
    return name[:LABEL_MAX - 9] + "-" + hashlib.sha256(container.encode()).hexdigest()[:8]


def _naming_of(container: JSON, namings: tuple[ResourceNames, ...]) -> ResourceNames | None:
    used = [n for n in namings if names_dcu(container, n)]
    if len(used) > 1:
        raise TranslateError(f"container {container.get('name')}: names DCU resources of two naming sets; use one")
    return used[0] if used else None


def _request_index(container: JSON, resource: str) -> int:
    """Where `resource` stands among the container's requested resources, sorted: the index
    kube-scheduler puts in its request names (the API server copies limits into requests)."""
    resources = container.get("resources") or {}
    asked = resources.get("requests") or resources.get("limits") or {}
    ordered = sorted(asked)
    return ordered.index(resource) if resource in ordered else 0


def _asks_count_alone(container: JSON, resources: ResourceNames) -> bool:
    """The container names no DCU memory or cores, in limits or in requests."""
    written = container.get("resources") or {}
    return not any(name in (written.get(part) or {}) for part in ("limits", "requests")
                   for name in (resources.memory, resources.cores))


def extended_resource_claim(pod: JSON, resources: ResourceNames) -> JSON | None:
    """The claim spec kube-scheduler makes for `pod` when the DeviceClass names `resources.count` as
    its extendedResourceName (DRAExtendedResource, GA in Kubernetes 1.37), for the quota to
    count at admission; None when the pod is not one kube-scheduler can serve that way: it asks
    no DCU, or a container names DCU memory or cores (a share, or a whole card written as
    100 %: only the count resource is served through the class, so those pods are rewritten).

    Requests as kube-scheduler's createRequestsAndMappings writes them: one per long-lived
    container (app containers and restartable init containers), named
    `container-<index>-request-<index of the resource in its sorted requests>`, and one for
    the init containers that run before them, only for what the long-lived containers after
    them do not already hold, the largest of those. Raises RequestError for a count that is
    not a whole number (the deny rules refuse it first)."""
    spec = pod.get("spec") or {}
    inits = list(spec.get("initContainers") or [])
    containers = inits + list(spec.get("containers") or [])
    counts: list[int] = []
    for container in containers:
        if not names_dcu(container, resources):
            counts.append(0)
            continue
        if not _asks_count_alone(container, resources):
            return None
        parsed = parse_container_request(container, resources)
        counts.append(parsed.count if parsed is not None else 0)
    if not any(counts):
        return None
    short_lived = {i for i, c in enumerate(inits) if c.get("restartPolicy") != "Always"}

    def request(index: int, count: int) -> JSON:
        name = f"container-{index}-request-{_request_index(containers[index], resources.count)}"
        return {"name": name, "exactly": {"deviceClassName": names.DEVICE_CLASS,
                                          "allocationMode": "ExactCount", "count": count}}

    requests = [request(i, c) for i, c in enumerate(counts) if c and i not in short_lived]
    extra = [(c - sum(counts[j] for j in range(i, len(counts)) if j not in short_lived), i)
             for i, c in enumerate(counts) if c and i in short_lived]
    most = max(extra, default=(0, 0), key=lambda e: e[0])  # kube-scheduler keeps the first of the largest
    if most[0] > 0:
        requests.append(request(most[1], most[0]))
    return {"devices": {"requests": sorted(requests, key=lambda r: r["name"])}}


def translate(pod: JSON, unit_counts: tuple[int, ...],
              namings: tuple[ResourceNames, ...] = EVERY_NAMING) -> Translation:
    """The patch and templates that make `pod` ask through claims; empty when it asks no DCU
    or already uses resourceClaims. Raises TranslateError or RequestError for a request that
    cannot be honoured."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):
        return Translation()
    after = copy.deepcopy(spec)
    claims: list[JSON] = []
    templates: dict[str, JSON] = {}
    for section in ("initContainers", "containers"):
        for container in after.get(section) or []:
            naming = _naming_of(container, namings)
            if naming is None:
                continue
            request = parse_container_request(container, naming)
            resources = container.setdefault("resources", {})
            for part in ("limits", "requests"):
                values = resources.get(part)
                if values is None:
                    continue
                for resource in naming.all():
                    values.pop(resource, None)
                if not values:
                    del resources[part]
            if request is None:  # `dcunum: 0`: asks for nothing, and keeps asking for nothing
                continue
            if request.count > 1 and request.shared:
                raise TranslateError(f"container {container.get('name')}: a shared vDCU is one card; ask for "
                                     f"{naming.count}: 1 with {naming.memory}/{naming.cores}, or whole cards")
            made = template(request, unit_counts)
            templates[made["metadata"]["name"]] = made
            claim = pod_claim_name(container["name"])
            claims.append({"name": claim, "resourceClaimTemplateName": made["metadata"]["name"]})
            resources.setdefault("claims", []).append({"name": claim})
    if not claims:
        return Translation()
    after["resourceClaims"] = claims
    return Translation(patch=jsonpatch.make_patch({"spec": spec}, {"spec": after}).patch,
                       templates=list(templates.values()))


__all__ = ["RequestError", "TranslateError", "Translation", "extended_resource_claim", "translate"]

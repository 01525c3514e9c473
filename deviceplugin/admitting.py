"""Which pod an Allocate call serves when several await one on this node and no lock names
one: read from the kubelet's own pod resources answer. Pure decisions, no I/O.

A Volcano gang may place several DCU shares on one node in one session, so HAMi's node lock
(one pod per node between bind and Allocate) cannot name the pod, and the kubelet's Allocate
names none. The kubelet (v1.37, docs/architecture.md, Which pod an Allocate serves without the
lock) admits pods one at a time: `HandlePodAdditions` runs on the sync loop's one goroutine and
puts each pod in the pod manager (`podManager.AddPod`) just before admitting it
(`allocationManager.AddPod`, under its mutex); the device manager's `Allocate` is called from
that admission, container by container, and records a container's device ids only when the
plugin's Allocate has returned (`allocateContainerResources`, `podDevices.insert`). The pod
resources `List`, asked during an Allocate, lists the pod manager's active pods
(`GetActivePods`) with the devices recorded so far; it takes no lock the Allocate holds. So:

- the pod being admitted IS listed, its containers served earlier with their ids, the
  container being served (and later ones) with none;
- pods admitted earlier are listed with all their ids;
- pods the kubelet has not yet taken up (or has rejected) are not listed.

Among the pods the API says await an Allocate here, the one listed with a container that asks
for the resource and holds none of its ids is the one being admitted. Refused, never guessed:
none such (the API read lags the kubelet, or the pod is not the one), two or more (the one
exception to one-at-a-time: the kubelet re-issues Allocate from a pod worker, beside the
admissions, when a container it starts has no device ids recorded, after a kubelet restart;
that pod is listed without ids too), a pod the kubelet lists under its name twice (List names
no UID), a pod whose only asks are in plain init containers beside another candidate (List
shows only restartable init containers, so whether they were served cannot be seen), and a
count that differs from the kubelet's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hami_dcu.common.protocol import objects
from hami_dcu.common.protocol.errors import DevicePluginError
from hami_dcu.common.protocol.objects import JSON
from hami_dcu.common.protocol.requests import asks_for_count
from hami_dcu.node.api.podresources.v1 import api_pb2

TERMINAL = ("Succeeded", "Failed")


class AdmittingRefused(DevicePluginError, RuntimeError):
    """The kubelet's answer does not prove which pod this Allocate call is for."""

    def __init__(self, message: str, ambiguous: bool = False) -> None:
        self.ambiguous = ambiguous
        super().__init__(message)


@dataclass(frozen=True)
class Listed:
    """One pod of a pod resources List answer: the containers List shows (app containers and
    restartable init containers), each with the ids of one resource it holds (empty: none)."""

    namespace: str
    name: str
    devices: Mapping[str, tuple[str, ...]]


def listings(response: api_pb2.ListPodResourcesResponse, resource: str) -> list[Listed]:
    """Every pod of the answer, containers without devices kept (node/podresources.py's
    `containers_of` drops them: here they are the point)."""
    found = []
    for pod in response.pod_resources:
        devices: dict[str, tuple[str, ...]] = {}
        for container in pod.containers:
            ids: list[str] = []
            for held in container.devices:
                if held.resource_name == resource:
                    ids.extend(held.device_ids)
            devices[container.name] = tuple(ids)
        found.append(Listed(pod.namespace, pod.name, devices))
    return found


@dataclass(frozen=True)
class _Reading:
    """What the List answer says of one API pod."""

    pod: JSON
    unserved: tuple[str, ...]  # listed containers asking for the resource, holding none of it
    hidden: tuple[str, ...]  # plain init containers asking for it: List never shows them
    asks_listed: bool  # some container List shows asks for it


def admitting_pod(awaiting: Sequence[JSON], bound: Sequence[JSON], listed: Sequence[Listed], resource: str,
                  request_count: int) -> JSON:
    """The pod of `awaiting` the kubelet is admitting during this Allocate call (for a container
    asking `request_count` of `resource`); raises AdmittingRefused otherwise.

    `awaiting`: the pods the API shows bound to this node and still awaiting an Allocate of
    `resource` (deviceplugin/lockless.py's `awaiting_pods`). `bound`: every pod the API shows
    bound to this node (awaiting ones may be among them): a placed one that List shows without
    its ids may be in the kubelet's re-Allocate, which makes the call ambiguous.
    `listed`: the pod resources List answer asked during this call (`listings`)."""
    by_name: dict[tuple[str, str], list[Listed]] = {}
    for entry in listed:
        by_name.setdefault((entry.namespace, entry.name), []).append(entry)
    awaiting_uids = {objects.metadata(p).get("uid") for p in awaiting}
    candidates = _awaiting_candidates(awaiting, by_name, resource) + _rivals(bound, awaiting_uids, by_name, resource)
    if not candidates:
        raise AdmittingRefused(
            f"none of the {len(awaiting)} pods awaiting a {resource} allocation on this node is listed by the "
            "kubelet's pod resources API without its device ids: the pod being admitted is not among them "
            "(the API read may lag the kubelet)")
    if len(candidates) > 1:
        raise AdmittingRefused(
            f"{len(candidates)} pods are listed by the kubelet without their {resource} ids: "
            f"{'; '.join(c.why for c in candidates)}. Which one this Allocate serves cannot be proven: "
            "refused rather than guessed", ambiguous=True)
    [found] = candidates
    if found.reading is None:
        raise AdmittingRefused(f"the only pod listed without its {resource} ids is {found.why}: "
                               "no pod awaiting an allocation is being admitted")
    _check_count(found.pod, found.reading, resource, request_count)
    return found.pod


@dataclass(frozen=True)
class _Candidate:
    pod: JSON
    why: str  # for messages
    reading: _Reading | None  # None: a placed pod, not an awaiting one


def _key(pod: JSON) -> tuple[str, str]:
    return objects.namespace(pod) or "", objects.name(pod) or ""


def _awaiting_candidates(awaiting: Sequence[JSON], by_name: Mapping[tuple[str, str], list[Listed]],
                         resource: str) -> list[_Candidate]:
    """The awaiting pods List shows as being admitted (or that it cannot show otherwise)."""
    found = []
    for pod in awaiting:
        entries = by_name.get(_key(pod), [])
        if not entries:
            continue  # not yet taken up by the kubelet (or rejected by it): not being admitted
        if len(entries) > 1:
            raise AdmittingRefused(
                f"the kubelet lists {len(entries)} pods named {_who(pod)} (List names no UID, an old pod of "
                "that name may still be there): which one it admits cannot be told", ambiguous=True)
        reading = _read(pod, entries[0], resource)
        if reading.unserved:
            found.append(_Candidate(
                pod, f"{_who(pod)} (listed without {resource} ids in {', '.join(reading.unserved)})", reading))
        elif reading.hidden and not reading.asks_listed:
            found.append(_Candidate(pod, f"{_who(pod)} (asks for {resource} only in init containers "
                                         f"{', '.join(reading.hidden)}, which List does not show)", reading))
        # else: every container List shows holds its ids: admitted already, the API read lags
    return found


def _rivals(bound: Sequence[JSON], awaiting_uids: set[str | None], by_name: Mapping[tuple[str, str], list[Listed]],
            resource: str) -> list[_Candidate]:
    """Placed pods (not awaiting, not finished) listed without their ids: the kubelet may be
    allocating them again (GetDeviceRunContainerOptions, after a restart) beside the admissions."""
    found = []
    for pod in bound:
        if objects.metadata(pod).get("uid") in awaiting_uids or objects.phase(pod) in TERMINAL:
            continue
        unserved = {c for entry in by_name.get(_key(pod), []) for c in _read(pod, entry, resource).unserved}
        if unserved:
            found.append(_Candidate(
                pod, f"{_who(pod)} (awaits no allocation, yet is listed without {resource} ids in "
                     f"{', '.join(sorted(unserved))}: the kubelet may be allocating it again after a restart)", None))
    return found


def _check_count(pod: JSON, reading: _Reading, resource: str, request_count: int) -> None:
    """The kubelet serves the first listed container without ids (plain init containers come
    before it, unseen: with those the count cannot be matched to a container)."""
    if not reading.unserved or reading.hidden:
        return
    asked = _count(_container(pod, reading.unserved[0]), resource)
    if asked is not None and asked != request_count:
        raise AdmittingRefused(
            f"pod {_who(pod)} is being admitted, but its next container without {resource} ids, "
            f"{reading.unserved[0]}, asks for {asked} and the kubelet passed {request_count}")


def _read(pod: JSON, entry: Listed, resource: str) -> _Reading:
    unserved: list[str] = []
    asks_listed = False
    for container in _listed_containers(pod):
        if not asks_for_count(container, resource):
            continue
        asks_listed = True
        cname = container.get("name") or ""
        if not entry.devices.get(cname):
            unserved.append(cname)
    hidden = tuple(c.get("name") or "" for c in objects.init_containers(pod)
                   if c.get("restartPolicy") != "Always" and asks_for_count(c, resource))
    return _Reading(pod, tuple(unserved), hidden, asks_listed)


def _listed_containers(pod: JSON) -> list[JSON]:
    """The containers List shows, in its order: restartable init containers, then app containers."""
    return ([c for c in objects.init_containers(pod) if c.get("restartPolicy") == "Always"]
            + list(objects.containers(pod)))


def _container(pod: JSON, cname: str) -> JSON:
    return next(c for c in _listed_containers(pod) if c.get("name") == cname)


def _count(container: JSON, resource: str) -> int | None:
    """What the kubelet asks the plugin for: the container's limit (it reads only limits for a
    device plugin resource); None when it cannot be read as a whole number."""
    raw = ((container.get("resources") or {}).get("limits") or {}).get(resource)
    try:
        return int(str(raw))
    except ValueError:
        return None


def _who(pod: JSON) -> str:
    return f"{objects.namespace(pod)}/{objects.name(pod)}"

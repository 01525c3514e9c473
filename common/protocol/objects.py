"""Typed views of the Kubernetes objects we read most: pods, nodes, ResourceClaims.

Objects travel as the JSON the API server sends, decoded to plain dicts (`JSON`); the client, the
watches and the AdmissionReview hand them over so, and tests build them so. The TypedDicts below
name the parts of them hami-dcu reads, with the types the API server guarantees (an annotation
is a string; a field it omits or sends as null is absent), and the accessors read those parts
the one way the code always has: a missing or null `metadata`, `spec` or `status` reads as empty
(`(pod.get("spec") or {}).get("nodeName")`), so a half-built object answers None, never a
KeyError. They only read: each returns the object's own dict or value, no copy.

What an untrusted writer may have shaped (a pod before the webhook's shape check,
common/protocol/podshape.py; another component's annotation values) is still checked where it
is read: the views say what the API server stores, not what a tenant meant.
"""

# No `from __future__ import annotations` here, unlike the other modules: it binds the name
# `annotations`, which is the accessor below (every annotation in this module is valid at run
# time on Python 3.11).
from collections.abc import Mapping
from typing import Any, TypedDict, cast

# An object (or any part of one) as the API server sends it, decoded from JSON.
JSON = dict[str, Any]


class ObjectMeta(TypedDict, total=False):
    """metadata, the part of every object read here."""

    name: str
    namespace: str
    uid: str
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    annotations: dict[str, str]
    labels: dict[str, str]
    ownerReferences: list[JSON]


class PodSpec(TypedDict, total=False):
    """A pod's spec: where it is bound, who places it, its containers (each read by request
    parsing as JSON: common/protocol/requests.py)."""

    nodeName: str
    schedulerName: str
    containers: list[JSON]
    initContainers: list[JSON]
    resourceClaims: list[JSON]


class PodStatus(TypedDict, total=False):
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    conditions: list[JSON]


# The parts put together, for code that builds an object typed (the accessors below take these
# or plain JSON alike).


class Pod(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class NodeStatus(TypedDict, total=False):
    allocatable: dict[str, str]  # resource name -> quantity
    capacity: dict[str, str]


class Node(TypedDict, total=False):
    metadata: ObjectMeta  # the registration, the handshake and the node lock are annotations
    status: NodeStatus


class ResourceClaim(TypedDict, total=False):
    metadata: ObjectMeta
    spec: JSON  # devices.requests: read by the DRA driver's plan (dra/claims.py)
    status: JSON  # allocation.devices.results, reservedFor


# --- any object ---------------------------------------------------------------------------


def metadata(obj: Mapping[str, object]) -> ObjectMeta:
    return cast(ObjectMeta, obj.get("metadata") or {})


def annotations(obj: Mapping[str, object]) -> dict[str, str]:
    return metadata(obj).get("annotations") or {}


def name(obj: Mapping[str, object]) -> str | None:
    return metadata(obj).get("name")


def namespace(obj: Mapping[str, object]) -> str | None:
    return metadata(obj).get("namespace")


# --- pods ---------------------------------------------------------------------------------


def pod_spec(pod: Mapping[str, object]) -> PodSpec:
    return cast(PodSpec, pod.get("spec") or {})


def pod_status(pod: Mapping[str, object]) -> PodStatus:
    return cast(PodStatus, pod.get("status") or {})


def phase(pod: Mapping[str, object]) -> str | None:
    return pod_status(pod).get("phase")


def node_name(pod: Mapping[str, object]) -> str | None:
    """spec.nodeName: the node the pod is bound to, None (or "") while it is not."""
    return pod_spec(pod).get("nodeName")


def scheduler_name(pod: Mapping[str, object]) -> str | None:
    return pod_spec(pod).get("schedulerName")


def init_containers(pod: Mapping[str, object]) -> list[JSON]:
    return pod_spec(pod).get("initContainers") or []


def containers(pod: Mapping[str, object]) -> list[JSON]:
    return pod_spec(pod).get("containers") or []


# --- nodes --------------------------------------------------------------------------------


def node_status(node: Mapping[str, object]) -> NodeStatus:
    return cast(NodeStatus, node.get("status") or {})

"""Who may write hami-dcu's allocation state: one pure rule, no I/O.

The allocation (`dcu-devices-to-allocate`, `-allocated`, `vgpu-node`, bind phase and times)
on pods and the registration, handshake and node lock on nodes decide what every card is
charged with and what a container is handed. Anyone who can write them can reserve cards,
take a card that is not theirs, or lock a node, so only hami-dcu's own identities may:

* the scheduler extender: the pod keys, and only through the Binding it creates (or a pod
  write); on nodes, the lock;
* Volcano's scheduler, in Volcano mode only: the pod keys (its Hygon deviceshare writes the
  allocation with a pod patch, then binds), and on nodes the hcu handshake and the lock;
* a device plugin: on pods bound to its own node, the progress of an allocation
  (`dcu-devices-to-allocate` as it is served, `bind-phase`); on its own Node, the
  registration, the handshake and the lock (it releases it). "Its own node" comes from its
  ServiceAccount token, which the kubelet binds to the plugin's pod: the API server puts the
  node's name in `userInfo.extra["authentication.kubernetes.io/node-name"]`, as it does for
  NodeRestriction. A plugin token without a node name is trusted with nothing.

Besides, a device plugin may change nothing outside its own node at all (`plugin_scope`),
whatever the keys, as NodeRestriction narrows kubelets.

The chart's ValidatingAdmissionPolicies (chart/templates/admission-policy.yaml) state the
same rule in CEL for the API server; the webhook applies this one to every review it is sent,
so the local cluster, which evaluates no CEL, enforces it too. e2e/test_realcluster_trust.py
checks the two agree on the real API server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_dcu.common import keys

JSON = dict[str, Any]
NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

# Both naming sets' keys (common/keys.py): whichever set a cluster speaks, nobody else may
# forge the other's either (a HAMi component of that set may run beside us).
POD_KEYS: frozenset[str] = keys.SCHEDULER_OWNED_POD_ANNOTATIONS
NODE_KEYS: frozenset[str] = frozenset({keys.NODE_LOCK}) | keys.DCU_NAMING.node_keys | keys.HCU_NAMING.node_keys
SCHEDULER_NODE_KEYS: frozenset[str] = frozenset({keys.NODE_LOCK})
PLUGIN_POD_KEYS: frozenset[str] = frozenset(
    {keys.POD_BIND_PHASE, keys.DCU_NAMING.pod_devices_to_allocate, keys.HCU_NAMING.pod_devices_to_allocate})
PLUGIN_NODE_KEYS: frozenset[str] = NODE_KEYS
VOLCANO_NODE_KEYS: frozenset[str] = frozenset({keys.NODE_LOCK, keys.HCU_NAMING.node_handshake})

# What a request writes: a pod (CREATE/UPDATE, any pod subresource), a Binding (the
# pods/binding subresource, whose annotations the API server copies onto the pod without
# admitting a pod UPDATE), or a node.
POD, BINDING, NODE = "pod", "binding", "node"


@dataclass(frozen=True)
class Identities:
    """The usernames hami-dcu's components authenticate as (ServiceAccount usernames,
    `system:serviceaccount:<namespace>:<name>`). Empty: nobody is trusted."""

    scheduler: frozenset[str] = frozenset()
    device_plugin: frozenset[str] = frozenset()
    # Volcano mode: Volcano's scheduler, whose Hygon deviceshare writes the pod allocation and
    # stamps the node handshake (and, with its NodeLockEnable, the node lock) itself.
    volcano: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Caller:
    username: str
    node: str | None = None  # the node its token is bound to, when exactly one is named

    @classmethod
    def from_user_info(cls, user_info: Mapping[str, Any] | None) -> Caller:
        """From an AdmissionReview's `request.userInfo` (absent or malformed: nobody)."""
        info = user_info if isinstance(user_info, Mapping) else {}
        extra = info.get("extra") if isinstance(info.get("extra"), Mapping) else {}
        nodes = extra.get(NODE_NAME_EXTRA) if isinstance(extra, Mapping) else None
        node = nodes[0] if isinstance(nodes, list) and len(nodes) == 1 and isinstance(nodes[0], str) else None
        username = info.get("username") if isinstance(info.get("username"), str) else ""
        return cls(username=username, node=node or None)


def annotations_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (obj or {}).get("metadata") if isinstance(obj, Mapping) else None
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def changed_keys(new: Mapping[str, Any], old: Mapping[str, Any], watched: Iterable[str]) -> list[str]:
    """The watched keys the write sets, changes or removes (sorted)."""
    return sorted(k for k in watched if (k in new) != (k in old) or (k in new and new[k] != old[k]))


def watched_keys(kind: str) -> frozenset[str]:
    return NODE_KEYS if kind == NODE else POD_KEYS


def _allowed_keys(kind: str, caller: Caller, identities: Identities) -> frozenset[str]:
    if caller.username in identities.scheduler:
        return SCHEDULER_NODE_KEYS if kind == NODE else POD_KEYS
    if caller.username in identities.device_plugin:
        if kind == BINDING:
            return frozenset()
        return PLUGIN_NODE_KEYS if kind == NODE else PLUGIN_POD_KEYS
    if caller.username in identities.volcano:
        # The fork patches the pod, then binds it with a plain Binding; it never registers cards.
        if kind == BINDING:
            return frozenset()
        return VOLCANO_NODE_KEYS if kind == NODE else POD_KEYS
    return frozenset()


def node_of(kind: str, obj: Mapping[str, Any] | None) -> str | None:
    """The node a written object belongs to: a Node's name, a pod's spec.nodeName."""
    if not isinstance(obj, Mapping):
        return None
    if kind == NODE:
        meta = obj.get("metadata")
        return meta.get("name") if isinstance(meta, Mapping) else None
    if kind == POD:
        spec = obj.get("spec")
        return spec.get("nodeName") if isinstance(spec, Mapping) else None
    return None  # a Binding is never a plugin's to write


def allocation_writers(kind: str, caller: Caller, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None,
                       identities: Identities) -> str | None:
    """Why this write of hami-dcu's keys is refused, or None when it touches none of them or
    its writer may write them. `old` is None for a CREATE (and for a Binding)."""
    changed = changed_keys(annotations_of(new), annotations_of(old), watched_keys(kind))
    if not changed:
        return None
    allowed = _allowed_keys(kind, caller, identities)
    refused = [k for k in changed if k not in allowed]
    if refused:
        return (f"annotations {', '.join(refused)} are written only by hami-dcu (its scheduler extender and "
                f"device plugins): {caller.username or 'an anonymous user'} may not set, change or remove them")
    return None


def plugin_scope(kind: str, caller: Caller, new: Mapping[str, Any] | None, identities: Identities) -> str | None:
    """A device plugin writes only its own Node and pods bound to it (NodeRestriction's rule
    for kubelets); None for anyone else or a write within its node."""
    if caller.username not in identities.device_plugin:
        return None
    if caller.node is None:
        return (f"{caller.username} is a hami-dcu device plugin, but its token names no node "
                f"(userInfo.extra {NODE_NAME_EXTRA}): it may write nothing")
    target = node_of(kind, new)
    if target != caller.node:
        what = "a Binding" if kind == BINDING else (f"node {target}" if kind == NODE else
                                                     f"a pod bound to {target or 'no node'}")
        return (f"the hami-dcu device plugin of node {caller.node} may write only its own node and the pods "
                f"bound to it, not {what}")
    return None


def judge(kind: str, caller: Caller, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None,
          identities: Identities) -> str | None:
    """Both rules: the allocation's writers, and a plugin's reach."""
    return allocation_writers(kind, caller, new, old, identities) or plugin_scope(kind, caller, new, identities)

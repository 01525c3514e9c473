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

HAMi writes some of these keys too: `vgpu-node`, `vgpu-time`, `bind-phase` and `bind-time` on
the pods its scheduler places, and the node lock on the nodes it binds to. So those shared keys
are guarded only where they are ours: on DCU pods (a pod naming a DCU resource of either naming
set, or carrying either set's allocation) and on DCU nodes (a node carrying either set's
registration). Further identities (HAMi's scheduler and device plugins) may be named to write
the lock of a node that has DCUs and HAMi's devices both. A Binding shows nothing of its pod, so
the shared keys are guarded on every Binding (HAMi's Bindings carry no annotations).

The chart's ValidatingAdmissionPolicies (chart/templates/admission-policy.yaml) state the
same rule in CEL for the API server; the webhook applies this one to every review it is sent,
so the local cluster, which evaluates no CEL, enforces it too. e2e/test_realcluster_trust.py
checks the two agree on the real API server.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hami_dcu.common.protocol import keys

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"

# Both naming sets' keys (common/protocol/keys.py): whichever set a cluster speaks, nobody else may
# forge the other's either (a HAMi component of that set may run beside us).
POD_KEYS: frozenset[str] = keys.SCHEDULER_OWNED_POD_ANNOTATIONS
NODE_KEYS: frozenset[str] = frozenset({keys.NODE_LOCK}) | keys.DCU_NAMING.node_keys | keys.HCU_NAMING.node_keys
SCHEDULER_NODE_KEYS: frozenset[str] = frozenset({keys.NODE_LOCK})
PLUGIN_POD_KEYS: frozenset[str] = frozenset(
    {keys.POD_BIND_PHASE, keys.DCU_NAMING.pod_devices_to_allocate, keys.HCU_NAMING.pod_devices_to_allocate})
PLUGIN_NODE_KEYS: frozenset[str] = NODE_KEYS
VOLCANO_NODE_KEYS: frozenset[str] = frozenset({keys.NODE_LOCK, keys.HCU_NAMING.node_handshake})
# The keys HAMi's own components write on their pods and nodes, guarded only on DCU ones.
SHARED_POD_KEYS: frozenset[str] = frozenset({keys.POD_NODE, keys.POD_TIME, keys.POD_BIND_PHASE, keys.POD_BIND_TIME})
SHARED_NODE_KEYS: frozenset[str] = frozenset({keys.NODE_LOCK})
DCU_RESOURCES: frozenset[str] = frozenset(keys.DCU_NAMING.resources.all()) | frozenset(keys.HCU_NAMING.resources.all())
DCU_POD_KEYS: frozenset[str] = POD_KEYS - SHARED_POD_KEYS
DCU_NODE_KEYS: frozenset[str] = NODE_KEYS - SHARED_NODE_KEYS

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
    # Usernames and groups further allowed to write the node lock of a DCU node (HAMi's
    # scheduler and device plugins, on nodes that have HAMi's devices too).
    node_lock_users: frozenset[str] = frozenset()
    node_lock_groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Caller:
    username: str
    node: str | None = None  # the node its token is bound to, when exactly one is named
    groups: frozenset[str] = frozenset()

    @classmethod
    def from_user_info(cls, user_info: Mapping[str, Any] | None) -> Caller:
        """From an AdmissionReview's `request.userInfo` (absent or malformed: nobody)."""
        info = user_info if isinstance(user_info, Mapping) else {}
        extra = info.get("extra") if isinstance(info.get("extra"), Mapping) else {}
        nodes = extra.get(NODE_NAME_EXTRA) if isinstance(extra, Mapping) else None
        node = nodes[0] if isinstance(nodes, list) and len(nodes) == 1 and isinstance(nodes[0], str) else None
        username, groups = info.get("username"), info.get("groups")
        return cls(username=username if isinstance(username, str) else "", node=node or None,
                   groups=frozenset(g for g in groups if isinstance(g, str)) if isinstance(groups, list)
                   else frozenset())


def annotations_of(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = (obj or {}).get("metadata") if isinstance(obj, Mapping) else None
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def changed_keys(new: Mapping[str, Any], old: Mapping[str, Any], watched: Iterable[str]) -> list[str]:
    """The watched keys the write sets, changes or removes (sorted)."""
    return sorted(k for k in watched if (k in new) != (k in old) or (k in new and new[k] != old[k]))


def _names_a_dcu_resource(container: Any) -> bool:
    resources = container.get("resources") if isinstance(container, Mapping) else None
    if not isinstance(resources, Mapping):
        return False
    return any(isinstance(section, Mapping) and any(name in DCU_RESOURCES for name in section)
               for section in (resources.get("limits"), resources.get("requests")))


def is_dcu_pod(pod: Mapping[str, Any] | None) -> bool:
    """The pod names a DCU resource of either naming set (any container, init containers
    included) or carries either set's allocation: hami-dcu's, not HAMi's."""
    if not isinstance(pod, Mapping):
        return False
    if any(k in DCU_POD_KEYS for k in annotations_of(pod)):
        return True
    spec = pod.get("spec")
    if not isinstance(spec, Mapping):
        return False
    return any(isinstance(containers, list) and any(_names_a_dcu_resource(c) for c in containers)
               for containers in (spec.get("containers"), spec.get("initContainers")))


def is_dcu_node(node: Mapping[str, Any] | None) -> bool:
    """The node registers DCUs (either naming set's registration annotation)."""
    registers = {keys.DCU_NAMING.node_register, keys.HCU_NAMING.node_register}
    return any(k in registers for k in annotations_of(node))


def watched_keys(kind: str, new: Mapping[str, Any] | None = None, old: Mapping[str, Any] | None = None
                 ) -> frozenset[str]:
    """The keys guarded on this write: ours always, the ones HAMi shares only on DCU pods and
    nodes (before or after the write)."""
    if kind == NODE:
        return NODE_KEYS if is_dcu_node(new) or is_dcu_node(old) else DCU_NODE_KEYS
    if kind == BINDING or is_dcu_pod(new) or is_dcu_pod(old):
        return POD_KEYS
    return DCU_POD_KEYS


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
    if kind == NODE and (caller.username in identities.node_lock_users or caller.groups & identities.node_lock_groups):
        return SHARED_NODE_KEYS
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
    changed = changed_keys(annotations_of(new), annotations_of(old), watched_keys(kind, new, old))
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


# What a write may not change besides annotations (the API server keeps a pod's or node's status
# as it was on an update of the object itself).
_FIXED_FIELDS = (("spec",), ("metadata", "labels"), ("metadata", "finalizers"), ("metadata", "ownerReferences"))
_ABSENT = object()


def _field(obj: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = obj
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def changes_only(new: Mapping[str, Any], old: Mapping[str, Any], annotations: frozenset[str]) -> bool:
    """The write changes nothing but these annotations."""
    if any(_field(new, path) != _field(old, path) for path in _FIXED_FIELDS):
        return False
    before, after = annotations_of(old), annotations_of(new)
    others = (set(before) | set(after)) - annotations
    return all(before.get(k, _ABSENT) == after.get(k, _ABSENT) for k in others)


def plugin_fields(kind: str, caller: Caller, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None,
                  identities: Identities) -> str | None:
    """Within its node, a device plugin updates only its own annotations: on pods the
    allocation's progress, on its Node the registration, handshake and lock; never a spec (a
    pod's image), a label (node-restriction.kubernetes.io/ ones included) or a create. (The
    chart's policy also refuses every subresource, which an admission review states apart.)"""
    if caller.username not in identities.device_plugin or caller.node is None or kind == BINDING:
        return None
    if node_of(kind, new) != caller.node:
        return None  # plugin_scope's to refuse
    allowed = PLUGIN_NODE_KEYS if kind == NODE else PLUGIN_POD_KEYS
    if isinstance(new, Mapping) and isinstance(old, Mapping) and changes_only(new, old, allowed):
        return None
    where = "on its node" if kind == NODE else "on its pods"
    return (f"the hami-dcu device plugin of node {caller.node} may change {where} only the annotations "
            f"{', '.join(sorted(allowed))} (not the spec, labels or other annotations; no subresource, no create)")


def extender_fields(kind: str, caller: Caller, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None,
                    identities: Identities) -> str | None:
    """The extender faces the network: it changes a node's lock and nothing else of it (no
    taint, cordon or label), and writes pods only through their Binding (in Volcano mode also
    the allocation of a pod not bound yet, `_volcano_allocation`)."""
    if caller.username not in identities.scheduler or kind == BINDING:
        return None
    if kind == NODE and isinstance(new, Mapping) and isinstance(old, Mapping) and \
            changes_only(new, old, SCHEDULER_NODE_KEYS):
        return None
    if _volcano_allocation(kind, new, old, identities):
        return None
    meta = new.get("metadata") if isinstance(new, Mapping) else None
    name = meta.get("name", "") if isinstance(meta, Mapping) else ""
    what = f"{'update' if old is not None else 'create'} {'nodes' if kind == NODE else 'pods'} {name}"
    return (f"the hami-dcu scheduler extender may change on nodes only the annotation {keys.NODE_LOCK}, and on "
            f"pods only create their Binding (and, with card preemption, their Eviction), not {what} otherwise")


def _volcano_allocation(kind: str, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None,
                        identities: Identities) -> bool:
    """Volcano mode, upstream Volcano (issue 34): the extender's allocateFunc writes a pod's
    allocation, and its deallocateFunc removes it, before Volcano binds the pod: an update of
    an unbound pod that changes nothing but the pod allocation keys."""
    if kind != POD or not identities.volcano or not isinstance(new, Mapping) or not isinstance(old, Mapping):
        return False
    spec = new.get("spec")
    return not (isinstance(spec, Mapping) and spec.get("nodeName")) and changes_only(new, old, POD_KEYS)


def judge(kind: str, caller: Caller, new: Mapping[str, Any] | None, old: Mapping[str, Any] | None,
          identities: Identities) -> str | None:
    """Every rule: the allocation's writers, a plugin's reach, and what each identity may change."""
    return (allocation_writers(kind, caller, new, old, identities) or plugin_scope(kind, caller, new, identities)
            or plugin_fields(kind, caller, new, old, identities) or extender_fields(kind, caller, new, old, identities))

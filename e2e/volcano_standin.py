"""A protocol-true stand-in for the allocate path of Volcano's Hygon deviceshare.

    volcano = VolcanoStandIn.acting_as(admin_kube, "system:serviceaccount:volcano-system:volcano-scheduler")
    session = volcano.open_session(["node0"])      # handshake step, register, pods' shares
    volcano.allocate(session, pod, "node0")         # the six annotations (and the lock, if on)
    volcano.bind(pod, "node0")                      # a plain Binding
    volcano.release(pod)                            # strips a never-served allocation

It acts as Volcano's scheduler (the chart's `volcano.identity`) with a ServiceAccount token,
so the API server's admission judges its writes exactly as it would judge Volcano's. Its
decisions are volcano_fork.py's; here are the reads and writes, in the fork's order:

* session open, per node: GET the node; with both the register and the handshake, the
  handshake step (a strategic-merge patch of `Requesting_`/`Deleted_` in the fork's layout);
  the shares of the pods on the node;
* Allocate: GET the pod (already allocated: nothing to do); fit on the session's cards; with
  the lock on, take `hami.io/mutex.lock` = `<RFC3339>,<ns>,<name>` by a node update; the pod
  patch of the six keys (strategic merge); with the lock on, delete the lock by a node update,
  whoever holds it (the fork checks no owner), so it is gone before the Binding;
* Bind: a Binding with no annotations;
* Release: unless `bind-phase` is `success`, a null patch of the six keys; the lock untouched.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client as k8s_client

from e2e import volcano_fork as fork
from hami_dcu.common.io.kube import ConflictError, Kube, KubeError, NotFoundError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, format_rfc3339

log = logging.getLogger(__name__)
JSON = dict[str, Any]
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
DEFAULT_IDENTITY = "system:serviceaccount:volcano-system:volcano-scheduler"
UPDATE_TRIES = 6  # the fork's node update: one try and five retries, 100 ms apart


class VolcanoRefused(RuntimeError):
    """The fork's Allocate returned an error (no fit, or a live lock): nothing was written."""


@dataclass
class Session:
    """What one scheduling session knows: the usable nodes' cards, charged as it allocates."""

    now: datetime
    cards: dict[str, list[fork.ForkCard]] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)  # node -> why the fork does not use it
    stamped: dict[str, str] = field(default_factory=dict)  # node -> the handshake it left there


class VolcanoStandIn:
    def __init__(self, kube: Kube, policy: str = fork.BINPACK, node_lock: bool = False) -> None:
        self.kube = kube  # acting as Volcano's scheduler
        self.policy = policy
        self.node_lock = node_lock  # deviceshare.NodeLockEnable (off in the shipped configuration)

    @classmethod
    def acting_as(cls, admin: Kube, identity: str = DEFAULT_IDENTITY, **options: Any) -> VolcanoStandIn:
        """A stand-in authenticated as `identity` (system:serviceaccount:<ns>:<name>), with the
        rights Volcano's own chart gives its scheduler for this path, made through `admin`."""
        return cls(service_account_client(admin, identity), **options)

    # --- session ---------------------------------------------------------------------------

    def open_session(self, nodes: list[str], now: datetime | None = None) -> Session:
        session = Session(now or datetime.now(UTC))
        for node in nodes:
            why = self._open_node(session, node)
            if why:
                session.dropped[node] = why
                log.info("volcano stand-in: node %s not used: %s", node, why)
        return session

    def _open_node(self, session: Session, node: str) -> str | None:
        annotations = self.kube.get_node(node)["metadata"].get("annotations") or {}
        register, handshake = annotations.get(fork.NAMING.node_register), annotations.get(fork.NAMING.node_handshake)
        if register is None or handshake is None:
            return "no hcu register or handshake annotation"
        cards = fork.read_register(register)
        if not cards:
            return f"register {register[:60]!r} unreadable"
        step = fork.handshake_step(handshake, session.now)
        if step.write is not None:
            self._patch_node(node, {fork.NAMING.node_handshake: step.write})
        session.stamped[node] = step.write or handshake
        if not step.usable:
            return f"handshake {handshake!r}"
        pods = self.kube.list_pods(field_selector=f"spec.nodeName={node}").items
        fork.charge(cards, [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")])
        session.cards[node] = cards
        return None

    # --- allocate, bind, release ------------------------------------------------------------

    def allocate(self, session: Session, pod: JSON, node: str) -> list[list[ContainerDevice]] | None:
        """The fork's Allocate of `pod` on `node`; None when the pod was allocated already."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        current = self.kube.get_pod(namespace, name)
        if fork.NAMING.pod_devices_allocated in (current["metadata"].get("annotations") or {}):
            return None
        if node not in session.cards:
            raise VolcanoRefused(f"node {node} is not in the session: {session.dropped.get(node, 'not opened')}")
        entries = fork.fit(current, session.cards[node], self.policy)
        if entries is None:
            raise VolcanoRefused(f"pod {namespace}/{name} does not fit the HCU cards of node {node}")
        lock_value = f"{format_rfc3339(session.now)},{namespace},{name}"
        if self.node_lock:
            self._take_lock(node, lock_value, session.now)
        annotations = fork.allocation_annotations(node, entries, session.now)
        self.kube.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
                          body={"metadata": {"annotations": annotations}}, content_type=STRATEGIC_MERGE)
        if self.node_lock:
            self._release_lock(node)
        log.info("volcano stand-in: allocated %s/%s on node %s: %s", namespace, name, node,
                 annotations[fork.NAMING.pod_devices_allocated])
        return entries

    def bind(self, pod: JSON, node: str) -> None:
        meta = pod["metadata"]
        self.kube.create_binding(meta["namespace"], meta["name"], node, uid=meta.get("uid"))

    def release(self, pod: JSON) -> bool:
        """The fork's Release; True when it stripped the allocation."""
        meta = pod["metadata"]
        current = self.kube.get_pod(meta["namespace"], meta["name"])
        patch = fork.released(current["metadata"].get("annotations") or {})
        if patch is None:
            return False
        self.kube.request("PATCH", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                          body={"metadata": {"annotations": patch}}, content_type=STRATEGIC_MERGE)
        return True

    # --- the node -------------------------------------------------------------------------

    def _patch_node(self, node: str, annotations: dict[str, str]) -> None:
        self.kube.request("PATCH", f"/api/v1/nodes/{node}", body={"metadata": {"annotations": annotations}},
                          content_type=STRATEGIC_MERGE)

    def _take_lock(self, node: str, value: str, now: datetime) -> None:
        current = (self.kube.get_node(node)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
        blocked = fork.lock_blocks(current, now)
        if blocked:
            raise VolcanoRefused(f"node {node} locked ({current}): {blocked}")
        if current is not None:  # expired: deleted, then set, as two updates
            self._release_lock(node)

        def take(annotations: dict[str, str]) -> None:
            if keys.NODE_LOCK in annotations:
                raise VolcanoRefused(f"node {node} is locked")
            annotations[keys.NODE_LOCK] = value

        self._update_node(node, take)

    def _release_lock(self, node: str) -> None:
        """Whoever holds it: the fork checks no owner. No lock, no write."""
        if keys.NODE_LOCK in (self.kube.get_node(node)["metadata"].get("annotations") or {}):
            self._update_node(node, lambda annotations: annotations.pop(keys.NODE_LOCK, None))

    def _update_node(self, node: str, change: Any) -> None:
        """The fork's updateNodeAnnotations: GET, change, PUT the whole Node; on a conflict,
        read again and retry, 100 ms apart."""
        for attempt in range(UPDATE_TRIES):
            obj = self.kube.get_node(node)
            obj["metadata"].setdefault("annotations", {})
            change(obj["metadata"]["annotations"])
            try:
                self.kube.request("PUT", f"/api/v1/nodes/{node}", body=obj)
                return
            except ConflictError:
                if attempt == UPDATE_TRIES - 1:
                    raise
                time.sleep(0.1)


# --- identity --------------------------------------------------------------------------------

# What the path above needs, as Volcano's chart grants its scheduler (a subset).
RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch", "update"]},
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch", "update"]},
]


def service_account_client(admin: Kube, identity: str) -> Kube:
    """A client authenticated as ServiceAccount `identity` with a TokenRequest token; the
    namespace, the account and its rights are made through `admin` when missing."""
    parts = identity.split(":")
    if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"]:
        raise ValueError(f"{identity!r}: expected system:serviceaccount:<namespace>:<name>")
    namespace, account = parts[2], parts[3]
    role = f"hami-e2e-{namespace}-{account}"
    _create(admin, "/api/v1/namespaces", {"metadata": {"name": namespace}})
    _create(admin, f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": account}})
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    _create(admin, f"{rbac}/clusterroles", {"metadata": {"name": role}, "rules": RULES})
    _create(admin, f"{rbac}/clusterrolebindings", {
        "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})
    token = _token(admin, namespace, account)
    configuration = copy.deepcopy(admin.api_client.configuration)
    configuration.cert_file = configuration.key_file = None
    configuration.username = configuration.password = None
    configuration.api_key = {"authorization": f"Bearer {token}"}
    configuration.api_key_prefix = {}
    kube = Kube(k8s_client.ApiClient(configuration), timeout=admin.timeout)
    _wait_authorized(kube)
    return kube


def _create(admin: Kube, path: str, body: JSON) -> None:
    try:
        admin.request("POST", path, body=body)
    except KubeError as exc:
        if exc.status != 409:
            raise


def _token(admin: Kube, namespace: str, account: str) -> str:
    for _ in range(50):  # the ServiceAccount may not be visible to the token endpoint at once
        try:
            review = admin.request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                                   body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                         "spec": {"expirationSeconds": 3600}})
            return str(review["status"]["token"])
        except NotFoundError:
            time.sleep(0.2)
    raise RuntimeError(f"no token for ServiceAccount {namespace}/{account}")


def _wait_authorized(kube: Kube, timeout: float = 30.0) -> None:
    """RBAC reaches the authorizer through a watch: wait until the new binding is in force."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            kube.list_nodes()
            return
        except KubeError as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)

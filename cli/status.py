"""`hami-dcu status` (also `kubectl hami-dcu status`): what is used where, from the API alone.

Lists the nodes and the live pods with the caller's kubeconfig (kubectl's rules), so it runs
from a laptop as well as in the cluster; nothing here talks to the extender or a node. In DRA
mode it also lists our driver's ResourceSlices and the ResourceClaims; for DCU pods that wait
for a node, the Warning events about them. The picture is computed by `cardusage`,
`drausage` and `pending` and printed by `statusview`; this module only fetches and prints.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from hami_dcu.cli.cardusage import cluster_usage, naming_hint
from hami_dcu.cli.drausage import DraUsage, dra_usage
from hami_dcu.cli.errors import say
from hami_dcu.cli.pending import PREEMPTION_REASON, held_jobs, pending_pods
from hami_dcu.cli.statusview import FORMATS, render
from hami_dcu.common.io.kube import Kube, KubeError, NotFoundError, user_agent
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.dra import names as dra_names

PROG = "hami-dcu status"
JSON = dict[str, Any]
# Finished pods hold nothing; leaving them out keeps the listing small on busy clusters.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
POD_WARNINGS = "involvedObject.kind=Pod,type=Warning"
POD_PREEMPTIONS = f"involvedObject.kind=Pod,reason={PREEMPTION_REASON}"
FORBIDDEN = 403


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Per node and per card: model, health, slots, memory and cores allocated out of the total, the pods "
        "holding each card and their share (in DRA mode: the claims on each card and their share); per node "
        "the device plugin's last report and the node lock; one summary line; then the DCU pods waiting for a "
        "node, what they ask for and the latest reason they were given (waiting for Kueue's admission rather "
        "than a card, or for pods the extender evicted for them), and the DCU Jobs Kueue holds suspended. Reads "
        "Nodes, Pods, Events, Jobs and, in "
        "DRA mode, ResourceSlices, ResourceClaims and DeviceTaintRules through the API server; in DRA mode a card's "
        "TAINTS say why it is out of service (unhealthy, or an operator's DeviceTaintRule).")
    parser.add_argument("--context", help="kubeconfig context to use, as kubectl's --context (default: current)")
    parser.add_argument("--node", metavar="NAME", help="show this node only (default: every node with DCUs)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", metavar="NS",
                       help="list only the pods and claims of this namespace (card totals still count every pod)")
    scope.add_argument("-A", "--all-namespaces", action="store_true",
                       help="list the pods and claims of every namespace (the default)")
    parser.add_argument("-o", "--output", choices=FORMATS, default="table",
                        help="table (default), wide (one row per share, card index and NUMA, node problems, "
                        "whole reasons), json or yaml")


def run(args: argparse.Namespace) -> int:
    kube = Kube.from_kubeconfig(args.kubeconfig, context=args.context, agent=user_agent("status"))
    namespace = None if args.all_namespaces else args.namespace
    nodes = _read_nodes(kube, args.node, namespace)
    if nodes is None:
        return 1
    listed = _read_the_rest(kube, namespace)
    if listed is None:
        return 1
    now = datetime.now(UTC)
    naming = keys.naming_by_name(args.naming)
    usage = cluster_usage(nodes, listed.pods, now, naming, node_name=args.node, namespace=namespace)
    dra: DraUsage | None = dra_usage(listed.slices, listed.claims, node_name=args.node, namespace=namespace,
                                     rules=listed.rules) if listed.slices else None
    hint = None if dra else naming_hint(nodes, listed.pods, naming)
    if hint:
        say(PROG, hint)
        return 1
    if args.node and not usage.nodes and not (dra and dra.cards):
        say(PROG, f"node {args.node} has no DCUs registered (no {naming.node_register} and no ResourceSlice of "
                  f"{dra_names.DRIVER})")
        return 1
    pending = [] if args.node else [
        *pending_pods(listed.waiting, listed.events, listed.claims, now, naming.resources, namespace),
        *held_jobs(listed.jobs, now, naming.resources, namespace)]
    sys.stdout.write(render(usage, args.output, pending=pending, dra=dra, naming=naming))
    return 0


def _read_nodes(kube: Kube, node: str | None, namespace: str | None) -> list[JSON] | None:
    """The node asked for, or every node; None once the reason it cannot be read is said."""
    try:
        if namespace is not None and not _namespace_exists(kube, namespace):
            say(PROG, f"namespace {namespace} not found")
            return None
        return [kube.get_node(node)] if node else kube.list_nodes().items
    except NotFoundError:
        say(PROG, f"node {node} not found")
        return None
    except KubeError as exc:
        say(PROG, f"cannot read nodes and pods: {exc}")
        return None


@dataclass(frozen=True)
class _Listed:
    pods: list[JSON]
    slices: list[JSON]
    rules: list[JSON]
    waiting: list[JSON]  # the pods not bound to a node yet, of the namespace asked for
    claims: list[JSON]
    events: list[JSON]
    jobs: list[JSON]  # Jobs, for the ones Kueue holds suspended


def _read_the_rest(kube: Kube, namespace: str | None) -> _Listed | None:
    """The pods and, only where they matter, the DRA objects and events; None once the reason
    they cannot be read is said."""
    try:
        # Every live pod, even with --node: a pod between its allocation and its Binding
        # names its node only in an annotation, which no field selector reaches.
        pods = kube.list_pods(field_selector=LIVE_PODS).items
        slices = _our_slices(kube)
        rules = _taint_rules(kube) if slices else []
        waiting = [p for p in pods if _waits(p, namespace)]
        claims = _claims(kube) if slices or any((p.get("spec") or {}).get("resourceClaims") for p in waiting) else []
        events = _pod_warnings(kube, namespace) if waiting else []
        jobs = _jobs(kube, namespace)
    except KubeError as exc:
        say(PROG, f"cannot read pods, claims and events: {exc}")
        return None
    return _Listed(pods, slices, rules, waiting, claims, events, jobs)


def _namespace_exists(kube: Kube, namespace: str) -> bool:
    """False only when the API server says it is not there: a user allowed to list pods but
    not to read namespaces still gets the listing."""
    try:
        kube.request("GET", f"/api/v1/namespaces/{quote(namespace, safe='')}")
    except NotFoundError:
        return False
    except KubeError as exc:
        if exc.status != FORBIDDEN:
            raise
    return True


def _waits(pod: JSON, namespace: str | None) -> bool:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return ((pod.get("status") or {}).get("phase", "Pending") == "Pending" and not spec.get("nodeName")
            and (namespace is None or meta.get("namespace") == namespace))


def _our_slices(kube: Kube) -> list[JSON]:
    """Our driver's ResourceSlices; none where resource.k8s.io/v1 is not served (device-plugin
    clusters, Kubernetes before 1.34) or the caller may not read them."""
    listed = _items_if_readable(kube, f"{dra_names.RESOURCE_API}/resourceslices")
    return [s for s in listed if (s.get("spec") or {}).get("driver") == dra_names.DRIVER]


def _items_if_readable(kube: Kube, path: str) -> list[JSON]:
    """The list at `path`; none where the API is not served or the caller may not list it."""
    try:
        return list(kube.request("GET", path).get("items") or [])
    except NotFoundError:
        return []
    except KubeError as exc:
        if exc.status == FORBIDDEN:
            return []
        raise


def _taint_rules(kube: Kube) -> list[JSON]:
    """The DeviceTaintRules (resource.k8s.io/v1 from Kubernetes 1.37; v1beta2 in 1.36 where
    its API is turned on); none where neither is served or the caller may not list them."""
    for version in ("v1", "v1beta2"):
        try:
            return list(kube.request("GET", f"/apis/resource.k8s.io/{version}/devicetaintrules").get("items") or [])
        except NotFoundError:
            continue
        except KubeError as exc:
            if exc.status == FORBIDDEN:
                return []
            raise
    return []


def _claims(kube: Kube) -> list[JSON]:
    # Every namespace: a card's totals count every claim on it, whoever asks.
    try:
        return list(kube.request("GET", f"{dra_names.RESOURCE_API}/resourceclaims").get("items") or [])
    except NotFoundError:
        return []


def _pod_warnings(kube: Kube, namespace: str | None) -> list[JSON]:
    """The pods' Warning events, and the extender's (Normal) DCUPreemption ones."""
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/events" if namespace else "/api/v1/events"
    try:
        return [event for selector in (POD_WARNINGS, POD_PREEMPTIONS)
                for event in kube.request("GET", path, query={"fieldSelector": selector}).get("items") or []]
    except KubeError as exc:
        if exc.status == FORBIDDEN:
            return []  # the listing without reasons is still worth showing
        raise


def _jobs(kube: Kube, namespace: str | None) -> list[JSON]:
    """Jobs (for the ones Kueue holds suspended); none where the caller may not list them."""
    path = f"/apis/batch/v1/namespaces/{quote(namespace, safe='')}/jobs" if namespace else "/apis/batch/v1/jobs"
    return _items_if_readable(kube, path)

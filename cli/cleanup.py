"""`hami-dcu cleanup`: remove what hami-dcu created outside the Helm release.

`helm uninstall` deletes the objects the chart declares. The certs job's Secrets (the serving
certificate and the CA) are created at run time, so the chart's post-delete hook runs
`hami-dcu cleanup --namespace NS --secret ... --secret ...`. Node annotations are written by
the device plugin and the scheduler; they are HAMi's keys, which a HAMi installation beside
us shares, so removing them is a separate, explicit `--node-annotations` for an operator.
Host directories (`/usr/local/vgpu/dcu`, `/etc/vdev`, the plugin's state dir) are on the
nodes and are left to the node's administrator (README, Uninstall).
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Iterable
from typing import Any

from hami_dcu.cli.errors import EXIT_USAGE, say
from hami_dcu.common.io.kube import Kube, NotFoundError, user_agent
from hami_dcu.common.protocol import keys

log = logging.getLogger(__name__)

def node_annotations(naming: keys.Naming) -> tuple[str, ...]:
    """Every node annotation a hami-dcu component writes, in the naming set it speaks
    (the other set's belong to whatever speaks it)."""
    return (naming.node_register, naming.node_handshake, keys.NODE_LOCK)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = ("Remove what hami-dcu created outside the Helm release: the certificate Secrets "
                          "(the chart's post-delete hook does this) and, with --node-annotations, the hami.io "
                          "annotations on every node.")
    parser.add_argument("--namespace", help="namespace of the Secrets (required with --secret)")
    parser.add_argument("--secret", action="append", default=[], metavar="NAME",
                        help="a Secret to delete (repeatable; a missing one is fine)")
    parser.add_argument("--node-annotations", action="store_true",
                        help="also remove the registration, handshake and lock annotations of --naming's set from "
                        "every node (HAMi uses the same "
                        "keys: not while HAMi runs in the cluster)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")


def node_annotations_to_remove(node: dict[str, Any], naming: keys.Naming) -> list[str]:
    """The hami-dcu annotation keys of `naming` present on `node`, in a stable order."""
    present = (node.get("metadata") or {}).get("annotations") or {}
    return [key for key in node_annotations(naming) if key in present]


def _delete_secrets(kube: Kube, namespace: str, names: Iterable[str], dry_run: bool) -> int:
    removed = 0
    for name in names:
        path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        try:
            kube.request("GET", path)
            if not dry_run:
                kube.request("DELETE", path)
        except NotFoundError:
            print(f"secret {namespace}/{name}: not there")
            continue
        removed += 1
        print(f"secret {namespace}/{name}: {'would be deleted' if dry_run else 'deleted'}")
    return removed


def _clear_nodes(kube: Kube, naming: keys.Naming, dry_run: bool) -> int:
    cleared = 0
    for node in kube.list_nodes().items:
        found = node_annotations_to_remove(node, naming)
        if not found:
            continue
        name = node["metadata"]["name"]
        if not dry_run:
            kube.patch_node_metadata(name, annotations=dict.fromkeys(found))
        cleared += 1
        print(f"node {name}: {'would remove' if dry_run else 'removed'} {', '.join(found)}")
    return cleared


def run(args: argparse.Namespace) -> int:
    if args.secret and not args.namespace:
        say("hami-dcu cleanup", "--secret needs --namespace")
        return EXIT_USAGE
    kube = Kube.from_kubeconfig(args.kubeconfig, agent=user_agent("cleanup"))
    _delete_secrets(kube, args.namespace or "", args.secret, args.dry_run)
    if args.node_annotations:
        _clear_nodes(kube, keys.naming_by_name(args.naming), args.dry_run)
    return 0

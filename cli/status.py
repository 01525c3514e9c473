"""`hami-dcu status` (also `kubectl hami-dcu status`): what is used where, from the API alone.

Lists the nodes and the live pods with the caller's kubeconfig, so it runs from a laptop as
well as in the cluster; nothing here talks to the extender or a node. The picture is
computed by `cardusage` and printed by `statusview`; this module only fetches and prints.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from hami_dcu.cli.cardusage import cluster_usage
from hami_dcu.cli.errors import say
from hami_dcu.cli.statusview import FORMATS, render
from hami_dcu.common.kube import Kube, KubeError, NotFoundError

PROG = "hami-dcu status"
# Finished pods hold nothing; leaving them out keeps the listing small on busy clusters.
LIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Per node and per card: model, health, slots, memory and cores allocated out of the total, the pods "
        "holding each card and their share; per node the device plugin's last report and the node lock; one "
        "summary line. Reads only Node and Pod objects through the API server.")
    parser.add_argument("--context", help="kubeconfig context to use, as kubectl's --context (default: current)")
    parser.add_argument("--node", metavar="NAME", help="show this node only (default: every node with DCUs)")
    parser.add_argument("-n", "--namespace", metavar="NS",
                        help="list only the pods of this namespace (card totals still count every pod)")
    parser.add_argument("-o", "--output", choices=FORMATS, default="table",
                        help="table (default), wide (one row per share, card index and NUMA, node problems), "
                        "json or yaml")


def run(args: argparse.Namespace) -> int:
    kube = Kube.from_kubeconfig(args.kubeconfig, context=args.context)
    try:
        nodes = [kube.get_node(args.node)] if args.node else kube.list_nodes().items
        # Every live pod, even with --node: a pod between its allocation and its Binding
        # names its node only in an annotation, which no field selector reaches.
        pods = kube.list_pods(field_selector=LIVE_PODS).items
    except NotFoundError:
        say(PROG, f"node {args.node} not found")
        return 1
    except KubeError as exc:
        say(PROG, f"cannot read nodes and pods: {exc}")
        return 1
    usage = cluster_usage(nodes, pods, datetime.now(UTC), node_name=args.node, namespace=args.namespace)
    if args.node and not usage.nodes:
        say(PROG, f"node {args.node} has no DCUs registered (no hami.io/node-dcu-register)")
        return 1
    sys.stdout.write(render(usage, args.output))
    return 0

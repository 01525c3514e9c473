"""The local API server in its own process, preloaded with a large cluster (clusterdata.py).

    python bench/preloaded_apiserver.py KUBECONFIG --nodes 5000 --pods-per-node 8

Objects go straight into the store (no HTTP, no admission): loading 40,000 pods takes seconds,
not minutes. The kubeconfig is written once everything is in place, so its appearance means
"ready". Runs until terminated.

As in a cluster, every node's device plugin reports every 30 s (`hami.io/node-handshake-dcu`):
a thread writes that annotation for nodes/30 nodes a second, spread evenly, so the extender
processes that stream of node updates while it is measured, and nodes stay usable.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from clusterdata import node_name, node_object, running_pods

from hami_dcu.cli.localcluster.apiserver import LocalApiServer
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import encode_reported

DCU = keys.DCU_NAMING  # the naming set this benchmark speaks

REPORT_INTERVAL = 30.0  # seconds between two reports of one node's plugin


def report(server: LocalApiServer, nodes: int, stopped: threading.Event) -> None:
    """The handshakes of `nodes` plugins, each every REPORT_INTERVAL seconds, in batches of 10."""
    batch = 10
    pause = REPORT_INTERVAL / max(1, nodes / batch)
    i = 0
    while not stopped.wait(pause):
        stamp = encode_reported(datetime.now(UTC))

        def stamped(node: dict, value: str = stamp) -> dict:
            node["metadata"].setdefault("annotations", {})[DCU.node_handshake] = value
            return node

        for _ in range(batch):
            server.store.update("nodes", "", node_name(i % nodes), stamped, copy=False)
            i += 1


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("kubeconfig")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods-per-node", type=int, default=8)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    server = LocalApiServer(kubeconfig_path=args.kubeconfig + ".tmp", history=200_000)
    store = server.store
    rng = random.Random(args.seed)
    store.create("namespaces", "", {"metadata": {"name": "team-a"}}, copy=False)
    store.create("namespaces", "", {"metadata": {"name": "team-b"}}, copy=False)
    now = "2026-01-01T00:00:00Z"
    for i in range(args.nodes):
        name = node_name(i)
        store.create("nodes", "", node_object(name), copy=False)
        for pod in running_pods(name, args.pods_per_node, rng, now):
            store.create("pods", "team-a", pod, copy=False)
    server.start()
    os.replace(args.kubeconfig + ".tmp", args.kubeconfig)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    threading.Thread(target=report, args=(server, args.nodes, stopped), daemon=True).start()
    while not stopped.wait(1.0):  # the main thread must wake to run the signal handler
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`hami-dcu demo`: the whole system on this machine with mock DCUs, no cluster needed.

Starts a LocalCluster (default 2 nodes x 2 K100_AI), submits example pods, prints where
each went (node, card, memory, cores, CU mask), why the ones that did not fit are pending
or were refused, and the vdev file of one shared pod; then shuts down and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from hami_dcu.common import keys
from hami_dcu.common.codec import decode_pod_devices
from hami_dcu.common.kube import KubeError
from hami_dcu.e2e.cluster import LocalCluster
from hami_dcu.e2e.scenarios import Ctr, default_cards, events_for, pod_manifest

EXAMPLES: list[tuple[str, list[Ctr], dict[str, str]]] = [
    ("train-15pct", [Ctr("main", 1, 2000, 15)], {}),
    ("infer-small", [Ctr("main", 1, 1024, 10)], {}),
    ("infer-medium", [Ctr("main", 1, 8192, 30)], {}),
    ("two-workers", [Ctr("worker", 1, 4096, 20), Ctr("logger"), Ctr("helper", 1, 2048, 10)], {}),
    ("whole-card", [Ctr("main", 1)], {}),
    ("spread-me", [Ctr("main", 1, 1000, 5)], {keys.NODE_SCHEDULER_POLICY: "spread"}),
    ("too-big", [Ctr("main", 1, 70000, 10)], {}),
    ("init-share", [Ctr("setup", 1, 1000, 10, init=True), Ctr("main", 1)], {}),
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=2, help="number of nodes (default %(default)s)")
    parser.add_argument("--cards", type=int, default=2, help="mock K100_AI cards per node (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the pods")


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _mask_of(cluster: LocalCluster, pod: dict[str, Any], container: str) -> str:
    node = pod["spec"].get("nodeName")
    prefix = f"{pod['metadata']['uid']}_{container}_"
    for dirname in cluster.vdev_files(node) if node else {}:
        if dirname.startswith(prefix):
            _, _, _, _, _, low, high = dirname.split("_")
            return f"0x{high}{low}".replace("0x0000000000000000", "0x")
    return "whole card"


def run(args: argparse.Namespace) -> int:
    logging.getLogger().setLevel(logging.WARNING)  # the table is the output; components log warnings only
    nodes = {f"node{i}": default_cards(f"node{i}", args.cards) for i in range(args.nodes)}
    print(f"starting a local cluster: {args.nodes} nodes x {args.cards} mock K100_AI cards (65520 MiB, 120 CUs)")
    with LocalCluster(nodes, namespace="demo") as cluster:
        refused: dict[str, str] = {}
        for name, containers, annotations in EXAMPLES:
            try:
                cluster.kube.create_pod(cluster.namespace, pod_manifest(name, containers, annotations))
            except KubeError as exc:
                refused[name] = exc.message
        deadline = time.monotonic() + args.timeout
        expected_pending = {"too-big"}
        while time.monotonic() < deadline:
            pods = {p["metadata"]["name"]: p for p in cluster.kube.list_pods(namespace=cluster.namespace).items}
            settled = [n for n, p in pods.items() if p["status"].get("phase") in ("Running", "Failed")]
            if len(settled) >= len(pods) - len(expected_pending & pods.keys()):
                break
            time.sleep(0.2)
        time.sleep(0.5)  # let the pending pod collect its FailedScheduling event
        pods = {p["metadata"]["name"]: p for p in cluster.kube.list_pods(namespace=cluster.namespace).items}

        widths = [17, 9, 8, 13, 10, 6, 34]
        print()
        print(_row(["POD", "CONTAINER", "NODE", "CARD", "MEMORY", "CORES", "CU MASK (hex, 120 CUs)"], widths))
        for name, _containers, _ in EXAMPLES:
            pod = pods.get(name)
            if pod is None:
                continue
            status = pod["status"]
            value = (pod["metadata"].get("annotations") or {}).get(keys.POD_DEVICES_ALLOCATED)
            if status.get("phase") != "Running" or not value:
                print(_row([name, "-", "-", status.get("phase", "?"), "", "", ""], widths))
                continue
            all_containers = pod["spec"].get("initContainers", []) + pod["spec"]["containers"]
            for container, devices in zip(all_containers, decode_pod_devices(value), strict=False):
                for device in devices:
                    print(
                        _row(
                            [
                                name,
                                container["name"],
                                pod["spec"]["nodeName"],
                                device.uuid,
                                f"{device.usedmem} MiB",
                                f"{device.usedcores}%",
                                _mask_of(cluster, pod, container["name"]),
                            ],
                            widths,
                        )
                    )
        print()
        for name, pod in pods.items():
            if pod["status"].get("phase") == "Pending":
                reasons = [
                    e["message"]
                    for e in events_for(cluster.kube, cluster.namespace, name)
                    if e.get("reason") in ("FailedScheduling", "FilteringFailed")
                ]
                print(f"{name} is Pending: {reasons[-1] if reasons else 'waiting for the scheduler'}")
        for name, message in refused.items():
            print(f"{name} was refused at admission: {message}")
        shown = pods.get("train-15pct")
        if shown and shown["spec"].get("nodeName"):
            node = shown["spec"]["nodeName"]
            for dirname, content in cluster.vdev_files(node).items():
                if dirname.startswith(shown["metadata"]["uid"]):
                    print(
                        f"\nvdev0.conf of pod train-15pct on {node} ({cluster.nodes[node].paths.vdev_dir}/{dirname}):"
                    )
                    print(content, end="")
    print("\nlocal cluster stopped")
    return 0

"""`hami-dcu demo`: the whole system on this machine with mock DCUs, no cluster needed.

Starts a LocalCluster (default 2 nodes x 2 K100_AI), submits example pods, prints where
each went (node, card, memory, cores, CU mask), why the ones that did not fit are pending
or were refused, and the vdev file of one shared pod; then shuts down and exits 0 (1 when
the pods did not settle in time). A pod that cannot be placed (too few nodes or cards for
all the examples) is settled too: it is named as staying Pending, and the demo does not
wait for it. With `--keep` the cluster keeps running, with a kubeconfig
for kubectl and `hami-dcu status`, until Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from hami_dcu.cli.localcluster.cluster import LocalCluster
from hami_dcu.cli.localcluster.pods import Ctr, default_cards, events_for, pod_manifest
from hami_dcu.common.io.cannotstart import CannotStart
from hami_dcu.common.io.kube import KubeError
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import decode_pod_devices

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


PROGRESS_EVERY = 2.0  # seconds between "waiting" lines


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range ({low}-{high})")
        return value

    return parse


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"{text} is out of range (more than 0, at most 3600 seconds)")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=bounded_int(1, 16), default=2,
                        help="number of nodes, 1-16 (default %(default)s)")
    parser.add_argument("--cards", type=bounded_int(1, 8), default=2,
                        help="mock K100_AI cards per node, 1-8 (default %(default)s)")
    parser.add_argument("--timeout", type=positive_seconds, default=60.0,
                        help="seconds to wait for the pods to settle; exit 1 when they do not (default %(default)s)")
    parser.add_argument("--keep", action="store_true",
                        help="leave the cluster running with a kubeconfig for kubectl and `hami-dcu status` "
                        "until Ctrl-C or SIGTERM")


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
    if args.kubeconfig:
        raise CannotStart(f"--kubeconfig {args.kubeconfig}: the demo reads no kubeconfig, it runs a local cluster of "
                          "its own (with --keep it prints that cluster's kubeconfig for kubectl and hami-dcu status)")
    logging.getLogger().setLevel(logging.WARNING)  # the table is the output; components log warnings only
    nodes = {f"node{i}": default_cards(f"node{i}", args.cards) for i in range(args.nodes)}
    print(f"starting a local cluster: {args.nodes} nodes x {args.cards} mock K100_AI cards (65520 MiB, 120 CUs)",
          flush=True)
    naming = keys.naming_by_name(args.naming)
    with LocalCluster(nodes, namespace="demo", naming=naming) as cluster:
        refused: dict[str, str] = {}
        for name, containers, annotations in EXAMPLES:
            written = [replace(c, names=naming.resources) for c in containers]  # in the cluster's own names
            try:
                cluster.kube.create_pod(cluster.namespace, pod_manifest(name, written, annotations))
            except KubeError as exc:
                refused[name] = exc.message
        unsettled, unplaced = _wait_for_pods(cluster, args.timeout, expected_pending={"too-big"})
        for name in sorted({"too-big"} | unplaced):
            _wait_for_reasons(cluster, name)
        _print_placements(cluster, refused)
        if unplaced:
            print(f"\n{', '.join(sorted(unplaced))} cannot be placed on {_count(args.nodes, 'node')} x "
                  f"{_count(args.cards, 'card')} (the reasons above): they stay Pending; more --nodes or --cards "
                  "make room", flush=True)
        if unsettled:
            print(f"\ntimed out after {args.timeout:g}s: still waiting for {', '.join(sorted(unsettled))}",
                  flush=True)
        if args.keep:
            _keep_running(cluster)
    print("\nlocal cluster stopped")
    return 1 if unsettled else 0


# A pod the scheduler cannot place is settled once it has failed this many times more, and
# at least QUIET_SECONDS passed, since every other pod settled (ran, failed, or could not be
# placed either): nothing in the demo ends, so no card frees up after that. Not one failure:
# the extender's cache follows the API server by a watch, and a failure right after the last
# bind may predate it; not at once: a failure in the first second can be the extender still
# filling its cache, which the scheduler loop's retries (backing off up to 2 s) get past.
FINAL_FAILURES = 2
QUIET_SECONDS = 3.0
SETTLED_PHASES = ("Running", "Failed")


def _wait_for_pods(cluster: LocalCluster, timeout: float, expected_pending: set[str]) -> tuple[set[str], set[str]]:
    """Wait until every pod but the expected Pending ones runs, failed or cannot be placed;
    print progress. Returns the pods that had not settled when time ran out, and those that
    cannot be placed."""
    assert cluster.scheduler_loop is not None
    stats = cluster.scheduler_loop.stats

    def failures(name: str) -> int:
        key = f"{cluster.namespace}/{name}"
        return stats.filter_failures.get(key, 0) + stats.bind_failures.get(key, 0)

    deadline = time.monotonic() + timeout
    next_progress = time.monotonic() + PROGRESS_EVERY
    quiet: dict[str, int] = {}  # failures of each unplaced pod when the others settled
    quiet_since: float | None = None
    while True:
        pods = {p["metadata"]["name"]: p for p in cluster.kube.list_pods(namespace=cluster.namespace).items}
        unplaced, moving = _unplaced_and_moving(pods, expected_pending, failures)
        now = time.monotonic()
        if moving or set(quiet) != unplaced or quiet_since is None:
            quiet, quiet_since = {n: failures(n) for n in unplaced}, None if moving else now
        elif now - quiet_since >= QUIET_SECONDS and all(failures(n) >= quiet[n] + FINAL_FAILURES for n in unplaced):
            return set(), unplaced
        ended = _settled_or_out_of_time(moving, unplaced, now >= deadline)
        if ended is not None:
            return ended
        if now >= next_progress:
            waiting = moving | unplaced
            print(f"waiting for {len(waiting)} of {len(pods)} pods: {', '.join(sorted(waiting))}", flush=True)
            next_progress = now + PROGRESS_EVERY
        time.sleep(0.2)


def _unplaced_and_moving(pods: dict[str, dict[str, Any]], expected_pending: set[str],
                         failures: Callable[[str], int]) -> tuple[set[str], set[str]]:
    """The pods the scheduler failed to place (unbound, with failures), and those not settled yet."""
    unplaced = {n for n, p in pods.items()
                if n not in expected_pending and _unbound(p) and failures(n) > 0}
    moving = {n for n, p in pods.items() if p["status"].get("phase") not in SETTLED_PHASES}
    moving -= expected_pending | unplaced
    return unplaced, moving


def _settled_or_out_of_time(moving: set[str], unplaced: set[str],
                            out_of_time: bool) -> tuple[set[str], set[str]] | None:
    """_wait_for_pods' answer once every pod settled or time ran out; None while it waits on."""
    if not moving and not unplaced:
        return set(), set()
    if out_of_time:
        return moving | unplaced, set()
    return None


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _unbound(pod: dict[str, Any]) -> bool:
    return pod["status"].get("phase", "Pending") == "Pending" and not pod["spec"].get("nodeName")


def _print_placements(cluster: LocalCluster, refused: dict[str, str]) -> None:
    pods = {p["metadata"]["name"]: p for p in cluster.kube.list_pods(namespace=cluster.namespace).items}
    widths = [17, 9, 8, 13, 10, 6, 34]
    print()
    print(_row(["POD", "CONTAINER", "NODE", "CARD", "MEMORY", "CORES", "CU MASK (hex, 120 CUs)"], widths))
    for name, _containers, _ in EXAMPLES:
        pod = pods.get(name)
        if pod is not None:
            _print_pod_rows(cluster, name, pod, widths)
    print()
    for name, pod in pods.items():
        if pod["status"].get("phase") == "Pending":
            _print_why_pending(cluster, name)
    for name, message in refused.items():
        print(f"{name} was refused at admission: {message}")
    _print_example_vdev(cluster, pods.get("train-15pct"))
    print(flush=True)


def _print_pod_rows(cluster: LocalCluster, name: str, pod: dict[str, Any], widths: list[int]) -> None:
    """One row per card a running pod's container holds; one row of its phase otherwise."""
    status = pod["status"]
    value = (pod["metadata"].get("annotations") or {}).get(cluster.naming.pod_devices_allocated)
    if status.get("phase") != "Running" or not value:
        print(_row([name, "-", "-", status.get("phase", "?"), "", "", ""], widths))
        return
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


def _print_why_pending(cluster: LocalCluster, name: str) -> None:
    events = events_for(cluster.kube, cluster.namespace, name)
    # kube-scheduler's FailedScheduling counts nodes per reason; the extender's own
    # FilteringFailed adds one node's card-by-card figures: show both.
    for reason in ("FailedScheduling", "FilteringFailed"):
        messages = [e["message"] for e in events if e.get("reason") == reason]
        if messages:
            print(f"{name} is Pending ({reason}): {messages[-1]}")
    if not events:
        print(f"{name} is Pending: waiting for the scheduler")


def _print_example_vdev(cluster: LocalCluster, shown: dict[str, Any] | None) -> None:
    """The vdev0.conf the device plugin wrote for the demo's train-15pct pod, once it is placed."""
    if shown and shown["spec"].get("nodeName"):
        node = shown["spec"]["nodeName"]
        for dirname, content in cluster.vdev_files(node).items():
            if dirname.startswith(shown["metadata"]["uid"]):
                print(f"\nvdev0.conf of pod train-15pct on {node} ({cluster.nodes[node].paths.vdev_dir}/{dirname}):")
                print(content, end="")


def _keep_running(cluster: LocalCluster) -> None:
    """Serve until Ctrl-C or SIGTERM: both are the normal way to stop a kept demo."""
    assert cluster.api is not None
    kubeconfig = cluster.api.kubeconfig_path
    print(f"the demo cluster keeps running at {cluster.api.url} (Ctrl-C stops it):\n"
          f"  export KUBECONFIG={kubeconfig}\n"
          f"  kubectl get nodes\n"
          f"  kubectl get pods -n {cluster.namespace} -o wide\n"
          f"  kubectl describe pod too-big -n {cluster.namespace}\n"
          f"  hami-dcu status              # or: kubectl hami-dcu status", flush=True)
    stop = threading.Event()
    on_main_thread = threading.current_thread() is threading.main_thread()  # signals can be set only there
    previous = signal.signal(signal.SIGTERM, lambda _signo, _frame: stop.set()) if on_main_thread else None
    try:
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        if on_main_thread:
            signal.signal(signal.SIGTERM, previous)


def _wait_for_reasons(cluster: LocalCluster, name: str, timeout: float = 5.0) -> None:
    """Until the pending pod has both its FailedScheduling and FilteringFailed events."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reasons = {e.get("reason") for e in events_for(cluster.kube, cluster.namespace, name)}
        if {"FailedScheduling", "FilteringFailed"} <= reasons:
            return
        time.sleep(0.1)

"""Allocate latency over real gRPC, against a real kube-apiserver, beside a no-op call.

    python bench/deviceplugin.py [--pods 300] [--api real|local]

Each round binds a pod the way hami-scheduler does (node lock, Binding with the allocation
annotations; not timed), then times one Allocate RPC on the plugin's unix socket: find the
locked pod, check it, allocate CUs, write the vdev files, patch the pod, mark success and
release the lock (4 API calls: the node and its Pending pods read together, then the pod
patch while the files are written; the lock release follows the answer). Then, once the
release is done, the baseline: a GetDevicePluginOptions
call on the same socket and channel (the plugin answers it from memory, so it costs what
gRPC does).

`--api real` (the default where e2e/upstream/build.sh can build the binaries, once): the plugin talks
to kube-apiserver v1.37 over TLS, backed by etcd, both started for the run: what production
runs, where overlapping calls are served in parallel. `--api local`: the project's local API
server in its own process (one Python thread: it serves overlapping calls one after the other,
so the plugin's concurrent calls show no gain; `--api-latency-ms` adds a round trip to every
answer without holding the server, as a real API server over a network).
Prints p50/p90/p99 of both and the ratio; target: Allocate p50 <= 4x the no-op.
Also timed after each round, as a second baseline: one GET of the node, then one PATCH of the
pod's annotations, sequential on the same client: what an Allocate that proves its pod from
fresh state and records its outcome cannot go below, whatever it does in parallel.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path

import grpc
import yaml

sys.path.insert(0, str(Path(__file__).parent))
# The test harness (e2e/) is not installed: it imports from the checkout this script is in.
sys.path.append(str(Path(__file__).resolve().parent.parent))

from benchlib import percentile, ratio_line

from hami_dcu.common.io.kube import Kube
from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, encode_pod_devices
from hami_dcu.deviceplugin.api.v1beta1 import api_pb2, api_pb2_grpc
from hami_dcu.deviceplugin.core import Paths
from hami_dcu.deviceplugin.server import Servicer, socket_name
from hami_dcu.deviceplugin.service import PluginService
from hami_dcu.node.discovery import discover
from hami_dcu.node.faketree import lay_out
from hami_dcu.node.smi import MockBackend

DCU = keys.DCU_NAMING  # the naming set this benchmark speaks


def serve_api(kubeconfig: Path, stop, latency_ms: float = 0.0) -> None:
    from hami_dcu.cli.localcluster.apiserver import LocalApiServer

    with LocalApiServer(kubeconfig_path=str(kubeconfig) + ".tmp") as server:
        if latency_ms:
            # Every answer waits this long without holding the server: the round trip of a
            # real API server over a network, which serves requests in parallel.
            server.faults.configure(delay_rate=1.0, delay_ms=latency_ms)
        os.replace(str(kubeconfig) + ".tmp", kubeconfig)  # complete before the parent reads it
        stop.wait()


def start_local_api(work: Path, latency_ms: float) -> tuple[Path, Callable[[], None]]:
    kubeconfig = work / "kubeconfig"
    stop = multiprocessing.Event()
    api = multiprocessing.Process(target=serve_api, args=(kubeconfig, stop, latency_ms), daemon=True)
    api.start()
    deadline = time.monotonic() + 30
    while not kubeconfig.exists():
        if time.monotonic() > deadline or not api.is_alive():
            raise RuntimeError("the local API server did not start")
        time.sleep(0.05)

    def close() -> None:
        stop.set()
        api.join(10)
    return kubeconfig, close


def start_real_api(work: Path) -> tuple[Path, Callable[[], None]]:
    from e2e.realcluster.controlplane import ControlPlane
    from e2e.realcluster.upstream import binaries

    plane = ControlPlane(binaries(), work / "plane", "127.0.0.1").start_api()
    # No controller manager here: the ServiceAccount admission needs the namespace's default.
    Kube.from_kubeconfig(str(plane.admin_kubeconfig)).request(
        "POST", "/api/v1/namespaces/default/serviceaccounts", body={"metadata": {"name": "default"}})
    return plane.admin_kubeconfig, plane.stop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--api", choices=("real", "local"), default=None,
                        help="real: kube-apiserver + etcd (default where they build); local: the local API server")
    parser.add_argument("--api-latency-ms", type=float, default=0.0,
                        help="--api local: added to every API answer (a real API server's round trip)")
    args = parser.parse_args()
    if args.api is None:
        from e2e.realcluster.upstream import why_unbuildable

        args.api = "local" if why_unbuildable() else "real"
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # read when gRPC starts: no teardown chatter
    work = Path(tempfile.mkdtemp(prefix="bdp-", dir="/tmp"))
    cards = [{"serial": f"S{i}", "model": "K100_AI", "memory_mib": 65520, "compute_units": 120,
              "pci_bus_id": f"0000:{0x30 + i:02x}:00.0"} for i in range(8)]
    (work / "cards.yaml").write_text(yaml.safe_dump(cards))
    smi = MockBackend(work / "cards.yaml").cards()
    lay_out(smi, work / "sys", work / "dev")

    # The API server runs in its own process, as a real one does: in this process it would
    # compete with the plugin for the GIL and its pauses would show up as Allocate latency.
    if args.api == "real":
        kubeconfig, close_api = start_real_api(work)
    else:
        kubeconfig, close_api = start_local_api(work, args.api_latency_ms)
    try:
        kube = Kube.from_kubeconfig(str(kubeconfig))
        kube.create_node({"metadata": {"name": "n1"}})
        core = PluginService(kube, "n1", discover(smi, work / "sys", work / "dev", DCU),
                             Paths(vdev_dir=work / "vgpu", etc_vdev=work / "etc", state_dir=work / "state",
                                   dev_root=work / "dev"), naming=DCU)
        server = grpc.server(futures.ThreadPoolExecutor(4))
        api_pb2_grpc.add_DevicePluginServicer_to_server(
            Servicer(core, dict, threading.Condition(), threading.Event()), server)
        sock = work / socket_name(DCU.resources.count)
        server.add_insecure_port(f"unix://{sock}")
        server.start()
        stub = api_pb2_grpc.DevicePluginStub(grpc.insecure_channel(f"unix://{sock}"))
        lock = NodeLock(kube)
        latencies, noop, floor = [], [], []
        live: list[str] = []
        for i in range(args.pods):
            name = f"p{i}"
            card = f"DCU-S{i % 8}"
            value = encode_pod_devices([[ContainerDevice(card, "DCU", 100, 1)]])
            kube.create_pod("default", {"metadata": {"name": name}, "spec": {"containers": [
                {"name": "c", "image": "busybox", "resources": {"limits": {DCU.resources.count: "1"}}}]}})
            lock.acquire("n1", "default", name)
            kube.create_binding("default", name, "n1", annotations={
                DCU.pod_devices_to_allocate: value, DCU.pod_devices_allocated: value,
                keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING})
            started = time.perf_counter()
            stub.Allocate(api_pb2.AllocateRequest(container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=[f"{card}-fake-0"])]), timeout=10)
            latencies.append((time.perf_counter() - started) * 1000)
            core.idle(10)  # the lock release that follows the answer: not in the baseline's way
            started = time.perf_counter()
            stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=10)
            noop.append((time.perf_counter() - started) * 1000)
            # The floor of any Allocate that proves its pod from fresh state and records the
            # outcome: one read, then one pod write, on the same API server and client.
            started = time.perf_counter()
            kube.get_node("n1")
            kube.patch_pod_metadata("default", name, annotations={"bench.hami.io/floor": str(i)})
            floor.append((time.perf_counter() - started) * 1000)
            kube.patch_pod_status("default", name, {"phase": "Running"})  # what the kubelet does next
            live.append(name)
            if len(live) == 100:  # stay under the node's 200 vdev ids
                for gone in live:  # at once, as the kubelet confirms a deletion (a real server waits for it)
                    kube.request("DELETE", f"/api/v1/namespaces/default/pods/{gone}",
                                 body={"gracePeriodSeconds": 0})
                core.reconcile()
                live.clear()
        server.stop(None)
    finally:
        close_api()
    shutil.rmtree(work, ignore_errors=True)
    added = " against kube-apiserver + etcd" if args.api == "real" else " against the local API server"
    added += f", {args.api_latency_ms:g} ms added to every API answer" if args.api_latency_ms else ""
    print(f"Allocate over gRPC, {len(latencies)} calls{added} (first one, with connection set-up: "
          f"{latencies[0]:.2f} ms)")
    for label, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        print(ratio_line(f"Allocate {label}", percentile(latencies, q), percentile(noop, q),
                         target=4 if q == 50 else None))
    print(f"  max: Allocate {max(latencies):.2f} ms, no-op {max(noop):.2f} ms")
    print("Against the two API round trips it cannot avoid (a GET, then a pod PATCH, sequential):")
    for label, q in (("p50", 50), ("p99", 99)):
        print(ratio_line(f"Allocate {label}", percentile(latencies, q), percentile(floor, q)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

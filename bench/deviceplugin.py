"""Allocate latency over real gRPC, against the local API server, beside a no-op call.

    python bench/deviceplugin.py [--pods 300]

Each round binds a pod the way hami-scheduler does (node lock, Binding with the allocation
annotations; not timed), then times one Allocate RPC on the plugin's unix socket: find the
locked pod, check it, allocate CUs, write the vdev files, patch the pod, mark success and
release the lock (4 API calls: the node and its Pending pods read together, then the pod
patch and the lock release together). Right after it, the baseline: a GetDevicePluginOptions
call on the same socket and channel (the plugin answers it from memory, so it costs what
gRPC does). The local API server runs in its own process, as a real one does (one Python
thread: it serves overlapping calls one after the other; `--api-latency-ms` adds a round
trip to every answer without holding the server, as a real API server over a network).
Prints p50/p90/p99 of both and the ratio; target (DESIGN.md): Allocate p50 <= 4x the no-op.
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
from concurrent import futures
from pathlib import Path

import grpc
import yaml

sys.path.insert(0, str(Path(__file__).parent))

from benchlib import percentile, ratio_line

from hami_dcu.common import keys
from hami_dcu.common.codec import ContainerDevice, encode_pod_devices
from hami_dcu.common.kube import Kube
from hami_dcu.common.nodelock import NodeLock
from hami_dcu.deviceplugin.api.v1beta1 import api_pb2, api_pb2_grpc
from hami_dcu.deviceplugin.discovery import discover
from hami_dcu.deviceplugin.faketree import lay_out
from hami_dcu.deviceplugin.plugin import Paths, PluginCore
from hami_dcu.deviceplugin.server import Servicer, socket_name
from hami_dcu.deviceplugin.smi import MockBackend


def serve_api(kubeconfig: Path, stop, latency_ms: float = 0.0) -> None:
    from hami_dcu.e2e.apiserver import LocalApiServer

    with LocalApiServer(kubeconfig_path=str(kubeconfig) + ".tmp") as server:
        if latency_ms:
            # Every answer waits this long without holding the server: the round trip of a
            # real API server over a network, which serves requests in parallel.
            server.faults.configure(delay_rate=1.0, delay_ms=latency_ms)
        os.replace(str(kubeconfig) + ".tmp", kubeconfig)  # complete before the parent reads it
        stop.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--api-latency-ms", type=float, default=0.0,
                        help="added to every API answer (a real API server's round trip); default none")
    args = parser.parse_args()
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")  # read when gRPC starts: no teardown chatter
    work = Path(tempfile.mkdtemp(prefix="bdp-", dir="/tmp"))
    cards = [{"serial": f"S{i}", "model": "K100_AI", "memory_mib": 65520, "compute_units": 120,
              "pci_bus_id": f"0000:{0x30 + i:02x}:00.0"} for i in range(8)]
    (work / "cards.yaml").write_text(yaml.safe_dump(cards))
    smi = MockBackend(work / "cards.yaml").cards()
    lay_out(smi, work / "sys", work / "dev")

    # The API server runs in its own process, as a real one does: in this process it would
    # compete with the plugin for the GIL and its pauses would show up as Allocate latency.
    kubeconfig = work / "kubeconfig"
    stop = multiprocessing.Event()
    api = multiprocessing.Process(target=serve_api, args=(kubeconfig, stop, args.api_latency_ms), daemon=True)
    api.start()
    deadline = time.monotonic() + 30
    while not kubeconfig.exists():
        if time.monotonic() > deadline or not api.is_alive():
            print("the local API server did not start", file=sys.stderr)
            return 1
        time.sleep(0.05)
    try:
        kube = Kube.from_kubeconfig(str(kubeconfig))
        kube.create_node({"metadata": {"name": "n1"}})
        core = PluginCore(kube, "n1", discover(smi, work / "sys", work / "dev"),
                          Paths(vdev_dir=work / "vgpu", etc_vdev=work / "etc", state_dir=work / "state",
                                dev_root=work / "dev"))
        server = grpc.server(futures.ThreadPoolExecutor(4))
        api_pb2_grpc.add_DevicePluginServicer_to_server(
            Servicer(core, dict, threading.Condition(), threading.Event()), server)
        sock = work / socket_name(keys.DEFAULT_COUNT_RESOURCE)
        server.add_insecure_port(f"unix://{sock}")
        server.start()
        stub = api_pb2_grpc.DevicePluginStub(grpc.insecure_channel(f"unix://{sock}"))
        lock = NodeLock(kube)
        latencies, noop = [], []
        live: list[str] = []
        for i in range(args.pods):
            name = f"p{i}"
            card = f"DCU-S{i % 8}"
            value = encode_pod_devices([[ContainerDevice(card, "DCU", 100, 1)]])
            kube.create_pod("default", {"metadata": {"name": name}, "spec": {"containers": [
                {"name": "c", "resources": {"limits": {keys.DEFAULT_COUNT_RESOURCE: "1"}}}]}})
            lock.acquire("n1", "default", name)
            kube.create_binding("default", name, "n1", annotations={
                keys.POD_DEVICES_TO_ALLOCATE: value, keys.POD_DEVICES_ALLOCATED: value,
                keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING})
            started = time.perf_counter()
            stub.Allocate(api_pb2.AllocateRequest(container_requests=[
                api_pb2.ContainerAllocateRequest(devices_ids=[f"{card}-fake-0"])]), timeout=10)
            latencies.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=10)
            noop.append((time.perf_counter() - started) * 1000)
            kube.patch_pod_status("default", name, {"phase": "Running"})  # what the kubelet does next
            live.append(name)
            if len(live) == 100:  # stay under the node's 200 vdev ids
                for gone in live:
                    kube.delete_pod("default", gone)
                core.reconcile()
                live.clear()
        server.stop(None)
    finally:
        stop.set()
        api.join(10)
    shutil.rmtree(work, ignore_errors=True)
    added = f", {args.api_latency_ms:g} ms added to every API answer" if args.api_latency_ms else ""
    print(f"Allocate over gRPC, {len(latencies)} calls{added} (first one, with connection set-up: "
          f"{latencies[0]:.2f} ms)")
    for label, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        print(ratio_line(f"Allocate {label}", percentile(latencies, q), percentile(noop, q),
                         target=4 if q == 50 else None))
    print(f"  max: Allocate {max(latencies):.2f} ms, no-op {max(noop):.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

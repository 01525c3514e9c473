"""Synthetic but realistic cluster objects for the scheduler benchmark.

Nodes and pods look like what a kube-apiserver serves (status, managedFields, conditions,
container statuses), so the informer decodes bodies of a real size. Running pods carry
allocations drawn at random (seeded) from the same 16 shapes the /filter requests rotate
through, on random cards with room: every node's usage differs, as in a real cluster, so no
cache can answer all nodes from one entry.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import (
    ContainerDevice,
    NodeDevice,
    encode_node_devices,
    encode_pod_devices,
    encode_reported,
)

DCU = keys.DCU_NAMING  # the naming set this benchmark speaks

CARDS = 8
CARD_MEMORY = 65520
SLOTS = 4


@dataclass(frozen=True)
class Shape:
    count: int
    memory: int | None  # MiB; None: the whole card
    cores: int | None  # percent; None: 100

    def limits(self) -> dict[str, str]:
        limits = {DCU.resources.count: str(self.count)}
        if self.memory is not None:
            limits[DCU.resources.memory] = str(self.memory)
        if self.cores is not None:
            limits[DCU.resources.cores] = str(self.cores)
        return limits


# 16 shapes in rotation: shared vDCUs of many sizes, a whole card, two whole cards.
SHAPES = (
    Shape(1, 1000, 5), Shape(1, 1000, 10), Shape(1, 2000, 10), Shape(1, 2000, 20),
    Shape(1, 3000, 15), Shape(1, 4000, 10), Shape(1, 4000, 25), Shape(1, 6000, 35),
    Shape(1, 8000, 20), Shape(1, 8000, 40), Shape(1, 12000, 30), Shape(1, 16000, 50),
    Shape(1, 24000, 60), Shape(1, 32000, 25), Shape(1, None, None), Shape(2, None, None),
)
RUNNING_SHAPES = SHAPES[:14]  # what already runs: shared vDCUs


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def card_id(node: str, index: int) -> str:
    return f"DCU-{node}-{index}"


def node_object(name: str, now: datetime | None = None) -> dict:
    now = now or datetime.now(UTC)
    devices = [NodeDevice(id=card_id(name, i), count=SLOTS, devmem=CARD_MEMORY, devcore=100, type="DCU-K100_AI",
                          numa=i // 4, index=i) for i in range(CARDS)]
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "node.kubernetes.io/instance-type": "k100-8", "topology.kubernetes.io/zone": "zone-a",
                       "hygon.com/dcu": "on"},
            "annotations": {
                DCU.node_register: encode_node_devices(devices),
                DCU.node_handshake: encode_reported(now),
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        "spec": {"podCIDR": "10.244.0.0/24", "podCIDRs": ["10.244.0.0/24"]},
        "status": {
            "capacity": {"cpu": "128", "memory": "1056594640Ki", "pods": "110", DCU.resources.count: "32"},
            "allocatable": {"cpu": "127", "memory": "1055545040Ki", "pods": "110",
                            DCU.resources.count: "32"},
            "conditions": [
                {"type": kind, "status": "False", "lastHeartbeatTime": stamp, "lastTransitionTime": stamp,
                 "reason": f"Kubelet Has No {kind}", "message": f"kubelet has no {kind.lower()}"}
                for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
            ] + [{"type": "Ready", "status": "True", "lastHeartbeatTime": stamp, "lastTransitionTime": stamp,
                  "reason": "KubeletReady", "message": "kubelet is posting ready status"}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}, {"type": "Hostname", "address": name}],
            "nodeInfo": {"machineID": "0" * 32, "systemUUID": "0" * 36, "bootID": "0" * 36,
                         "kernelVersion": "5.15.0", "osImage": "Ubuntu 22.04", "containerRuntimeVersion":
                         "containerd://1.7.0", "kubeletVersion": "v1.33.0", "kubeProxyVersion": "v1.33.0",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": [f"registry.example/ai/train-{j}@sha256:{'ab' * 32}",
                                  f"registry.example/ai/train-{j}:v1"], "sizeBytes": 10**9 + j} for j in range(8)],
        },
    }


def running_pod(node: str, i: int, device: ContainerDevice, now: str) -> dict:
    name = f"{node}-job-{i}"
    allocated = encode_pod_devices([[device]])
    return {
        "metadata": {
            "name": name, "namespace": "team-a", "uid": f"{node}-uid-{i}",
            "labels": {"app": "train", "job-name": f"train-{node}", "batch.kubernetes.io/controller-uid": "u" * 36},
            "annotations": {DCU.pod_devices_allocated: allocated, DCU.pod_devices_to_allocate: ";",
                            keys.POD_NODE: node, keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS,
                            keys.POD_BIND_TIME: "1767225600", keys.POD_TIME: "1767225600"},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"train-{node}", "uid": "u" * 36,
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                               "time": now, "fieldsType": "FieldsV1", "fieldsV1": {
                                   "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:job-name": {}},
                                                  "f:ownerReferences": {".": {}}},
                                   "f:spec": {"f:containers": {'k:{"name":"main"}': {
                                       ".": {}, "f:image": {}, "f:name": {}, "f:resources": {".": {}}}}}}},
                              {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": now,
                               "fieldsType": "FieldsV1", "subresource": "status",
                               "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {},
                                                         "f:phase": {}, "f:podIP": {}}}}],
            "creationTimestamp": now,
        },
        "spec": {
            "schedulerName": keys.DEFAULT_SCHEDULER_NAME, "nodeName": node, "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": "registry.example/ai/train-3:v1", "command": ["python", "train.py"],
                "resources": {"limits": {DCU.resources.count: "1", DCU.resources.memory:
                                         str(device.usedmem), DCU.resources.cores: str(device.usedcores),
                                         "cpu": "8", "memory": "64Gi"}},
                "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(5)],
                "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                 {"name": "kube-api-access", "readOnly": True,
                                  "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
                "terminationMessagePath": "/dev/termination-log", "imagePullPolicy": "IfNotPresent"}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                        {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {
                            "path": "token", "expirationSeconds": 3607}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 300}],
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": "10.244.0.10", "startTime": now, "qosClass": "Burstable",
            "conditions": [{"type": kind, "status": "True", "lastTransitionTime": now}
                           for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0, "started": True,
                                   "image": "registry.example/ai/train-3:v1", "imageID": "sha256:" + "ab" * 32,
                                   "containerID": "containerd://" + "cd" * 32,
                                   "state": {"running": {"startedAt": now}}}],
        },
    }


def running_pods(node: str, count: int, rng: random.Random, now: str) -> list[dict]:
    """`count` pods with random shared shapes on random cards that have room for them."""
    free = [[SLOTS, CARD_MEMORY, 100] for _ in range(CARDS)]
    pods = []
    for i in range(count):
        shape = rng.choice(RUNNING_SHAPES)
        assert shape.memory is not None and shape.cores is not None
        room = [c for c in range(CARDS) if free[c][0] > 0 and free[c][1] >= shape.memory and free[c][2] >= shape.cores]
        if not room:
            continue
        card = rng.choice(room)
        free[card][0] -= 1
        free[card][1] -= shape.memory
        free[card][2] -= shape.cores
        device = ContainerDevice(card_id(node, card), DCU.device_type, shape.memory, shape.cores)
        pods.append(running_pod(node, i, device, now))
    return pods


def new_pod(i: int, shape: Shape, salt: str = "") -> dict:
    """A pending pod as kube-scheduler sends it to /filter."""
    name = f"new{salt}-{i}"
    return {
        "metadata": {"name": name, "namespace": "team-b", "uid": f"uid-{name}", "labels": {"app": "infer"},
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"schedulerName": keys.DEFAULT_SCHEDULER_NAME, "containers": [
            {"name": "main", "image": "registry.example/ai/infer:v2",
             "resources": {"limits": {**shape.limits(), "cpu": "4", "memory": "16Gi"}}}]},
        "status": {"phase": "Pending"},
    }

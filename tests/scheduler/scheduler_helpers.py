"""Builders for scheduler tests: nodes as the device plugin registers them, DCU pods."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hami_dcu.common.io.kube import AsyncKube, Kube, KubeError
from hami_dcu.common.io.nodelock import LockError, NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import (
    NodeDevice,
    decode_node_devices,
    decode_pod_devices,
    encode_node_devices,
    encode_reported,
)
from hami_dcu.scheduler.filtering import FilterSettings
from hami_dcu.scheduler.service import ServiceSettings

DCU = keys.DCU_NAMING  # the naming set these tests speak


def dcu_settings(**service: Any) -> ServiceSettings:
    """The extender's settings speaking the dcu set; `service` as ServiceSettings takes it. The
    settings have no naming set of their own: a test names it, here or in its own FilterSettings."""
    return ServiceSettings(filter=FilterSettings(naming=DCU), **service)

JSON = dict[str, Any]


def cards(node: str, count: int = 2, memory: int = 65520, model: str = "DCU-K100_AI") -> list[NodeDevice]:
    return [NodeDevice(id=f"DCU-{node}-S{i}", count=4, devmem=memory, devcore=100, type=model, index=i)
            for i in range(count)]


def node_object(name: str, count: int = 2, memory: int = 65520, handshake: datetime | None = None,
                model: str = "DCU-K100_AI", extra: dict[str, str] | None = None) -> JSON:
    annotations = {
        DCU.node_register: encode_node_devices(cards(name, count, memory, model)),
        DCU.node_handshake: encode_reported(handshake or datetime.now(UTC)),
        **(extra or {}),
    }
    return {"metadata": {"name": name, "annotations": annotations, "resourceVersion": "1"}}


def dcu_pod(name: str, memory: int | None = 2000, cores: int | None = 60, count: int = 1,
            annotations: dict[str, str] | None = None, uid: str | None = None,
            scheduler: str = keys.DEFAULT_SCHEDULER_NAME) -> JSON:
    limits: dict[str, str] = {DCU.resources.count: str(count)}
    if memory is not None:
        limits[DCU.resources.memory] = str(memory)
    if cores is not None:
        limits[DCU.resources.cores] = str(cores)
    pod: JSON = {
        "metadata": {"name": name, "namespace": "default", "annotations": dict(annotations or {})},
        "spec": {"schedulerName": scheduler,
                 "containers": [{"name": "main", "image": "x", "resources": {"limits": limits}}]},
    }
    if uid:
        pod["metadata"]["uid"] = uid
    return pod


def create_nodes(kube: Kube, names: list[str], **kwargs: Any) -> None:
    for name in names:
        kube.create_node(node_object(name, **kwargs))


async def until(predicate: Callable[[], bool], timeout: float = 10.0, step: float = 0.01) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(step)


def filter_args(pod: JSON, names: list[str]) -> JSON:
    return {"Pod": pod, "Nodes": None, "NodeNames": names}


def bind_args(pod: JSON, node: str) -> JSON:
    meta = pod["metadata"]
    return {"PodName": meta["name"], "PodNamespace": meta.get("namespace", "default"),
            "PodUID": meta.get("uid", ""), "Node": node}


def lock_of(kube: Kube, node: str) -> str | None:
    return (kube.get_node(node)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


async def fake_device_plugin(kube: Kube, stop: asyncio.Event) -> None:
    """What the plugin's Allocate ends with: bind-phase success, then the lock released."""
    akube = AsyncKube(kube)
    lock = NodeLock(kube)
    try:
        while not stop.is_set():
            pods = await akube.list_pods()
            for pod in pods.items:
                meta = pod["metadata"]
                annotations = meta.get("annotations") or {}
                if annotations.get(keys.POD_BIND_PHASE) != keys.BIND_PHASE_ALLOCATING:
                    continue
                try:  # lock first: a fault between the two steps must not strand the lock
                    await akube.call(lock.release, pod["spec"]["nodeName"], "default", meta["name"])
                    await akube.patch_pod_metadata("default", meta["name"],
                                                   {keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
                except (KubeError, LockError):
                    pass
            await asyncio.sleep(0.02)
    finally:
        akube.close()


def held_per_card(kube: Kube) -> dict[str, tuple[int, int, int]]:
    held: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for pod in kube.list_pods().items:
        value = (pod["metadata"].get("annotations") or {}).get(DCU.pod_devices_allocated)
        for container in decode_pod_devices(value or ""):
            for device in container:
                row = held[device.uuid]
                row[0] += 1
                row[1] += device.usedmem
                row[2] += device.usedcores
    return {card: tuple(row) for card, row in held.items()}


def cache_view(service: Any) -> dict[str, tuple[int, int, int]]:
    return {card.id: (used.slots, used.memory, used.cores)
            for entry in service.cache.nodes() for card, used in zip(entry.cards, entry.used, strict=True)
            if used.slots or used.memory or used.cores}


def over_capacity(kube: Kube) -> list[str]:
    nodes = {n["metadata"]["name"]: n for n in kube.list_nodes().items}
    held: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for pod in kube.list_pods().items:
        value = (pod["metadata"].get("annotations") or {}).get(DCU.pod_devices_allocated)
        if not value:
            continue
        for container in decode_pod_devices(value):
            for device in container:
                row = held[device.uuid]
                row[0] += 1
                row[1] += device.usedmem
                row[2] += device.usedcores
    problems = []
    for node in nodes.values():
        for card in decode_node_devices(node["metadata"]["annotations"][DCU.node_register]):
            slots, memory, cores = held[card.id]
            if slots > card.count or memory > card.devmem or cores > card.devcore:
                problems.append(f"{card.id}: {slots} slots, {memory} MiB, {cores}%")
    return problems

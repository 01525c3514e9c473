"""Two extender instances, each driven by its own scheduler loop, bind a burst of pods onto
the same nodes: no card ever goes over capacity and no lock is left behind."""

import asyncio
from collections import defaultdict

from scheduler_helpers import create_nodes, dcu_pod, lock_of, until

from hami_dcu.common import keys
from hami_dcu.common.codec import decode_node_devices, decode_pod_devices
from hami_dcu.common.kube import AsyncKube, KubeError
from hami_dcu.common.nodelock import NodeLock
from hami_dcu.e2e.scheduler_loop import SchedulerLoop
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.bind import BindSettings
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings


async def fake_device_plugin(kube, stop: asyncio.Event) -> None:
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
                try:
                    await akube.patch_pod_metadata("default", meta["name"],
                                                   {keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
                    await akube.call(lock.release, pod["spec"]["nodeName"], "default", meta["name"])
                except KubeError:
                    pass
            await asyncio.sleep(0.02)
    finally:
        akube.close()


def held_per_card(kube) -> dict[str, tuple[int, int, int]]:
    held: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for pod in kube.list_pods().items:
        value = (pod["metadata"].get("annotations") or {}).get(keys.POD_DEVICES_ALLOCATED)
        for container in decode_pod_devices(value or ""):
            for device in container:
                row = held[device.uuid]
                row[0] += 1
                row[1] += device.usedmem
                row[2] += device.usedcores
    return {card: tuple(row) for card, row in held.items()}


def cache_view(service) -> dict[str, tuple[int, int, int]]:
    return {card.id: (used.slots, used.memory, used.cores)
            for entry in service.cache.nodes.values() for card, used in zip(entry.cards, entry.used, strict=True)
            if used.slots or used.memory or used.cores}


def over_capacity(kube) -> list[str]:
    nodes = {n["metadata"]["name"]: n for n in kube.list_nodes().items}
    held: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for pod in kube.list_pods().items:
        value = (pod["metadata"].get("annotations") or {}).get(keys.POD_DEVICES_ALLOCATED)
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
        for card in decode_node_devices(node["metadata"]["annotations"][keys.NODE_REGISTER]):
            slots, memory, cores = held[card.id]
            if slots > card.count or memory > card.devmem or cores > card.devcore:
                problems.append(f"{card.id}: {slots} slots, {memory} MiB, {cores}%")
    return problems


async def test_two_instances_bind_200_pods_onto_10_nodes(kube_factory, aiohttp_server):
    kube = kube_factory()
    names = [f"n{i}" for i in range(10)]
    create_nodes(kube, names, count=4)  # 10 nodes x 4 cards x 4 slots = 160 slots
    settings = ServiceSettings(bind=BindSettings(lock_wait=10.0, settle_wait=0.5))
    services, loops, kubes = [], [], []
    for _ in range(2):
        akube = AsyncKube(kube_factory())
        kubes.append(akube)
        service = SchedulerService(akube, settings)
        service.start()
        services.append(service)
    for service in services:
        assert await service.wait_synced(10)
    servers = [await aiohttp_server(build_app(s, manage_lifecycle=False)) for s in services]
    for i in range(200):
        # 20% cores, 1000 MiB: the 4-slot limit binds first (a card could take 5 by cores)
        kube.create_pod("default", dcu_pod(f"p{i:03d}", memory=1000, cores=20, scheduler=f"sched-{i % 2}"))
    stop = asyncio.Event()
    plugin = asyncio.ensure_future(fake_device_plugin(kube_factory(), stop))
    for i, server in enumerate(servers):
        loops.append(SchedulerLoop(kube_factory(), str(server.make_url("/")), scheduler_name=f"sched-{i}",
                                   interval=0.02, initial_backoff=0.2, max_backoff=1.0))
    runners = [asyncio.ensure_future(loop.run()) for loop in loops]
    try:
        await until(lambda: sum(len(loop.stats.bound) for loop in loops) >= 160, timeout=40, step=0.1)
        await asyncio.sleep(0.5)  # let any wrong extra bind land before counting
    finally:
        for loop in loops:
            loop._stop.set()
        await asyncio.gather(*runners)
        await until(lambda: all(lock_of(kube, n) is None for n in names), timeout=10)
        stop.set()
        await plugin
        truth = held_per_card(kube)
        for service in services:
            # filters whose bind never ran (the loops stopped) live until their TTL: end it
            service.cache.expire(service.monotonic() + service.settings.assume_ttl + 1)
            # the cache of each instance agrees with the API, card by card (no drift)
            await until(lambda svc=service: cache_view(svc) == truth, timeout=5)
        for service in services:
            await service.stop()
        for akube in kubes:
            akube.close()
    bound = [p for p in kube.list_pods().items if p["spec"].get("nodeName")]
    assert len(bound) == 160
    assert over_capacity(kube) == []
    assert all(lock_of(kube, n) is None for n in names)
    assert sum(sum(loop.stats.filter_failures.values()) for loop in loops) > 0  # the 40 that never fit

"""Two extender instances, each driven by its own scheduler loop, bind a burst of pods onto
the same nodes: no card ever goes over capacity and no lock is left behind."""

import asyncio

from scheduler_helpers import (
    cache_view,
    create_nodes,
    dcu_pod,
    dcu_settings,
    fake_device_plugin,
    held_per_card,
    lock_of,
    over_capacity,
    until,
)

from hami_dcu.cli.localcluster.scheduler_loop import SchedulerLoop
from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.bind import BindSettings
from hami_dcu.scheduler.service import SchedulerService


async def test_two_instances_bind_200_pods_onto_10_nodes(kube_factory, aiohttp_server):
    kube = kube_factory()
    names = [f"n{i}" for i in range(10)]
    create_nodes(kube, names, count=4)  # 10 nodes x 4 cards x 4 slots = 160 slots
    settings = dcu_settings(bind=BindSettings(lock_wait=10.0, settle_wait=0.5))
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
        # Binds still in flight when the loops stop may wait up to lock_wait for a node, then
        # lock it for their Allocate: give them that long, and the fake plugin a little more.
        # Their end, not a moment with no lock: one still waiting could lock a node right after.
        await until(lambda: all(s.binder.in_flight == 0 for s in services)
                    and all(lock_of(kube, n) is None for n in names), timeout=settings.bind.lock_wait + 10)
        stop.set()
        await plugin
        truth = held_per_card(kube)
        for service in services:
            # filters whose bind never ran (the loops stopped) live until their TTL: end it
            service.cache.placements.expire(service.monotonic() + service.settings.assume_ttl + 1)
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

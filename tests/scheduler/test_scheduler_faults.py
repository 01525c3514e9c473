"""Binding through injected API faults (409s and 500s on writes): pods still get scheduled,
no card is ever over capacity, and no lock is left behind."""

import asyncio

from scheduler_helpers import create_nodes, dcu_pod, fake_device_plugin, held_per_card, lock_of, over_capacity, until

from hami_dcu.cli.localcluster.scheduler_loop import SchedulerLoop
from hami_dcu.scheduler.app import build_app


async def test_faults_on_writes_cost_retries_not_correctness(kube_factory, service, aiohttp_server, api_server):
    kube = kube_factory()
    create_nodes(kube, ["n1", "n2"])  # 2 nodes x 2 cards x 4 slots = 16
    for i in range(8):
        kube.create_pod("default", dcu_pod(f"p{i:02d}", memory=1000, cores=20))
    await until(lambda: service.cache.node("n2") is not None)
    server = await aiohttp_server(build_app(service, manage_lifecycle=False))
    api_server.faults.configure(seed=7, conflict_rate=0.2, error_rate=0.05,
                                match=lambda method, path: method in ("PATCH", "POST") and "/events" not in path)
    stop = asyncio.Event()
    plugin = asyncio.ensure_future(fake_device_plugin(kube_factory(), stop))
    loop = SchedulerLoop(kube_factory(), str(server.make_url("/")), interval=0.02, initial_backoff=0.1,
                         max_backoff=0.5)
    runner = asyncio.ensure_future(loop.run())
    try:
        await until(lambda: len(loop.stats.bound) >= 8, timeout=30, step=0.05)
    finally:
        loop._stop.set()
        await runner
        api_server.faults.clear()
        await until(lambda: all(lock_of(kube, n) is None for n in ("n1", "n2")), timeout=10)
        stop.set()
        await plugin
        loop.kube.close()
    assert sum(api_server.faults.injected.values()) > 0
    assert over_capacity(kube) == []
    assert sum(slots for slots, _, _ in held_per_card(kube).values()) == 8

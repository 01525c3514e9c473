"""Contended binds (issue 14): a bind waiting for a node locked by a live bind waits on the
cache, woken by the informer, and takes the lock with the version the watch shows, so it
costs the same two round trips as an uncontended one; a lock write that finds the node
changed waits for the watch instead of reading the node."""

from __future__ import annotations

import asyncio
import logging

import pytest
from scheduler_helpers import bind_args, create_nodes, dcu_pod, dcu_settings, filter_args, lock_of, until

from hami_dcu.common.io.kube import AsyncKube, Kube
from hami_dcu.common.io.nodelock import LockStale, NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.bind import BindSettings
from hami_dcu.scheduler.service import SchedulerService
from hami_dcu.scheduler.signal import CacheSignal


class CountingKube(Kube):
    """The service's client, counting the calls a bind could make."""

    def __init__(self, inner: Kube) -> None:
        super().__init__(inner.api_client, inner.timeout)
        self.calls: list[str] = []

    def get_node(self, name):
        self.calls.append("get_node")
        return super().get_node(name)

    def get_pod(self, namespace, name):
        self.calls.append("get_pod")
        return super().get_pod(namespace, name)

    def patch_node_metadata(self, name, annotations=None, labels=None, resource_version=None):
        self.calls.append("patch_node")
        return super().patch_node_metadata(name, annotations, labels, resource_version)

    def create_binding(self, namespace, name, node, uid=None, annotations=None):
        self.calls.append("binding")
        return super().create_binding(namespace, name, node, uid, annotations)


def round_trips(service: SchedulerService) -> tuple[float, float]:
    samples = {s.name: s.value for m in service.metrics.registry.collect() for s in m.samples}
    return samples["hami_dcu_scheduler_bind_api_calls_sum"], samples["hami_dcu_scheduler_bind_api_calls_count"]


async def test_a_bind_behind_a_live_lock_waits_on_the_cache_and_costs_two_round_trips(kube_factory, aiohttp_client,
                                                                                     caplog):
    caplog.set_level(logging.INFO, logger="hami_dcu.scheduler.bind")
    kube = kube_factory()
    create_nodes(kube, ["n1"])
    holder = kube.create_pod("default", dcu_pod("holder", memory=1000, cores=10))
    pod = kube.create_pod("default", dcu_pod("next", memory=1000, cores=10))
    own = CountingKube(kube_factory())
    akube = AsyncKube(own)
    service = SchedulerService(akube, dcu_settings(bind=BindSettings(lock_wait=10.0)))
    service.start()
    try:
        client = await aiohttp_client(build_app(service, manage_lifecycle=False))
        assert await service.wait_synced(10)
        # The bind before ours: locked and bound, its Allocate still to come.
        await client.post("/filter", json=filter_args(holder, ["n1"]))
        assert (await (await client.post("/bind", json=bind_args(holder, "n1"))).json())["Error"] == ""
        await until(lambda: service.cache.node("n1").lock_value is not None)
        await client.post("/filter", json=filter_args(pod, ["n1"]))
        own.calls.clear()
        before = round_trips(service)
        waiting = asyncio.ensure_future(client.post("/bind", json=bind_args(pod, "n1")))
        await asyncio.sleep(0.5)
        assert not waiting.done()
        assert own.calls == []  # the cache says the lock is live: nothing asked of the API
        waits = [r.getMessage() for r in caplog.records if "waiting for the node lock" in r.getMessage()]
        # why this bind is slow, said once however often it wakes, naming pod, node and holder
        assert waits == [waits[0]] and waits[0].startswith("bind default/next to node n1: ")
        assert "default/holder" in waits[0]
        # the device plugin finishes the holder's Allocate
        kube.patch_pod_metadata("default", "holder", annotations={keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
        NodeLock(kube).release("n1", "default", "holder")
        assert (await (await waiting).json())["Error"] == ""
        assert own.calls.count("binding") == 1
        after = round_trips(service)
        assert (after[0] - before[0], after[1] - before[1]) == (2, 1)
        assert lock_of(kube, "n1").endswith(",default,next")
    finally:
        await service.stop()
        akube.close()
        own.api_client.rest_client.pool_manager.clear()


def test_a_lock_write_with_a_stale_version_can_leave_the_read_to_the_caller(kube):
    create_nodes(kube, ["n1"])
    stale = kube.get_node("n1")["metadata"]["resourceVersion"]
    kube.patch_node_metadata("n1", annotations={"other": "x"})  # the node moves on
    lock = NodeLock(kube)
    with pytest.raises(LockStale) as raised:
        lock.take("n1", "default", "a", stale, read_on_conflict=False)
    assert raised.value.calls == 1
    assert lock_of(kube, "n1") is None
    assert lock.take("n1", "default", "a", stale).calls == 3  # read, then write: the default


async def test_the_signal_wakes_every_waiter_and_times_out_without_a_change():
    signal = CacheSignal()
    waiters = [asyncio.ensure_future(signal.wait(5)) for _ in range(3)]
    await asyncio.sleep(0.01)
    signal.notify()
    await asyncio.wait_for(asyncio.gather(*waiters), 1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await signal.wait(0.05)
    assert loop.time() - started >= 0.04

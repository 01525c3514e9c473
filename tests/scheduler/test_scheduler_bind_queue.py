"""A burst on a slow machine must not queue more binds on one node than its Allocates can serve
within --lock-wait (issue 40, item 5). HAMi's node lock admits one pod per node between its
bind and its Allocate, and binpack sends a burst to the fullest node: kube-scheduler places
pods far faster than a node serves them, so binds queue there, and when Allocates slow down
the last ones outwait --lock-wait, fail (BindingFailed) and go back to kube-scheduler's
backoff. /filter passes over a node with `bind_queue` binds in flight while another fitting
node has fewer, and takes it only when every fitting node is as busy. And since a bind's mean
wait is the binds in flight over the pace they end (Little's law), /filter waits while the binds
in flight would outlast a share of --lock-wait at that pace (bindpace.py)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from scheduler_helpers import bind_args, create_nodes, dcu_pod, filter_args, node_object

from hami_dcu.common.io.kube import AsyncKube, Kube, KubeError
from hami_dcu.common.io.nodelock import LockError, NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.bind import BindSettings
from hami_dcu.scheduler.bindpace import BindPace
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.filtering import Filter, FilterSettings, plan_pod
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings

DCU = keys.DCU_NAMING
NOW = datetime.now(UTC)


def two_node_cache() -> ClusterCache:
    """full: one card half used (binpack's first choice); empty: nothing used."""
    cache = ClusterCache(naming=DCU)
    for name in ("full", "empty"):
        cache.apply_node(node_object(name), NOW)
    cache.apply_pod({
        "metadata": {"uid": "u1", "name": "x", "namespace": "default", "resourceVersion": "3",
                     "annotations": {DCU.pod_devices_allocated: "DCU-full-S1,DCU,30000,50:;"}},
        "spec": {"nodeName": "full", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}})
    return cache


def test_filter_passes_over_a_busy_node_while_another_fits():
    flt = Filter(two_node_cache(), FilterSettings(naming=DCU))
    plan = plan_pod(dcu_pod("p", memory=1000, cores=10), flt.settings)
    assert flt.run(plan, ["full", "empty"], NOW).chosen == "full"  # binpack
    outcome = flt.run(plan, ["full", "empty"], NOW, busy=frozenset({"full"}))
    assert outcome.chosen == "empty" and "full" not in outcome.failed  # passed over, not failing


def test_filter_still_picks_a_busy_node_when_every_fitting_node_is():
    flt = Filter(two_node_cache(), FilterSettings(naming=DCU))
    plan = plan_pod(dcu_pod("p", memory=1000, cores=10), flt.settings)
    assert flt.run(plan, ["full", "empty"], NOW, busy=frozenset({"full", "empty"})).chosen == "full"
    assert flt.run(plan, ["full"], NOW, busy=frozenset({"full"})).chosen == "full"


def limited(cache: ClusterCache, limit: int) -> frozenset[str]:
    return cache.busy_nodes(lambda _node: limit)


def test_placements_count_the_binds_in_flight_per_node():
    cache = two_node_cache()
    flt = Filter(cache, FilterSettings(naming=DCU))
    plan = plan_pod(dcu_pod("p", memory=1000, cores=10), flt.settings)
    fit = flt.run(plan, ["full"], NOW).fit
    assert fit is not None
    made = [cache.placements.reserve(f"u{i}", "default", f"p{i}", "full", fit, 0, 0.0, plan) for i in range(3)]
    assert cache.placements.in_flight("full") == 3
    assert limited(cache, 3) == {"full"} and limited(cache, 4) == frozenset()
    assert limited(cache, 0) == frozenset()  # 0: no limit
    assert cache.busy_nodes(lambda node: 3 if node == "full" else 1) == {"full"}  # each node its own limit
    cache.placements.confirm(made[0], 1.0)  # bound: no longer waiting for the node
    cache.placements.withdraw(made[1])  # its bind failed
    assert cache.placements.in_flight("full") == 1 and limited(cache, 2) == frozenset()
    # The lock names the bound pod: its Allocate is still to come, so it counts.
    node = node_object("full")
    node["metadata"]["resourceVersion"] = "5"
    node["metadata"]["annotations"][keys.NODE_LOCK] = f"{NOW.strftime('%Y-%m-%dT%H:%M:%SZ')},default,p0"
    cache.apply_node(node, NOW)
    assert limited(cache, 2) == {"full"}
    cache.placements.reserve("u2", "default", "p2", "empty", fit, 0, 0.0, plan)  # /filter again: moved
    assert cache.placements.in_flight("full") == 0 and cache.placements.in_flight("empty") == 1
    cache.placements.expire(10_000.0)
    assert cache.placements.in_flight("empty") == 0 and limited(cache, 1) == frozenset()


async def slow_device_plugin(kube: Kube, stop: asyncio.Event, nodes: list[str], seconds: float) -> None:
    """Each node's device plugin, its Allocate taking `seconds` (a busy machine): it serves the
    pod its node's lock names, then marks it done and releases the lock."""
    akube = AsyncKube(kube)
    lock = NodeLock(kube)

    async def serve(node: str) -> None:
        while not stop.is_set():
            held = (((await akube.get_node(node))["metadata"].get("annotations") or {}).get(keys.NODE_LOCK))
            name = held.rsplit(",", 1)[-1] if held else None
            pod = await akube.get_pod("default", name) if name else None
            if pod is None or ((pod["metadata"].get("annotations") or {}).get(keys.POD_BIND_PHASE)
                               != keys.BIND_PHASE_ALLOCATING):
                await asyncio.sleep(0.02)
                continue
            await asyncio.sleep(seconds)
            try:
                await akube.patch_pod_metadata("default", name, {keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
                await akube.call(lock.release, node, "default", name)
            except (KubeError, LockError):
                pass

    try:
        await asyncio.gather(*(serve(node) for node in nodes))
    finally:
        akube.close()


async def serial_device_plugins(kube: Kube, stop: asyncio.Event, seconds: float) -> None:
    """Every node's device plugin in one process on a busy machine (the scale bench's node
    simulator): one Allocate at a time, each taking `seconds`, so the more nodes have a pod
    waiting, the longer each waits."""
    akube = AsyncKube(kube)
    lock = NodeLock(kube)
    try:
        while not stop.is_set():
            served = False
            for node in (await akube.list_nodes()).items:
                held = (node["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)
                if not held:
                    continue
                name = held.rsplit(",", 1)[-1]
                pod = await akube.get_pod("default", name)
                if ((pod["metadata"].get("annotations") or {}).get(keys.POD_BIND_PHASE)
                        != keys.BIND_PHASE_ALLOCATING):
                    continue
                await asyncio.sleep(seconds)
                try:
                    await akube.patch_pod_metadata("default", name, {keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
                    await akube.call(lock.release, node["metadata"]["name"], "default", name)
                except (KubeError, LockError):
                    pass
                served = True
            if not served:
                await asyncio.sleep(0.02)
    finally:
        akube.close()


def test_the_pace_lets_through_what_ends_within_the_budget():
    pace = BindPace(budget=5.0, floor=8, window=10.0)
    assert pace.limit(0.0) == 8 and pace.room(7, 0.0) and not pace.room(8, 0.0)  # nothing ended yet: the floor
    for i in range(40):  # 4 binds a second for 10 s
        pace.ended(i / 4)
    assert 3.9 < pace.rate(10.0) < 4.2 and pace.limit(10.0) == 20
    assert pace.room(19, 10.0) and not pace.room(20, 10.0)
    assert pace.limit(100.0) == 8  # ended long ago: back to the floor
    assert BindPace(budget=0.0).room(10_000, 0.0)  # 0: never held


async def burst(kube_factory, aiohttp_client, bind_queue: int | None, nodes: int = 4, pods: int = 8,
                plugin: str = "per-node", pace_share: float = 0.0, pace_floor: int = 2,
                warm: int = 0) -> dict[str, str]:
    """8 pods placed one after the other, as kube-scheduler's scheduling loop does, each bind
    sent at once without waiting for the previous one (its binding cycles run beside it), on 4
    nodes of 8 slots each, Allocates of 0.25 s and a 1.2 s lock wait: 8 binds queued on the
    one node binpack picks need 2 s. `warm`: that many pods first, their binds sent together
    and ended before the burst (the nodes' pace measured). The error each bind answered, by pod."""
    kube = kube_factory()
    names = [f"n{i}" for i in range(nodes)]
    create_nodes(kube, names)
    made = [kube.create_pod("default", dcu_pod(f"p{i}", memory=1000, cores=10)) for i in range(pods)]
    akube = AsyncKube(kube_factory())
    settings = ServiceSettings(filter=FilterSettings(naming=DCU, bind_queue=bind_queue),
                               bind=BindSettings(lock_wait=1.2, settle_wait=0.5, pace_share=pace_share,
                                                 pace_floor=pace_floor))
    service = SchedulerService(akube, settings)
    service.start()
    stop = asyncio.Event()
    plugin = asyncio.ensure_future(slow_device_plugin(kube_factory(), stop, names, 0.25) if plugin == "per-node"
                                   else serial_device_plugins(kube_factory(), stop, 0.15))
    try:
        client = await aiohttp_client(build_app(service, manage_lifecycle=False))
        assert await service.wait_synced(10)
        binds = {}
        for i, pod in enumerate(made):
            if i == warm:  # the warm-up's binds end before the burst
                await asyncio.gather(*binds.values())
            answer = await (await client.post("/filter", json=filter_args(pod, names))).json()
            assert answer["Error"] == "" and len(answer["NodeNames"]) == 1
            binds[pod["metadata"]["name"]] = asyncio.ensure_future(
                client.post("/bind", json=bind_args(pod, answer["NodeNames"][0])))
        return {name: (await (await bind).json())["Error"] for name, bind in binds.items()}
    finally:
        stop.set()
        await plugin
        await service.stop()
        akube.close()


async def test_a_burst_queued_on_one_node_outwaits_the_lock_wait(kube_factory, aiohttp_client):
    """The failure, reproduced: without the limit binpack queues all 8 binds on one node."""
    errors = await burst(kube_factory, aiohttp_client, bind_queue=0)
    failed = [e for e in errors.values() if e]
    assert failed and all("stayed" in e for e in failed)


async def test_a_burst_spread_over_nodes_with_room_binds_every_pod(kube_factory, aiohttp_client):
    errors = await burst(kube_factory, aiohttp_client, bind_queue=2)
    assert errors == {f"p{i}": "" for i in range(8)}


async def test_binds_in_flight_beyond_their_pace_outwait_the_lock_wait(kube_factory, aiohttp_client):
    """The failure on a slow machine, reproduced: every node's Allocate served by one busy
    process, 0.15 s each, and 24 binds in flight at once on 12 nodes, two each: spread as they
    are, they end at about 6 a second, so the last ones wait longer than the 1.2 s lock wait."""
    errors = await burst(kube_factory, aiohttp_client, bind_queue=2, nodes=12, pods=24, plugin="serial")
    failed = [e for e in errors.values() if e]
    assert failed and all("stayed" in e for e in failed)


async def test_filter_holds_binds_beyond_their_pace_and_every_pod_binds(kube_factory, aiohttp_client):
    errors = await burst(kube_factory, aiohttp_client, bind_queue=2, nodes=12, pods=24, plugin="serial",
                         pace_share=0.25)
    assert errors == {f"p{i}": "" for i in range(24)}


async def test_a_burst_queued_on_a_node_beyond_its_pace_outwaits_the_lock_wait(kube_factory, aiohttp_client):
    """The failure the pace alone leaves (11 of 2,000 binds beside a CPU hog at 1,000 kwok
    nodes), reproduced: the global pace lets 8 binds through, and binpack queues them all on
    the one node whose Allocates take 0.25 s each."""
    errors = await burst(kube_factory, aiohttp_client, bind_queue=0, pods=10, pace_share=0.25, pace_floor=8,
                         warm=2)
    failed = [e for e in errors.values() if e]
    assert failed and all("stayed" in e for e in failed)


async def test_each_node_queues_what_its_own_pace_serves_and_every_pod_binds(kube_factory, aiohttp_client, caplog):
    """The default (auto): the warm-up measured the node's handoffs, so /filter passes over it
    once its queue would outlast half the lock wait (and says so), and every bind ends in time."""
    caplog.set_level(logging.INFO, logger="hami_dcu.scheduler")
    errors = await burst(kube_factory, aiohttp_client, bind_queue=None, pods=10, pace_share=0.25, pace_floor=8,
                         warm=2)
    assert errors == {f"p{i}": "" for i in range(10)}
    assert any("with a full bind queue" in record.getMessage() for record in caplog.records)

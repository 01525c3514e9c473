"""Liveness under duplicates and faults (issue 12): no lock outlives its purpose, a bind
attempt never takes over or removes another attempt's lock, a write with an unknown
outcome is read back, and an assumption never overwrites what a pod really holds."""

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from scheduler_helpers import (
    bind_args,
    cache_view,
    create_nodes,
    dcu_pod,
    dcu_settings,
    filter_args,
    held_per_card,
    lock_of,
    until,
)

from hami_dcu.common.io.kube import AsyncKube, Kube, KubeError
from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.bind import BindSettings
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings

PATIENT = dcu_settings(bind=BindSettings(lock_wait=10.0, settle_wait=1.0))


class RecordingKube(Kube):
    """The service's own client: remembers every node-lock value it writes."""

    def __init__(self, inner: Kube) -> None:
        super().__init__(inner.api_client, inner.timeout)
        self.lock_writes: list[str] = []
        self.fail_bindings = 0
        self.node_reads = 0

    def get_node(self, name):
        self.node_reads += 1
        return super().get_node(name)

    def patch_node_metadata(self, name, annotations=None, labels=None, resource_version=None):
        value = (annotations or {}).get(keys.NODE_LOCK)
        if value:
            self.lock_writes.append(value)
        return super().patch_node_metadata(name, annotations, labels, resource_version)

    def create_binding(self, namespace, name, node, uid=None, annotations=None):
        if self.fail_bindings:
            self.fail_bindings -= 1
            raise KubeError(500, "InternalError", "injected before commit")
        return super().create_binding(namespace, name, node, uid, annotations)


@asynccontextmanager
async def replica(kube_factory, aiohttp_client, settings: ServiceSettings = PATIENT) -> AsyncIterator[tuple]:
    """One extender replica with its own client and HTTP front."""
    kube = RecordingKube(kube_factory())
    akube = AsyncKube(kube)
    service = SchedulerService(akube, settings)
    service.start()
    assert await service.wait_synced(10)
    client = await aiohttp_client(build_app(service, manage_lifecycle=False))
    try:
        yield service, client, kube
    finally:
        await service.stop()
        akube.close()
        kube.api_client.rest_client.pool_manager.clear()


async def bind(client, pod, node) -> str:
    return (await (await client.post("/bind", json=bind_args(pod, node))).json())["Error"]


def pod_of(kube, name):
    return kube.get_pod("default", name)


def writes_naming(kube: RecordingKube, name: str) -> list[str]:
    return [v for v in kube.lock_writes if v.endswith(f",default,{name}")]


def finish_allocation(kube: Kube, node: str, name: str) -> None:
    """What the device plugin and kubelet do after a pod's Allocate."""
    kube.patch_pod_metadata("default", name, annotations={keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
    NodeLock(kube).release(node, "default", name)
    kube.patch_pod_status("default", name, {"phase": "Running"})


async def plugin_stand_in(kube: Kube, node: str, stop: asyncio.Event) -> None:
    """Finishes the allocation of whichever bound pod holds the node's lock."""
    lock = NodeLock(kube)
    while not stop.is_set():
        holder = await asyncio.to_thread(lock.holder, node)
        if holder is not None and holder.name:
            pod = await asyncio.to_thread(kube.get_pod, "default", holder.name)
            if pod["spec"].get("nodeName") == node and (pod.get("status") or {}).get("phase") == "Pending":
                await asyncio.to_thread(finish_allocation, kube, node, holder.name)
        await asyncio.sleep(0.02)


# --- cause 2: a duplicate /bind of a pod already bound -------------------------------------


async def test_duplicates_queued_behind_a_locked_node_leave_no_lock(kube_factory, aiohttp_client):
    """The issue's reproduction: node0 locked by another pod; /bind a, /bind y, /bind a;
    unlock. Every answer is success and `a` is locked exactly once."""
    kube = kube_factory()
    create_nodes(kube, ["node0"])
    pods = {n: kube.create_pod("default", dcu_pod(n, memory=1000, cores=10)) for n in ("h", "a", "y")}
    async with replica(kube_factory, aiohttp_client) as (service, client, own):
        await until(lambda: service.cache.node("node0") is not None)
        held = NodeLock(kube).take("node0", "default", "h")
        first = asyncio.ensure_future(bind(client, pods["a"], "node0"))
        await asyncio.sleep(0.1)
        second = asyncio.ensure_future(bind(client, pods["y"], "node0"))
        await asyncio.sleep(0.1)
        duplicate = asyncio.ensure_future(bind(client, pods["a"], "node0"))
        await asyncio.sleep(0.1)
        stop = asyncio.Event()
        plugin = asyncio.ensure_future(plugin_stand_in(kube_factory(), "node0", stop))
        NodeLock(kube).release_value("node0", held.value)
        answers = await asyncio.gather(first, second, duplicate)
        await until(lambda: lock_of(kube, "node0") is None)
        stop.set()
        await plugin
        assert answers == ["", "", ""]
        assert len(writes_naming(own, "a")) == 1
        assert pod_of(kube, "a")["spec"]["nodeName"] == "node0"


async def test_a_bind_of_a_pod_already_running_answers_from_the_pod_and_takes_no_lock(kube_factory, aiohttp_client):
    kube = kube_factory()
    create_nodes(kube, ["n1", "n2"])
    pod = kube.create_pod("default", dcu_pod("a"))
    async with replica(kube_factory, aiohttp_client) as (service, client, own):
        await until(lambda: service.cache.node("n2") is not None)
        await client.post("/filter", json=filter_args(pod, ["n1"]))
        assert await bind(client, pod, "n1") == ""
        finish_allocation(kube, "n1", "a")
        writes = len(own.lock_writes)
        # kube-scheduler's retry after its extender timeout, to the same node and to another
        assert await bind(client, pod, "n1") == ""
        assert "already bound to node n1" in await bind(client, pod, "n2")
        assert len(own.lock_writes) == writes
        assert lock_of(kube, "n1") is None and lock_of(kube, "n2") is None


# --- cause 3: one attempt's cleanup must not remove another attempt's lock ---------------------


async def test_a_second_replicas_bind_of_the_same_pod_keeps_the_first_attempts_lock(kube_factory, aiohttp_client):
    kube = kube_factory()
    create_nodes(kube, ["n1", "n2"])
    pod = kube.create_pod("default", dcu_pod("a", memory=60000))
    async with replica(kube_factory, aiohttp_client) as (first, client1, _own1), \
            replica(kube_factory, aiohttp_client) as (second, client2, own2):
        await until(lambda: all(s.cache.node("n2") is not None for s in (first, second)))
        await client1.post("/filter", json=filter_args(pod, ["n1"]))
        assert await bind(client1, pod, "n1") == ""
        lock = lock_of(kube, "n1")
        # the pod's allocation reached the second replica's cache, the lock too
        await until(lambda: cache_view(second) == held_per_card(kube) and second.cache.node("n1").lock_value)
        assert await bind(client2, pod, "n1") == ""
        assert "already bound to node n1" in await bind(client2, pod, "n2")
        assert lock_of(kube, "n1") == lock  # the first attempt's Allocate still needs it
        assert lock_of(kube, "n2") is None
        assert own2.lock_writes == []
        assert cache_view(second) == held_per_card(kube)


async def test_a_failed_duplicate_never_removes_the_lock_of_the_attempt_in_flight(kube_factory, aiohttp_client):
    """Replica 2 races replica 1 for the same pod before either saw the Binding: replica 2
    finds the pod's lock written by replica 1, waits, then answers from the pod."""
    kube = kube_factory()
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("a"))
    async with replica(kube_factory, aiohttp_client) as (first, _client1, _own1), \
            replica(kube_factory, aiohttp_client) as (second, client2, own2):
        await until(lambda: all(s.cache.node("n1") is not None for s in (first, second)))
        held = NodeLock(kube).take("n1", "default", "a")  # replica 1, between its lock and its Binding
        await until(lambda: second.cache.node("n1").lock_value == held.value)
        duplicate = asyncio.ensure_future(bind(client2, pod, "n1"))
        await asyncio.sleep(0.3)
        assert not duplicate.done()  # not "ours": it waits
        kube.create_binding("default", "a", "n1", annotations={keys.POD_BIND_PHASE: keys.BIND_PHASE_ALLOCATING})
        assert await duplicate == ""
        assert lock_of(kube, "n1") == held.value
        assert own2.lock_writes == []


# --- cause 4: a write whose outcome is unknown is read back -----------------------------------


async def test_a_lock_write_applied_despite_a_500_is_undone_when_the_bind_fails(kube_factory, aiohttp_client,
                                                                                api_server):
    kube = kube_factory()
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("p"))
    async with replica(kube_factory, aiohttp_client) as (service, client, own):
        await until(lambda: service.cache.node("n1") is not None)
        await client.post("/filter", json=filter_args(pod, ["n1"]))
        own.fail_bindings = 3  # every Binding attempt of this bind fails before commit
        api_server.faults.configure(post_commit_rate=1.0, post_commit_lost_share=0.0,
                                    match=lambda method, path: method == "PATCH" and "/nodes/" in path)
        error = await bind(client, pod, "n1")
        api_server.faults.clear()
        assert "binding rejected" in error
        assert lock_of(kube, "n1") is None  # no orphan held by an unbound Pending pod
        assert not pod_of(kube, "p")["spec"].get("nodeName")
        assert service.cache.placements.all() == []


async def test_a_binding_refused_by_a_busy_server_is_retried_under_the_same_lock(kube_factory, aiohttp_client):
    kube = kube_factory()
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("p"))
    async with replica(kube_factory, aiohttp_client) as (service, client, own):
        await until(lambda: service.cache.node("n1") is not None)
        await client.post("/filter", json=filter_args(pod, ["n1"]))
        own.fail_bindings = 2
        assert await bind(client, pod, "n1") == ""
        assert pod_of(kube, "p")["spec"]["nodeName"] == "n1"
        assert len(own.lock_writes) == 1 and lock_of(kube, "n1") == own.lock_writes[0]


async def test_a_lock_write_whose_answer_was_lost_counts_as_taken(kube_factory, aiohttp_client, api_server):
    kube = kube_factory()
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("p"))
    async with replica(kube_factory, aiohttp_client) as (service, client, own):
        await until(lambda: service.cache.node("n1") is not None)
        await client.post("/filter", json=filter_args(pod, ["n1"]))
        api_server.faults.configure(post_commit_rate=1.0, post_commit_lost_share=1.0,
                                    match=lambda method, path: method == "PATCH" and "/nodes/" in path)
        error = await bind(client, pod, "n1")
        api_server.faults.clear()
        assert error == ""
        assert pod_of(kube, "p")["spec"]["nodeName"] == "n1"
        assert lock_of(kube, "n1") == own.lock_writes[-1]  # the plugin's Allocate will find it


# --- cause 1: a lock whose holder no longer needs it is released by whoever sees it -----------


async def test_a_lock_left_by_a_successful_allocation_is_released_by_the_extender(kube_factory, aiohttp_client):
    kube = kube_factory()
    create_nodes(kube, ["n1", "n2"])
    pods = [kube.create_pod("default", dcu_pod(name, memory=1000, cores=10)) for name in ("ok", "running", "gone")]
    async with replica(kube_factory, aiohttp_client) as (service, client, _own):
        await until(lambda: service.cache.node("n2") is not None)
        # the plugin marks success but its lock release is lost
        assert await bind(client, pods[0], "n1") == ""
        kube.patch_pod_metadata("default", "ok", annotations={keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
        await until(lambda: lock_of(kube, "n1") is None)
        # the kubelet ran it (the plugin never got to write anything)
        assert await bind(client, pods[1], "n1") == ""
        kube.patch_pod_status("default", "running", {"phase": "Running"})
        await until(lambda: lock_of(kube, "n1") is None)
        # a lock on n2 naming a pod bound to n1
        assert await bind(client, pods[2], "n1") == ""
        NodeLock(kube).take("n2", "default", "gone")
        await until(lambda: lock_of(kube, "n2") is None)
        releases = {s.labels["reason"]: s.value for m in service.metrics.registry.collect() for s in m.samples
                    if s.name == "hami_dcu_scheduler_node_lock_releases_total"}
        assert releases["allocation-done"] == 1
        assert releases["holder-running"] == 1
        assert releases["bound-elsewhere"] == 1


async def test_the_extender_leaves_a_done_holders_lock_to_the_plugin_that_releases_it(kube_factory, aiohttp_client):
    """The device plugin releases the lock beside the pod's outcome: the extender, seeing the
    outcome first, must not race it for the same lock (a node read, often a write, per pod)."""
    kube = kube_factory()
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("ok", memory=1000, cores=10))
    async with replica(kube_factory, aiohttp_client) as (service, client, own):
        await until(lambda: service.cache.node("n1") is not None)
        assert await bind(client, pod, "n1") == ""
        own.node_reads = 0
        kube.patch_pod_metadata("default", "ok", annotations={keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
        NodeLock(kube).release("n1", "default", "ok")  # the plugin, right after
        await until(lambda: service.cache.node("n1").lock_value is None)
        await asyncio.sleep(service.settings.bind.plugin_release_grace + 0.5)
        assert own.node_reads == 0
        releases = {s.labels["reason"]: s.value for m in service.metrics.registry.collect() for s in m.samples
                    if s.name == "hami_dcu_scheduler_node_lock_releases_total"}
        assert "allocation-done" not in releases


async def test_the_sweep_frees_a_lock_left_by_a_bind_that_died_and_keeps_a_young_one(kube_factory, aiohttp_client):
    """A scheduler that crashed between its lock and its Binding: no watch event will ever
    say the lock is needless; the sweep judges locks older than the bind window."""
    from datetime import UTC, datetime, timedelta

    kube = kube_factory()
    create_nodes(kube, ["n1", "n2"])
    for name in ("crashed", "binding"):
        kube.create_pod("default", dcu_pod(name))
    settings = dcu_settings(bind=BindSettings(bind_window=timedelta(seconds=30), sweep_interval=3600))
    async with replica(kube_factory, aiohttp_client, settings) as (service, _client, _own):
        old = NodeLock(kube, clock=lambda: datetime.now(UTC) - timedelta(seconds=31)).take("n1", "default", "crashed")
        young = NodeLock(kube).take("n2", "default", "binding")
        await until(lambda: service.cache.node("n1").lock_value == old.value
                    and service.cache.node("n2").lock_value == young.value)
        assert await service.binder.janitor.sweep() == 1
        assert lock_of(kube, "n1") is None
        assert lock_of(kube, "n2") == young.value  # its bind may be about to create the Binding
        releases = {s.labels["reason"]: s.value for m in service.metrics.registry.collect() for s in m.samples
                    if s.name == "hami_dcu_scheduler_node_lock_releases_total"}
        assert releases == {"holder-unbound": 1.0}


# --- cause 5/6: assumptions never overwrite real holdings; the relist repairs drift ----------


async def test_duplicate_bind_and_stale_filter_never_move_a_real_holding(kube_factory, aiohttp_client):
    """The issue's reproduction: p Running with 60000 MiB on card S1 (HAMi's first choice of
    two idle cards); /bind p again; a stale /filter with p's pending object; then a
    60000 MiB pod must not land on S1."""
    kube = kube_factory()
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("p", memory=60000, cores=10))
    async with replica(kube_factory, aiohttp_client) as (service, client, _own):
        await until(lambda: service.cache.node("n1") is not None)
        await client.post("/filter", json=filter_args(pod, ["n1"]))
        assert await bind(client, pod, "n1") == ""
        finish_allocation(kube, "n1", "p")
        truth = held_per_card(kube)
        await until(lambda: cache_view(service) == truth)
        assert await bind(client, pod, "n1") == ""
        assert cache_view(service) == truth
        stale = await (await client.post("/filter", json=filter_args(pod, ["n1"]))).json()
        assert stale["NodeNames"] == [] and "already bound to node n1" in stale["FailedNodes"]["n1"]
        assert cache_view(service) == truth
        pinned = kube.create_pod("default", dcu_pod("q", memory=60000, cores=10,
                                                    annotations={keys.USE_DCU_UUID: "DCU-n1-S1"}))
        answer = await (await client.post("/filter", json=filter_args(pinned, ["n1"]))).json()
        assert answer["NodeNames"] == []  # S1 is full: p's 60000 MiB stayed where they are
        assert "memory" in answer["FailedNodes"]["n1"]


async def test_relist_repairs_drift_and_counts_it(kube_factory, aiohttp_client):
    kube = kube_factory()
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("p", memory=30000, cores=10))
    async with replica(kube_factory, aiohttp_client) as (service, client, _own):
        await until(lambda: service.cache.node("n1") is not None)
        await client.post("/filter", json=filter_args(pod, ["n1"]))
        assert await bind(client, pod, "n1") == ""
        entry = service.cache.node("n1")
        uid = pod["metadata"]["uid"]
        await until(lambda: uid in entry.holdings)  # the watch showed the pod's own allocation
        truth = held_per_card(kube)
        entry.holdings[uid].held = {"DCU-n1-S0": entry.holdings[uid].held["DCU-n1-S1"]}  # a lost update
        entry.holdings["ghost"] = entry.holdings[uid].__class__("default/ghost", {})  # a pod never deleted
        service.cache.replace_pods(kube.list_pods().items)
        assert cache_view(service) == truth
        assert "ghost" not in entry.holdings
        drift = {s.labels["kind"]: s.value for m in service.metrics.registry.collect() for s in m.samples
                 if s.name == "hami_dcu_cache_drift_total"}
        assert drift == {"holding": 1.0, "orphan-holding": 1.0}


async def test_a_superseded_bind_waiting_on_a_locked_node_gives_up_its_cards(kube_factory, aiohttp_client):
    """kube-scheduler gave up on a bind (its timeout) and filtered the pod again: the old
    bind, still queued behind a locked node, must not bind it nor keep its cards."""
    kube = kube_factory()
    create_nodes(kube, ["n1", "n2"])
    pod = kube.create_pod("default", dcu_pod("a", memory=60000))
    blocker = kube.create_pod("default", dcu_pod("h", memory=1000, cores=10))
    async with replica(kube_factory, aiohttp_client) as (service, client, own):
        await until(lambda: service.cache.node("n2") is not None)
        held = NodeLock(kube).take("n1", "default", blocker["metadata"]["name"])
        await until(lambda: service.cache.node("n1").lock_value == held.value)
        await client.post("/filter", json=filter_args(pod, ["n1"]))
        stale = asyncio.ensure_future(bind(client, pod, "n1"))
        await asyncio.sleep(0.2)
        retry = await (await client.post("/filter", json=filter_args(pod, ["n2"]))).json()
        assert retry["NodeNames"] == ["n2"]
        assert "superseded" in await stale
        assert writes_naming(own, "a") == []
        assert await bind(client, pod, "n2") == ""
        NodeLock(kube).release_value("n1", held.value)
        assert pod_of(kube, "a")["spec"]["nodeName"] == "n2"
        await until(lambda: cache_view(service) == held_per_card(kube))

"""Property: two extender replicas against one API server, driven through random sequences of
filters, binds (started and left running, so they interleave), duplicate binds to the same
or another replica, stale filters (a pod's old pending object), the device plugin finishing
a node's Allocate, pod deletions and replica restarts. After every step no card is over
capacity and every bind that answered success left its pod bound to that node; once
everything settles, no lock is left and every replica's cache agrees with the API."""

import asyncio
import itertools
import re
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from scheduler_helpers import cache_view, dcu_pod, dcu_settings, held_per_card, node_object, over_capacity

from hami_dcu.common.io.kube import AsyncKube, Kube, NotFoundError
from hami_dcu.common.io.nodelock import NodeLock
from hami_dcu.common.protocol import keys
from hami_dcu.scheduler.bind import BindSettings
from hami_dcu.scheduler.extender import BindArgs, FilterArgs
from hami_dcu.scheduler.service import SchedulerService

PODS = 4
NODES = 2
SETTINGS = dcu_settings(bind=BindSettings(lock_wait=1.5, settle_wait=0.3, sweep_interval=0.5))
EXAMPLES = itertools.count()

replica = st.integers(0, 1)
pod = st.integers(0, PODS - 1)
node = st.integers(0, NODES - 1)
step = st.one_of(
    st.tuples(st.just("filter"), replica, pod, st.booleans()),  # True: the pod's stale pending object
    st.tuples(st.just("bind"), replica, pod, node),
    st.tuples(st.just("filter+bind"), replica, pod),
    st.tuples(st.just("allocate"), node),
    st.tuples(st.just("delete"), pod),
    st.tuples(st.just("restart"), replica),
    st.tuples(st.just("settle")),
)


class World:
    """One example: its own nodes and pods (unique names), two replicas, binds in flight."""

    def __init__(self, kube_factory: Any, example: int) -> None:
        self.kube_factory = kube_factory
        self.kube: Kube = kube_factory()
        self.nodes = [f"x{example}n{i}" for i in range(NODES)]
        self.names = [f"x{example}p{i}" for i in range(PODS)]
        self.created: dict[str, dict] = {}  # the pending object as created (what a stale filter sends)
        self.replicas: list[SchedulerService] = []
        self.retired: list[SchedulerService] = []
        self.clients: list[AsyncKube] = []
        self.in_flight: list[tuple[str, str, asyncio.Task[dict]]] = []  # (pod, node, /bind)
        self.answered: list[tuple[str, str]] = []  # binds that answered success

    async def start(self) -> None:
        for name in self.nodes:
            self.kube.create_node(node_object(name, count=1, memory=8000))
        for name in self.names:
            self.created[name] = self.kube.create_pod("default", dcu_pod(name, memory=3000, cores=30))
        self.replicas = [await self.new_replica(), await self.new_replica()]

    async def new_replica(self) -> SchedulerService:
        client = AsyncKube(self.kube_factory())
        self.clients.append(client)
        service = SchedulerService(client, SETTINGS)
        service.start()
        assert await service.wait_synced(10)
        await self.caught_up(service)
        return service

    async def caught_up(self, service: SchedulerService) -> None:
        for _ in range(500):
            if all(service.cache.node(n) is not None and service.cache.node(n).present for n in self.nodes):
                return
            await asyncio.sleep(0.01)
        raise AssertionError("replica never saw the nodes")

    def current(self, name: str) -> dict | None:
        try:
            return self.kube.get_pod("default", name)
        except NotFoundError:
            return None

    async def run(self, op: tuple) -> None:
        kind = op[0]
        if kind == "filter":
            _, r, p, stale = op
            obj = self.created[self.names[p]] if stale else self.current(self.names[p])
            if obj is not None:
                self.filter(r, obj)
        elif kind == "bind":
            _, r, p, n = op
            self.start_bind(r, self.names[p], self.nodes[n])
        elif kind == "filter+bind":
            _, r, p = op
            obj = self.current(self.names[p])
            chosen = self.filter(r, obj) if obj is not None else None
            if chosen:
                self.start_bind(r, self.names[p], chosen)
        elif kind == "allocate":
            await asyncio.to_thread(finish_allocation, self.kube, self.nodes[op[1]])
        elif kind == "delete":
            if self.current(self.names[op[1]]) is not None:
                self.kube.delete_pod("default", self.names[op[1]])
        elif kind == "restart":
            old = self.replicas[op[1]]
            self.retired.append(old)  # its binds in flight finish (or give up) on their own
            self.replicas[op[1]] = await self.new_replica()
        else:
            await self.settle()
        await asyncio.sleep(0.02)  # let the binds in flight and the watches move
        self.check_always()

    def filter(self, r: int, obj: dict) -> str | None:
        names = self.nodes
        answer = self.replicas[r].filter_pod(FilterArgs(pod=obj, node_names=names, nodes=None))
        return (answer.get("NodeNames") or [None])[0]

    def start_bind(self, r: int, name: str, node_name: str) -> None:
        uid = self.created[name]["metadata"]["uid"]
        args = BindArgs(pod_name=name, namespace="default", uid=uid, node=node_name)
        task = asyncio.ensure_future(self.replicas[r].bind_pod(args))
        self.in_flight.append((name, node_name, task))

    async def settle(self) -> None:
        for name, node_name, task in self.in_flight:
            error = (await task)["Error"]
            event("bind answered success" if not error else "bind refused: " + re.sub(r"x\d+[np]\d", "X", error)[:40])
            if not error:
                self.answered.append((name, node_name))
        self.in_flight = []

    def check_always(self) -> None:
        assert over_capacity(self.kube) == []
        for name, node_name in self.answered:
            obj = self.current(name)
            assert obj is None or obj["spec"].get("nodeName") == node_name, (name, node_name)

    async def check_quiet(self) -> None:
        await self.settle()
        for _ in range(3):  # allocations may have been waiting for a lock
            for node_name in self.nodes:
                await asyncio.to_thread(finish_allocation, self.kube, node_name)
        self.check_always()
        for _ in range(300):
            if not any(locked(self.kube, n) for n in self.nodes):
                break
            await asyncio.sleep(0.02)
        assert [locked(self.kube, n) for n in self.nodes] == [None] * NODES
        truth = {card: held for card, held in held_per_card(self.kube).items()
                 if any(card.startswith(f"DCU-{n}-") for n in self.nodes)}
        for service in self.replicas:
            service.cache.placements.expire(service.monotonic() + service.settings.assume_ttl + 1)
            for _ in range(300):
                if self.view(service) == truth:
                    break
                await asyncio.sleep(0.02)
            assert self.view(service) == truth

    def view(self, service: SchedulerService) -> dict:
        return {card: held for card, held in cache_view(service).items()
                if any(card.startswith(f"DCU-{n}-") for n in self.nodes)}

    async def stop(self) -> None:
        for task in [t for _, _, t in self.in_flight]:
            task.cancel()
        for service in self.replicas + self.retired:
            await service.stop()
        for client in self.clients:
            client.close()
        self.kube.api_client.rest_client.pool_manager.clear()


def locked(kube: Kube, node_name: str) -> str | None:
    return (kube.get_node(node_name)["metadata"].get("annotations") or {}).get(keys.NODE_LOCK)


def finish_allocation(kube: Kube, node_name: str) -> None:
    """The device plugin and kubelet for whichever bound pod holds the node's lock."""
    holder = NodeLock(kube).holder(node_name)
    if holder is None or holder.name is None:
        return
    try:
        obj = kube.get_pod(holder.namespace or "", holder.name)
    except NotFoundError:
        return
    if obj["spec"].get("nodeName") != node_name or obj["status"].get("phase") != "Pending":
        return
    kube.patch_pod_metadata("default", holder.name, annotations={keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
    NodeLock(kube).release(node_name, "default", holder.name)
    kube.patch_pod_status("default", holder.name, {"phase": "Running"})


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=3, max_size=10))
def test_two_replicas_under_random_interleavings_keep_every_invariant(kube_factory, steps):
    async def scenario() -> None:
        world = World(kube_factory, next(EXAMPLES))
        try:
            await world.start()
            for op in steps:
                await world.run(op)
            await world.check_quiet()
        finally:
            await world.stop()

    asyncio.run(scenario())

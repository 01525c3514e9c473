"""The informer lists nodes and pods in pages, keeping only the fields the cache reads: the
cache it builds is the one a single list of whole objects builds."""

from __future__ import annotations

import asyncio

from scheduler_helpers import dcu_pod, node_object

from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, encode_pod_devices
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.informer import Informer
from hami_dcu.scheduler.slim import slim_node, slim_pod

DCU = keys.DCU_NAMING  # the naming set these tests speak


def bound_pod(name: str, node: str, card: str) -> dict:
    pod = dcu_pod(name)
    allocated = encode_pod_devices([[ContainerDevice(card, "DCU", 2000, 10)]])
    pod["metadata"]["annotations"] = {DCU.pod_devices_allocated: allocated, keys.POD_NODE: node,
                                      keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS, "other.io/big": "x" * 1000}
    pod["metadata"]["labels"] = {"app": "a"}
    pod["metadata"]["managedFields"] = [{"manager": "m", "fieldsV1": {"f:spec": {}}}]
    pod["spec"]["nodeName"] = node
    pod["spec"]["initContainers"] = [{"name": "init", "image": "x"}]
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


def view(cache: ClusterCache) -> dict:
    return {
        "nodes": {name: (e.present, e.cards, [(u.slots, u.memory, u.cores) for u in e.used], e.degraded,
                         e.handshake_fresh_until, e.dcu_allocatable, e.lock_value, sorted(e.holdings))
                  for name, e in ((e.name, e) for e in cache.nodes())},
        "pods": {uid: (r.namespace, r.name, r.node, r.allocated, r.order, r.state)
                 for uid, r in ((r.uid, r) for r in cache.pods.records())},
    }


async def test_paged_slim_lists_build_the_cache_a_whole_list_builds(kube):
    for n in range(3):
        node = node_object(f"n{n}", extra={keys.NODE_LOCK: "2026-01-01T00:00:00Z,default,p0"} if n == 0 else None)
        node["status"] = {"allocatable": {DCU.resources.count: "8"}, "images": [{"names": ["i"]}]}
        kube.create_node(node)
        for p in range(3):
            kube.create_pod("default", bound_pod(f"p{n}{p}", f"n{n}", f"DCU-n{n}-S{p % 2}"))
    kube.create_pod("default", dcu_pod("pending"))
    paged, whole = ClusterCache(naming=DCU_NAMING), ClusterCache(naming=DCU_NAMING)
    akube = AsyncKube(kube)
    informer = Informer(akube, paged, page_size=2)
    try:
        task = asyncio.ensure_future(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 10)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        akube.close()
    now = informer.wall_clock()
    whole.replace_nodes(kube.list_nodes().items, now)
    whole.replace_pods(kube.list_pods().items)
    assert len(paged.pods.records()) == 9
    # the same wall clock for both caches' handshake deadlines
    for cache in (paged, whole):
        for entry in cache.nodes():
            entry.handshake_fresh_until = round(entry.handshake_fresh_until)
    assert view(paged) == view(whole)


def test_slim_objects_keep_what_the_cache_reads_and_nothing_else():
    pod = bound_pod("p", "n1", "DCU-n1-S0")
    pod["metadata"].update(uid="u1", resourceVersion="7", deletionTimestamp="2026-01-01T00:00:00Z")
    ours = {k: v for k, v in pod["metadata"]["annotations"].items() if k.startswith("hami.io/")}
    assert len(ours) == 3
    assert slim_pod(pod) == {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "resourceVersion": "7",
                     "deletionTimestamp": "2026-01-01T00:00:00Z", "annotations": ours},
        "spec": {"nodeName": "n1", "initContainers": [{"name": "init"}]},
        "status": {"phase": "Running"},
    }
    node = node_object("n1")
    node["status"] = {"allocatable": {"cpu": "8"}, "images": [{"names": ["i"]}], "conditions": []}
    assert slim_node(node) == {"metadata": {"name": "n1", "resourceVersion": "1",
                                            "annotations": node["metadata"]["annotations"]},
                               "status": {"allocatable": {"cpu": "8"}}}
    assert slim_pod({}) == {"metadata": {}, "spec": {}, "status": {}}

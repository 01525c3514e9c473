"""The informer hands every pod it lists or watches, whole, to `on_pod` before trimming it:
DRA mode's webhook creates there the templates a stored pod waits for (issue 35, finding 5)."""

from __future__ import annotations

import asyncio

from scheduler_helpers import dcu_pod
from test_scheduler_informer_paging import bound_pod

from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.informer import Informer

MARK = "dcu.hami.io/claim-templates"


async def test_listed_and_watched_pods_reach_the_hook_whole(kube):
    for name in ("a", "b", "c"):
        pod = dcu_pod(name)
        pod["metadata"]["annotations"] = {MARK: name}
        kube.create_pod("default", pod)
    seen: list[dict] = []
    akube = AsyncKube(kube)
    informer = Informer(akube, ClusterCache(naming=DCU_NAMING), page_size=2)
    informer.on_pod = seen.append
    try:
        task = asyncio.ensure_future(informer.run())
        await asyncio.wait_for(informer.synced.wait(), 10)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        akube.close()
    assert sorted(p["metadata"]["annotations"][MARK] for p in seen) == ["a", "b", "c"]
    assert all("containers" in p["spec"] for p in seen)  # whole, not trimmed
    seen.clear()
    added = dcu_pod("d")
    informer._take("pods", {"type": "ADDED", "object": added})
    informer._take("pods", {"type": "DELETED", "object": dcu_pod("a")})
    assert seen == [added]


def test_a_failing_hook_does_not_stop_the_cache(kube):
    informer = Informer(AsyncKube(kube), ClusterCache(naming=DCU_NAMING))

    def broken(_pod: dict) -> None:
        raise RuntimeError("bug")

    informer.on_pod = broken
    pod = bound_pod("e", "n1", "DCU-n1-S0")
    pod["metadata"]["uid"] = "uid-e"
    informer._take("pods", {"type": "ADDED", "object": pod})
    assert "uid-e" in informer.cache.pods

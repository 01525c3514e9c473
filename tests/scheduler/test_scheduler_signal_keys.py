"""The cache's wake-up is keyed by node: a bind waiting on one node's lock wakes for that
node's events (its node object, the pods bound to it) and for relists, not for every event in
the cluster. In a burst, hundreds of pods are created and bound elsewhere each second; every
one of them woke every waiting bind, which re-judged its node's lock for nothing (issue 22:
28 wake-ups per bind at 1,000 nodes, a fifth of the extender's time)."""

import asyncio

from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.informer import Informer
from hami_dcu.scheduler.signal import CacheSignal


async def _woken(waiter: asyncio.Future, within: float = 0.2) -> bool:
    done, _ = await asyncio.wait({waiter}, timeout=within)
    return bool(done)


async def test_a_keyed_waiter_wakes_for_its_key_only():
    signal = CacheSignal()
    waiter = asyncio.ensure_future(signal.wait(5, "node-a"))
    await asyncio.sleep(0.01)
    signal.notify("node-b")
    signal.notify()
    assert not await _woken(waiter)
    signal.notify("node-a")
    assert await _woken(waiter)


async def test_a_relist_wakes_every_waiter():
    signal = CacheSignal()
    keyed = asyncio.ensure_future(signal.wait(5, "node-a"))
    plain = asyncio.ensure_future(signal.wait(5))
    await asyncio.sleep(0.01)
    signal.notify_all()
    assert await _woken(keyed) and await _woken(plain)


async def test_an_unkeyed_waiter_wakes_for_any_change():
    signal = CacheSignal()
    for key in ("node-a", None):
        waiter = asyncio.ensure_future(signal.wait(5))
        await asyncio.sleep(0.01)
        signal.notify(key)
        assert await _woken(waiter)


async def test_a_keyed_waiter_still_times_out():
    signal = CacheSignal()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await signal.wait(0.05, "node-a")
    assert loop.time() - started >= 0.04


class _Recorder(CacheSignal):
    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str | None] = []

    def notify(self, key: str | None = None) -> None:
        self.keys.append(key)
        super().notify(key)


def test_the_informer_names_the_node_an_event_concerns():
    signal = _Recorder()
    informer = Informer(None, ClusterCache(naming=DCU_NAMING), changed=signal)  # type: ignore[arg-type]
    informer._notify("nodes", {"type": "MODIFIED", "object": {"metadata": {"name": "n1"}}})
    informer._notify("pods", {"type": "MODIFIED", "object": {"metadata": {"name": "p"}, "spec": {"nodeName": "n2"}}})
    informer._notify("pods", {"type": "ADDED", "object": {"metadata": {"name": "q"}, "spec": {}}})
    informer._notify("resourcequotas", {"type": "ADDED", "object": {"metadata": {"name": "rq"}}})
    assert signal.keys == ["n1", "n2", None, None]

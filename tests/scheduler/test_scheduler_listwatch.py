"""The list-then-watch loop both informers run (scheduler/listwatch.py), on its own: where each
watch starts from, when it lists again, how it waits after a failure and that cancelling stops it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from hami_dcu.common.io.kube import GoneError, ObjectList
from hami_dcu.scheduler.listwatch import list_and_watch, list_pages


def event(rv: str | None, kind: str = "MODIFIED") -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"resourceVersion": rv} if rv else {}}}


class ScriptedKube:
    """Each watch plays the next step of the script (a list of events, then the stream ends; or
    an exception); with the script played out, a watch blocks until cancelled."""

    def __init__(self, script: list[Any], stream_seconds: float = 0.0) -> None:
        self.script = script
        self.stream_seconds = stream_seconds  # how long each played stream stays open
        self.watches: list[tuple[str, str, int]] = []  # (path, resourceVersion, timeout)
        self.played_out = asyncio.Event()

    async def watch(self, path: str, resource_version: str, timeout_seconds: int = 300):
        self.watches.append((path, resource_version, timeout_seconds))
        if not self.script:
            self.played_out.set()
            await asyncio.Event().wait()
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        for item in step:
            yield item
        await asyncio.sleep(self.stream_seconds)


class Lister:
    """A relist that answers resourceVersions "L1", "L2", ... or raises the errors it is given first."""

    def __init__(self, failures: list[Exception] | None = None) -> None:
        self.failures = list(failures or [])
        self.count = 0

    async def __call__(self) -> str:
        if self.failures:
            raise self.failures.pop(0)
        self.count += 1
        return f"L{self.count}"


async def run_until_played_out(kube: ScriptedKube, relist: Lister, *, resync: float = 300.0,
                               sleeps: list[float] | None = None) -> list[dict[str, Any]]:
    taken: list[dict[str, Any]] = []

    def take(item: dict[str, Any]) -> str | None:
        taken.append(item)
        return (item.get("object") or {}).get("metadata", {}).get("resourceVersion")

    async def sleep(seconds: float) -> None:
        if sleeps is not None:
            sleeps.append(seconds)

    task = asyncio.ensure_future(list_and_watch(kube, "things", "/api/v1/things", relist, take,  # type: ignore[arg-type]
                                                resync=resync, watch_timeout=240, sleep=sleep))
    try:
        await asyncio.wait_for(kube.played_out.wait(), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return taken


async def test_a_watch_that_ends_resumes_from_the_last_version_an_event_carried():
    kube = ScriptedKube([[event("5"), event(None), event("7", "BOOKMARK")], [], [event("9")]])
    relist = Lister()
    taken = await run_until_played_out(kube, relist)
    # an event without a version keeps the one before it; an empty stream keeps its start
    assert [rv for _, rv, _ in kube.watches] == ["L1", "7", "7", "9"]
    assert relist.count == 1 and len(taken) == 4


async def test_410_gone_lists_again_and_watches_from_the_new_list():
    kube = ScriptedKube([[event("5")], GoneError(410, "Gone", "too old"), [event("12")]])
    relist = Lister()
    sleeps: list[float] = []
    await run_until_played_out(kube, relist, sleeps=sleeps)
    assert [rv for _, rv, _ in kube.watches] == ["L1", "5", "L2", "12"]
    assert relist.count == 2 and sleeps == []  # Gone is expected: no backoff


async def test_failures_back_off_doubling_to_30s_and_a_good_list_starts_over():
    kube = ScriptedKube([RuntimeError("connection reset"), []])
    relist = Lister([OSError("refused")] * 6)
    sleeps: list[float] = []
    await run_until_played_out(kube, relist, sleeps=sleeps)
    # six failed lists, a list, a failed watch (backoff from 1 again), a list, its watches
    assert sleeps == [1, 2, 4, 8, 16, 30, 1]
    assert relist.count == 2
    assert [rv for _, rv, _ in kube.watches] == ["L1", "L2", "L2"]


async def test_every_resync_seconds_it_lists_again():
    kube = ScriptedKube([[] for _ in range(3)], stream_seconds=0.05)
    relist = Lister()
    await run_until_played_out(kube, relist, resync=0.01)
    # each stream outlives the resync period: a list before every watch; its timeout never below 1 s
    assert [rv for _, rv, _ in kube.watches] == ["L1", "L2", "L3", "L4"]
    assert {timeout for _, _, timeout in kube.watches} == {1}


@pytest.mark.parametrize("where", ["watch", "backoff"])
async def test_cancelling_stops_it_wherever_it_waits(where: str):
    kube = ScriptedKube([] if where == "watch" else [RuntimeError("down")])
    relist = Lister()
    backoff_started = asyncio.Event()

    async def slow_sleep(seconds: float) -> None:
        backoff_started.set()
        await asyncio.sleep(3600)

    task = asyncio.ensure_future(list_and_watch(kube, "things", "/api/v1/things", relist,  # type: ignore[arg-type]
                                                lambda item: None, resync=300.0, watch_timeout=240,
                                                sleep=slow_sleep))
    await asyncio.wait_for((kube.played_out if where == "watch" else backoff_started).wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert relist.count == 1


async def test_list_pages_follows_continue_tokens_and_keeps_the_last_pages_version():
    class PagedKube:
        def __init__(self) -> None:
            self.requests: list[tuple[str, int, str]] = []

        async def list_page(self, path: str, limit: int, token: str, keep: Any) -> ObjectList:
            self.requests.append((path, limit, token))
            pages = {"": (["a", "b"], "t1", "10"), "t1": (["c"], "", "11")}
            items, next_token, rv = pages[token]
            return ObjectList([keep({"name": i}) for i in items], rv, next_token)

    kube = PagedKube()
    listing = await list_pages(kube, "/api/v1/things", 2, lambda obj: {"kept": obj["name"]})  # type: ignore[arg-type]
    assert listing == ObjectList([{"kept": "a"}, {"kept": "b"}, {"kept": "c"}], "11")
    assert kube.requests == [("/api/v1/things", 2, ""), ("/api/v1/things", 2, "t1")]

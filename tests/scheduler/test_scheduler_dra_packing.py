"""DRA mode's /prioritize: nodes ranked fullest first from the driver's ResourceSlices and the
allocated claims the extender watches, so a burst packs onto as few nodes as fit."""

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scheduler_helpers import dcu_settings

from hami_dcu.common.io.kube import GoneError, ObjectList
from hami_dcu.common.protocol.dra import names
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.drainformer import DraInformer, slim_claim
from hami_dcu.scheduler.drausage import DraUsage, claim_consumption, slice_devices
from hami_dcu.scheduler.extender import FilterArgs
from hami_dcu.scheduler.packing import pack
from hami_dcu.scheduler.service import SchedulerService

GIB = 1024**3


def rslice(node: str, cards: int = 2, cores: int = 120, memory: int = 64 * GIB, driver: str = names.DRIVER) -> dict:
    devices = [{"name": f"hcu-{node}-{i}", "capacity": {"cores": {"value": str(cores)},
                                                        "memory": {"value": str(memory)}, "slices": {"value": "4"}}}
               for i in range(cards)]
    return {"metadata": {"name": f"{node}-slice", "resourceVersion": "1"},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node}, "devices": devices}}


def rclaim(uid: str, node: str, card: int = 0, cores: str | None = "30", memory: str | None = "16Gi",
           admin: bool = False) -> dict:
    result = {"request": "dcu", "driver": names.DRIVER, "pool": node, "device": f"hcu-{node}-{card}"}
    if cores or memory:
        result["consumedCapacity"] = {k: v for k, v in (("cores", cores), ("memory", memory)) if v}
    if admin:
        result["adminAccess"] = True
    return {"metadata": {"uid": uid, "resourceVersion": "1"},
            "status": {"allocation": {"devices": {"results": [result]}}}}


# --- the pure parts --------------------------------------------------------------------------


def test_fullness_is_the_mean_of_cores_and_memory_held_over_the_nodes_cards():
    usage = DraUsage()
    usage.replace_slices([rslice("a"), rslice("b"), rslice("other", driver="gpu.example.com")])
    usage.replace_claims([rclaim("1", "a"), rclaim("2", "a", card=1, cores=None, memory=None),
                          rclaim("3", "b", admin=True), rclaim("4", "ghost")])
    # a: cores (30 + 120) / 240, memory (16 + 64) / 128 GiB; b: adminAccess holds nothing.
    assert usage.fullness() == {"a": pytest.approx((150 / 240 + 80 / 128) / 2), "b": 0.0}
    usage.delete_claim(rclaim("2", "a"))
    assert usage.fullness()["a"] == pytest.approx((30 / 240 + 16 / 128) / 2)
    usage.delete_slice(rslice("a"))
    assert set(usage.fullness()) == {"b"}


def _fullness_from_scratch(slices: list[dict], claims: list[dict]) -> dict[str, float]:
    """The oracle: every node's fullness computed from the whole state at once."""
    devices = {}
    for obj in slices:
        devices.update(slice_devices(obj))
    totals: dict[str, list[int]] = {}
    for device in devices.values():
        t = totals.setdefault(device.node, [0, 0, 0, 0])
        t[0] += device.capacity.cores
        t[1] += device.capacity.memory
    for claim in claims:
        for held in claim_consumption(claim):
            device = devices.get(held.key)
            if device is not None:
                t, cap = totals[device.node], device.capacity
                t[2] += min(cap.cores, cap.cores if held.cores is None else held.cores)
                t[3] += min(cap.memory, cap.memory if held.memory is None else held.memory)
    return {node: min(1.0, (t[2] / t[0] + t[3] / t[1]) / 2) for node, t in totals.items()}


_NODES = ("a", "b", "c")
_OPS = st.one_of(
    st.tuples(st.just("slice"), st.sampled_from(_NODES), st.integers(0, 2), st.sampled_from([60, 120])),
    st.tuples(st.just("unslice"), st.sampled_from(_NODES)),
    st.tuples(st.just("claim"), st.sampled_from("123456"), st.sampled_from(_NODES), st.integers(0, 1),
              st.sampled_from([None, "30", "200"])),
    st.tuples(st.just("unclaim"), st.sampled_from("123456")),
)


@given(st.lists(st.tuples(_OPS, st.booleans()), max_size=40))
def test_fullness_kept_current_object_by_object_is_what_the_whole_state_gives(ops):
    # Read between changes or not (a read clears what is out of date), the answer is always
    # the one computed from everything at once.
    usage, slices, claims = DraUsage(), {}, {}
    for op, read in ops:
        if op[0] == "slice":
            slices[op[1]] = rslice(op[1], cards=op[2], cores=op[3])
            usage.apply_slice(slices[op[1]])
        elif op[0] == "unslice" and op[1] in slices:
            usage.delete_slice(slices.pop(op[1]))
        elif op[0] == "claim":
            claims[op[1]] = rclaim(op[1], op[2], card=op[3], cores=op[4], memory=op[4] and "16Gi")
            usage.apply_claim(claims[op[1]])
        elif op[0] == "unclaim" and op[1] in claims:
            usage.delete_claim(claims.pop(op[1]))
        if read:
            assert usage.fullness() == _fullness_from_scratch(list(slices.values()), list(claims.values()))
    assert usage.fullness() == _fullness_from_scratch(list(slices.values()), list(claims.values()))
    usage.replace_claims([])
    assert usage.fullness() == _fullness_from_scratch(list(slices.values()), [])
    usage.replace_slices([])
    assert usage.fullness() == {}


def test_unreadable_objects_are_skipped_not_raised():
    assert slice_devices({"spec": "x"}) == {} and slice_devices({}) == {}
    broken = rslice("a")
    broken["spec"]["devices"] += [{"name": "no-capacity"}, "junk", {"name": "n", "capacity": {"cores": "lots"}}]
    assert len(slice_devices(broken)) == 2
    assert claim_consumption({"status": {"allocation": {"devices": {"results": ["x", {"driver": names.DRIVER}]}}}}) \
        == []
    assert claim_consumption({"status": None}) == []


def test_pack_ranks_fullest_first_and_breaks_ties_by_name():
    scores = pack(["c", "b", "a", "d"], {"a": 0.0, "b": 0.5, "c": 0.0})
    assert {s["Host"]: s["Score"] for s in scores} == {"b": 10, "a": 9, "c": 8, "d": 7}
    assert [s["Host"] for s in scores] == ["c", "b", "a", "d"]  # in the order asked
    many = pack([f"n{i:02}" for i in range(15)], {"n00": 0.1})
    assert min(s["Score"] for s in many) == 0
    assert pack(["a", "b"], {}) == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]


# --- the watch -------------------------------------------------------------------------------


class FakeApi:
    """list_page and watch of the two resources, with scripted watch streams."""

    def __init__(self, slices: list[dict], claims: list[dict], templates: list[dict] | None = None) -> None:
        self.lists = {"resourceslices": slices, "resourceclaims": claims, "resourceclaimtemplates": templates or []}
        self.streams: dict[str, list[list[dict] | Exception]] = {
            "resourceslices": [], "resourceclaims": [], "resourceclaimtemplates": []}
        self.listed: list[str] = []

    async def list_page(self, path, limit, continue_token="", keep=None):
        resource = path.rsplit("/", 1)[1]
        self.listed.append(resource)
        return ObjectList([keep(o) if keep else o for o in self.lists[resource]], "10")

    async def watch(self, path, resource_version, timeout_seconds=300):
        resource = path.rsplit("/", 1)[1]
        script = self.streams[resource]
        step = script.pop(0) if script else []
        if isinstance(step, Exception):
            raise step
        for event in step:
            yield event
        await asyncio.sleep(0.01 if script else 3600)


async def test_the_informer_lists_then_follows_the_watch_and_relists_on_gone():
    api = FakeApi([rslice("a"), rslice("b")], [])
    api.streams["resourceclaims"] = [[{"type": "ADDED", "object": rclaim("1", "b")}],
                                     GoneError(410, "Gone", "too old"),
                                     [{"type": "MODIFIED", "object": rclaim("2", "a", cores="120", memory="64Gi")}]]
    usage = DraUsage()
    informer = DraInformer(api, usage)  # type: ignore[arg-type]
    task = asyncio.ensure_future(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 5)
        for _ in range(200):
            if api.listed.count("resourceclaims") == 2 and "a" in usage.fullness() and usage.fullness()["a"] > 0:
                break
            await asyncio.sleep(0.01)
        # the relist after 410 found no claims; the watch after it brought claim 2 on a
        assert api.listed.count("resourceclaims") == 2
        assert usage.fullness()["a"] == pytest.approx(0.5) and usage.fullness()["b"] == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def rtemplate(name: str, namespace: str = "team", cores: str = "30") -> dict:
    return {"metadata": {"name": name, "namespace": namespace, "labels": {names.OWNER_LABEL: names.OWNER},
                         "uid": "u", "managedFields": [{"manager": "m"}]},
            "spec": {"spec": {"devices": {"requests": [{"name": "dcu", "exactly": {
                "deviceClassName": names.DEVICE_CLASS, "capacity": {"requests": {"cores": cores}}}}]}}}}


async def test_the_informer_shows_templates_as_the_watch_last_did():
    api = FakeApi([], [], [rtemplate("t1")])
    api.streams["resourceclaimtemplates"] = [[
        {"type": "ADDED", "object": rtemplate("t2", cores="60")},
        {"type": "DELETED", "object": rtemplate("t1")},
        {"type": "MODIFIED", "object": rtemplate("t2", cores="90")},
    ]]
    informer = DraInformer(api, DraUsage())  # type: ignore[arg-type]
    assert informer.template("team", "t1") is None  # not listed yet: the caller reads
    task = asyncio.ensure_future(informer.run())
    try:
        for _ in range(300):
            if informer.template("team", "t1") is None and informer.template("team", "t2") is not None:
                break
            await asyncio.sleep(0.01)
        shown = informer.template("team", "t2")
        assert shown is not None and informer.template("team", "t1") is None
        assert informer.template("other", "t2") is None
        assert shown["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["cores"] == "90"
        # kept: what the trust check reads (labels, spec), not the rest of the object
        assert shown["metadata"]["labels"] == {names.OWNER_LABEL: names.OWNER}
        assert "managedFields" not in shown["metadata"]
        assert informer.synced.is_set()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_the_informer_keeps_each_slice_only_as_its_digest_and_versions_every_change():
    """Issue 40, item 6: the webhook in the extender's process reads the card sizes from this
    watch, kept per slice as what `slice_digest` returns (never the slice), instead of listing
    every slice itself."""
    api = FakeApi([rslice("a"), rslice("b")], [])
    informer = DraInformer(api, DraUsage())  # type: ignore[arg-type]
    informer.slice_digest = lambda obj: (obj["spec"]["nodeName"], len(obj["spec"]["devices"]))
    assert informer.slice_digests() is None  # not listed yet: the webhook lists for itself
    path = f"{names.RESOURCE_API}/resourceslices"

    def shown() -> tuple[int, list]:
        found = informer.slice_digests()
        assert found is not None
        return found[0], sorted(found[1])  # type: ignore[type-var]

    await informer._list("resourceslices", path)
    versions = [shown()[0]]
    assert shown()[1] == [("a", 2), ("b", 2)]
    for kind, obj, expected in [("MODIFIED", rslice("b", cards=4), [("a", 2), ("b", 4)]),
                                ("ADDED", rslice("c"), [("a", 2), ("b", 4), ("c", 2)]),
                                ("DELETED", rslice("a"), [("b", 4), ("c", 2)])]:
        informer._apply("resourceslices", {"type": kind, "object": obj})
        versions.append(shown()[0])
        assert shown()[1] == expected
    informer._apply("resourceslices", {"type": "DELETED", "object": rslice("gone")})  # never shown: no change
    assert shown()[0] == versions[-1]
    assert versions == sorted(set(versions))  # a new version for every change
    api.lists["resourceslices"] = [rslice("d")]
    await informer._list("resourceslices", path)  # a relist replaces them all
    assert shown()[0] > versions[-1] and shown()[1] == [("d", 2)]


async def test_without_a_digest_the_informer_keeps_nothing_per_slice():
    api = FakeApi([rslice("a")], [])
    informer = DraInformer(api, DraUsage())  # type: ignore[arg-type]
    task = asyncio.ensure_future(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 5)
        shown = informer.slice_digests()
        assert shown is not None and list(shown[1]) == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_a_claim_is_kept_only_in_what_the_usage_reads():
    claim = rclaim("1", "a")
    claim["spec"] = {"devices": {"requests": [{"name": "dcu"}]}}
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": "p", "uid": "u"}]
    slim = slim_claim(claim)
    assert "spec" not in slim and "reservedFor" not in slim["status"]
    assert claim_consumption(slim) == claim_consumption(claim)


# --- the verb ---------------------------------------------------------------------------------


def claim_pod(name: str = "p") -> dict:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"resourceClaims": [{"name": "dcu", "resourceClaimTemplateName": "t"}],
                     "containers": [{"name": "main", "resources": {"claims": [{"name": "dcu"}]}}]}}


async def test_prioritize_over_http_packs_and_never_fails(aiohttp_client):
    api = FakeApi([rslice("a"), rslice("b"), rslice("c")], [rclaim("1", "b")])
    service = SchedulerService(None, dcu_settings(mode="dra"))
    service.dra_informer = DraInformer(api, service.dra_usage)  # type: ignore[arg-type]
    task = asyncio.ensure_future(service.dra_informer.run())
    try:
        await asyncio.wait_for(service.dra_informer.synced.wait(), 5)
        client = await aiohttp_client(build_app(service, manage_lifecycle=False))
        body = {"Pod": claim_pod(), "NodeNames": ["a", "b", "c"], "Nodes": None}
        answer = await (await client.post("/prioritize", json=body)).json()
        assert answer == [{"Host": "a", "Score": 9}, {"Host": "b", "Score": 10}, {"Host": "c", "Score": 8}]
        # a pod without claims is not steered
        plain = {"Pod": {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c"}]}}, "NodeNames": ["a"]}
        assert await (await client.post("/prioritize", json=plain)).json() == [{"Host": "a", "Score": 0}]
        # malformed: an empty list (no scores), never a 5xx
        for bad in (b"{", json.dumps({"Pod": 3}).encode(), json.dumps({"Pod": claim_pod()}).encode()):
            reply = await client.post("/prioritize", data=bad, headers={"Content-Type": "application/json"})
            assert reply.status == 200 and await reply.json() == []
        value = service.metrics.registry.get_sample_value
        assert value("hami_dcu_scheduler_prioritize_seconds_count", {"result": "ok"}) == 1
        assert value("hami_dcu_scheduler_prioritize_seconds_count", {"result": "passthrough"}) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_device_plugin_mode_watches_no_dra_objects():
    service = SchedulerService(None, dcu_settings())
    assert service.dra_informer is None and not service.dra_synced
    answer = service.prioritize_pod(FilterArgs(claim_pod(), ["a", "b"], None))
    assert answer == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]

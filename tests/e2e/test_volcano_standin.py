"""The Volcano stand-in: the fork's decisions as e2e/volcano_fork.py states them, and its writes in
the fork's order, against the local API server (issue 24)."""

from datetime import UTC, datetime, timedelta

import pytest

from e2e import volcano_fork as fork
from e2e.volcano_standin import VolcanoRefused, VolcanoStandIn
from hami_dcu.common.io.kube import Kube
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, NodeDevice, decode_pod_devices, encode_node_devices

NOW = datetime(2026, 11, 24, 6, 0, 0, tzinfo=UTC)
HCU = keys.HCU_NAMING
REGISTER = ("HCU-S0,4,65520,100,HCU-K100_AI,0,true,0,hami:"
            "HCU-S1,4,65520,100,HCU-K100_AI,0,true,1,hami:")


def card(uuid: str, **used: int) -> fork.ForkCard:
    return fork.ForkCard(index=0, uuid=uuid, count=4, memory=65520, cores=100, type="HCU-K100_AI", health=True,
                         **used)


def pod(name: str = "p", containers: tuple[tuple[str, dict[str, str] | None], ...] = (("main", {
        "hygon.com/hcunum": "1", "hygon.com/hcumem": "2000", "hygon.com/hcucores": "50"}),),
        annotations: dict[str, str] | None = None) -> dict:
    return {"metadata": {"name": name, "namespace": "default", "annotations": annotations or {}},
            "spec": {"schedulerName": "volcano", "containers": [
                {"name": c, "image": "x", "resources": {"limits": limits} if limits else {}}
                for c, limits in containers]}}


# --- what the fork decides ------------------------------------------------------------------


def test_the_register_is_read_as_the_fork_reads_it():
    cards = fork.read_register(REGISTER)
    assert [(c.index, c.uuid, c.count, c.memory, c.type) for c in cards] == [
        (0, "HCU-S0", 4, 65520, "HCU-K100_AI"), (1, "HCU-S1", 4, 65520, "HCU-K100_AI")]
    assert fork.read_register("HCU-S0,4,65520,100,HCU-K100_AI,0:") is None  # one short record drops the node
    assert fork.read_register("no records") is None
    assert fork.read_register("HCU-S0,x,65520,100,HCU-K100_AI,0,true:")[0].count == 0  # Atoi's error ignored


@pytest.mark.parametrize(("value", "usable", "written"), [
    ("Reported 2026-11-24T06:00:00+00:00", True, "Requesting_"),
    ("Requesting_2026.11.24 05:59:30", True, None),
    ("Requesting_2026.11.24 05:58:59", False, "Deleted_"),
    ("Requesting_2026-11-24 05:59:30", False, "Deleted_"),  # HAMi's layout parses as the zero time
    ("Deleted_2026.11.24 05:00:00", False, None),
])
def test_the_handshake_step(value, usable, written):
    step = fork.handshake_step(value, NOW)
    assert step.usable is usable
    assert (step.write or "").startswith(written or "") and (step.write is None) == (written is None)


def test_requests_follow_extract_resource_request():
    requests = fork.hcu_requests(pod(containers=(
        ("plain", None),
        ("whole", {"hygon.com/hcunum": "2"}),
        ("mem-only", {"hygon.com/hcumem": "3k"}),
        ("shared", {"hygon.com/hcunum": "1", "hygon.com/hcumem": "2000", "hygon.com/hcucores": "30"}))))
    assert [(r.container, r.count, r.memory, r.percent, r.cores) for r in requests] == [
        ("whole", 2, 0, 100, 100), ("mem-only", 1, 3000, fork.BY_MEMORY, 0), ("shared", 1, 2000, fork.BY_MEMORY, 30)]


def test_binpack_takes_the_fullest_card_and_spread_the_first():
    def chosen(policy: str) -> str:
        cards = [card("HCU-S0"), card("HCU-S1", used_mem=1000, used_cores=10)]
        return fork.fit(pod(), cards, policy)[0][0].uuid

    assert chosen(fork.BINPACK) == "HCU-S1"
    assert chosen(fork.SPREAD) == "HCU-S0"


def test_a_sessions_fit_counts_its_own_sharers_but_pods_loaded_from_annotations_count_none():
    small = pod(containers=(("main", {"hygon.com/hcunum": "1", "hygon.com/hcumem": "1000",
                                       "hygon.com/hcucores": "10"}),))
    cards = [card("HCU-S0")]
    for _ in range(4):
        assert fork.fit(small, cards, fork.SPREAD) is not None
    assert fork.fit(small, cards, fork.SPREAD) is None  # the fifth of one session: no slot
    loaded = [card("HCU-S0")]
    fork.charge(loaded, [{"metadata": {"annotations": {HCU.pod_devices_allocated: "HCU-S0,HCU,1000,10:"}}}] * 4)
    assert (loaded[0].used_num, loaded[0].used_mem, loaded[0].used_cores) == (0, 4000, 40)
    assert fork.fit(small, loaded, fork.SPREAD) is not None  # a fifth sharer, as the fork allows


def test_selections_are_substrings_and_an_empty_entry_matches_every_card():
    cards = [card("HCU-S0"), card("HCU-S1")]
    pinned = pod(annotations={keys.USE_DCU_UUID: "hcu-s1"})
    assert fork.fit(pinned, cards, fork.SPREAD)[0][0].uuid == "HCU-S1"
    assert fork.fit(pod(annotations={HCU.use_type: "Z100"}), [card("HCU-S0")]) is None
    assert fork.fit(pod(annotations={HCU.use_type: ",,"}), [card("HCU-S0")]) is not None  # HAMi: no card


def test_the_allocation_names_only_hcu_containers_and_ends_without_a_semicolon():
    entries = [[ContainerDevice("HCU-S0", "HCU", 2000, 50)], [ContainerDevice("HCU-S1", "HCU", 1000, 10)]]
    assert fork.encode_allocation(entries) == "HCU-S0,HCU,2000,50:;HCU-S1,HCU,1000,10:"
    written = fork.allocation_annotations("n1", entries[:1], NOW)
    assert list(written) == [keys.POD_NODE, keys.POD_TIME, HCU.pod_devices_to_allocate, HCU.pod_devices_allocated,
                             keys.POD_BIND_PHASE, keys.POD_BIND_TIME]
    assert written[HCU.pod_devices_to_allocate] == written[HCU.pod_devices_allocated] == "HCU-S0,HCU,2000,50:"
    assert written[keys.POD_TIME] == written[keys.POD_BIND_TIME] == str(int(NOW.timestamp()))


def test_release_keeps_a_served_allocation_and_nulls_the_six_keys_otherwise():
    assert fork.released({keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS}) is None
    assert fork.released({keys.POD_BIND_PHASE: keys.BIND_PHASE_FAILED}) == dict.fromkeys(fork.ALLOCATION_KEYS)


@pytest.mark.parametrize(("value", "blocks"), [
    (None, False), ("2026-11-24T05:59:00Z,default,other", True), ("2026-11-24T05:54:00Z,default,other", False),
    ("2026-11-24T05:59:00Z", True), ("garbage,default,other", True)])
def test_the_lock_rule(value, blocks):
    assert (fork.lock_blocks(value, NOW) is not None) is blocks


# --- what the stand-in writes, in which order --------------------------------------------------


class Recording(Kube):
    """The local API server's client, noting each write (method, path, annotation keys)."""

    def __init__(self, inner: Kube) -> None:
        super().__init__(inner.api_client, inner.timeout)
        self.writes: list[tuple[str, str, tuple[str, ...]]] = []

    def request(self, method: str, path: str, **kwargs):  # type: ignore[override]
        if method != "GET":
            body = kwargs.get("body") or {}
            annotations = tuple((body.get("metadata") or {}).get("annotations") or {})
            self.writes.append((method, "/".join(path.rsplit("/", 2)[-2:]) if "binding" in path else path, annotations))
        return super().request(method, path, **kwargs)


@pytest.fixture
def cluster(kube):
    kube.create_node({"metadata": {"name": "n1", "annotations": {
        HCU.node_register: encode_node_devices([NodeDevice("HCU-S0", 4, 65520, 100, "HCU-K100_AI", index=0)]),
        HCU.node_handshake: "Reported 2026-11-24T06:00:00+00:00"}}})
    return Recording(kube)


def test_without_the_lock_the_pod_patch_then_the_binding(cluster):
    volcano = VolcanoStandIn(cluster)
    session = volcano.open_session(["n1"], NOW)
    handshake = cluster.get_node("n1")["metadata"]["annotations"][HCU.node_handshake]
    assert handshake.startswith("Requesting_2026.11.24 ") or handshake.startswith("Requesting_2026.11.23 ")
    created = cluster.create_pod("default", pod("v", (("side", None), ("main", {
        "hygon.com/hcunum": "1", "hygon.com/hcumem": "2000", "hygon.com/hcucores": "50"}))))
    cluster.writes.clear()
    volcano.allocate(session, created, "n1")
    volcano.bind(created, "n1")
    assert cluster.writes == [("PATCH", "/api/v1/namespaces/default/pods/v", fork.ALLOCATION_KEYS),
                              ("POST", "v/binding", ())]
    annotations = cluster.get_pod("default", "v")["metadata"]["annotations"]
    assert annotations[HCU.pod_devices_allocated] == "HCU-S0,HCU,2000,50:"  # one entry: only "main" asks
    assert decode_pod_devices(annotations[HCU.pod_devices_allocated], HCU.pod_devices_allocated) == [
        [ContainerDevice("HCU-S0", "HCU", 2000, 50)]]
    assert volcano.allocate(session, created, "n1") is None  # allocated already: skipped, nothing written
    assert len(cluster.writes) == 2


def test_with_the_lock_it_is_taken_before_the_patch_and_gone_before_the_binding(cluster):
    volcano = VolcanoStandIn(cluster, node_lock=True)
    session = volcano.open_session(["n1"], NOW)
    created = cluster.create_pod("default", pod("v"))
    cluster.writes.clear()
    volcano.allocate(session, created, "n1")
    volcano.bind(created, "n1")
    assert [(m, p) for m, p, _ in cluster.writes] == [
        ("PUT", "/api/v1/nodes/n1"), ("PATCH", "/api/v1/namespaces/default/pods/v"), ("PUT", "/api/v1/nodes/n1"),
        ("POST", "v/binding")]
    assert keys.NODE_LOCK not in cluster.get_node("n1")["metadata"]["annotations"]


def test_a_live_lock_of_anyone_refuses_the_allocate_and_writes_nothing(cluster):
    fresh = (NOW - timedelta(minutes=1)).isoformat()
    cluster.patch_node_metadata("n1", {keys.NODE_LOCK: f"{fresh},default,other"})
    volcano = VolcanoStandIn(cluster, node_lock=True)
    session = volcano.open_session(["n1"], NOW)
    created = cluster.create_pod("default", pod("v"))
    cluster.writes.clear()
    with pytest.raises(VolcanoRefused, match="locked within 5 minutes"):
        volcano.allocate(session, created, "n1")
    assert cluster.writes == []


def test_release_strips_an_unserved_allocation_only(cluster):
    volcano = VolcanoStandIn(cluster)
    session = volcano.open_session(["n1"], NOW)
    unserved, served = (cluster.create_pod("default", pod(n)) for n in ("unserved", "served"))
    for created in (unserved, served):
        volcano.allocate(session, created, "n1")
    cluster.patch_pod_metadata("default", "served", {keys.POD_BIND_PHASE: keys.BIND_PHASE_SUCCESS})
    assert volcano.release(unserved) and not volcano.release(served)
    assert not set(fork.ALLOCATION_KEYS) & set(cluster.get_pod("default", "unserved")["metadata"]["annotations"])
    assert set(fork.ALLOCATION_KEYS) <= set(cluster.get_pod("default", "served")["metadata"]["annotations"])


def test_a_stale_request_drops_the_node_and_stamps_deleted(cluster):
    cluster.patch_node_metadata("n1", {HCU.node_handshake: "Requesting_2026.11.24 05:58:00"})
    session = VolcanoStandIn(cluster).open_session(["n1"], NOW)
    assert "n1" not in session.cards and "Requesting_2026.11.24 05:58:00" in session.dropped["n1"]
    assert cluster.get_node("n1")["metadata"]["annotations"][HCU.node_handshake].startswith("Deleted_")

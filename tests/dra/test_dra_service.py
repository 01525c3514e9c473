"""The driver's Kubernetes side against a fake API: the slice kept current, Prepare reading
claims, vanished claims freed, and a node already served by the device plugin refused."""

import pytest
from dra_helpers import NODE, claim, node_cards, paths, result
from fake_kube import FakeKube

from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.dra.core import DriverCore, PrepareFailed
from hami_dcu.dra.server import ClaimRef
from hami_dcu.dra.service import DriverService
from hami_dcu.node.health import SMI_UNHEALTHY, Problem

SLICE = names.slice_name(NODE)


@pytest.fixture
def setup(tmp_path):
    cards = node_cards(tmp_path)
    kube = FakeKube(NODE)
    health: dict[str, Problem | None] = dict.fromkeys(c.id for c in cards)
    service = DriverService(kube, DriverCore(NODE, cards, paths(tmp_path)), slots=4, health=lambda: dict(health),
                            now=lambda: "2026-11-27T17:00:00Z", naming=DCU_NAMING)
    service.refresh_health()
    return service, kube, cards, health


def test_the_slice_is_created_once_and_updated_on_health_changes(setup):
    service, kube, cards, health = setup
    assert service.publish() is True
    published = kube.slices[SLICE]
    assert published["spec"]["pool"]["generation"] == 1
    assert len(published["spec"]["devices"]) == 2
    assert published["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    assert service.publish() is False and kube.writes == ["POST"]

    health[cards[0].id] = Problem(SMI_UNHEALTHY, "reported unhealthy by SMI")
    assert service.refresh_health() is True and service.refresh_health() is False
    assert service.publish() is True
    assert kube.writes == ["POST", "PUT", "PUT"]  # a dry run first: does the API server keep taints?
    assert kube.dry_runs == 1 and service.taints_kept is True
    assert kube.slices[SLICE]["spec"]["pool"]["generation"] == 2
    devices = kube.slices[SLICE]["spec"]["devices"]
    assert [d["name"] for d in devices] == [names.device_name(c.card.pci_bus_id) for c in cards]
    assert devices[0]["taints"] == [{"key": "dra.hygon.com/unhealthy", "value": "SMIReportsUnhealthy",
                                     "effect": "NoSchedule", "timeAdded": "2026-11-27T17:00:00Z"}]
    assert "taints" not in devices[1]
    assert service.publish() is False

    health[cards[0].id] = None  # recovered: the taint goes
    assert service.refresh_health() is True and service.publish() is True
    assert not any(d.get("taints") for d in kube.slices[SLICE]["spec"]["devices"])
    assert len(kube.slices[SLICE]["spec"]["devices"]) == 2 and kube.dry_runs == 1


def test_the_taint_keeps_its_time_across_a_driver_restart_and_takes_a_new_one_with_a_new_effect(tmp_path):
    cards = node_cards(tmp_path)
    kube = FakeKube(NODE)
    sick = {cards[1].id: Problem("KFDMissing", "/dev/kfd is missing")}

    def driver(now: str, effect: str = "NoSchedule") -> DriverService:
        service = DriverService(kube, DriverCore(NODE, cards, paths(tmp_path)), 4, health=lambda: sick,
                                now=lambda: now, taint_effect=effect, naming=DCU_NAMING)
        service.refresh_health()
        service.publish()
        return service

    driver("2026-11-27T17:00:00Z")
    driver("2026-11-27T18:00:00Z")  # restarted an hour later: the card was unhealthy all along
    assert kube.slices[SLICE]["spec"]["devices"][1]["taints"][0]["timeAdded"] == "2026-11-27T17:00:00Z"
    driver("2026-11-27T19:00:00Z", effect="NoExecute")
    assert kube.slices[SLICE]["spec"]["devices"][1]["taints"] == [
        {"key": "dra.hygon.com/unhealthy", "value": "KFDMissing", "effect": "NoExecute",
         "timeAdded": "2026-11-27T19:00:00Z"}]


def test_where_the_api_server_drops_taints_an_unhealthy_card_is_left_out_as_before(setup):
    service, kube, cards, health = setup
    kube.drop_taints = True
    service.publish()
    health[cards[0].id] = Problem(SMI_UNHEALTHY, "reported unhealthy by SMI")
    service.refresh_health()
    assert service.publish() is True
    # The dry run showed the taint dropped: never written tainted, the card left out at once.
    assert kube.writes == ["POST", "PUT", "PUT"] and kube.dry_runs == 1 and service.taints_kept is False
    assert [d["name"] for d in kube.slices[SLICE]["spec"]["devices"]] == [names.device_name(cards[1].card.pci_bus_id)]
    assert service.publish() is False  # and it stays that way, with no write each cycle

    health[cards[0].id] = None
    service.refresh_health()
    assert service.publish() is True and len(kube.slices[SLICE]["spec"]["devices"]) == 2


def test_taints_dropped_by_the_real_write_are_written_again_without_the_card(setup):
    """The API server downgraded between the dry run and a later write: the next slice leaves
    the unhealthy card out within the same publish."""
    service, kube, cards, health = setup
    service.taints_kept = True  # a dry run said so, earlier
    service.publish()
    kube.drop_taints = True
    health[cards[1].id] = Problem(SMI_UNHEALTHY, "reported unhealthy by SMI")
    service.refresh_health()
    assert service.publish() is True
    assert service.taints_kept is False and kube.dry_runs == 0
    assert [d["name"] for d in kube.slices[SLICE]["spec"]["devices"]] == [names.device_name(cards[0].card.pci_bus_id)]


def test_a_slice_deleted_behind_the_drivers_back_comes_back(setup):
    service, kube, _, _ = setup
    service.publish()
    del kube.slices[SLICE]
    assert service.publish() is True and SLICE in kube.slices


def test_a_failing_health_check_keeps_the_last_answer(tmp_path):
    def broken() -> dict:
        raise RuntimeError("SMI gone")

    service = DriverService(FakeKube(NODE), DriverCore(NODE, node_cards(tmp_path), paths(tmp_path)), 4, broken,
                            naming=DCU_NAMING)
    assert service.refresh_health() is False and service.health_now == {}


def test_a_node_served_by_the_device_plugin_gets_no_devices_and_an_event(setup):
    service, kube, _, _ = setup
    service.publish()
    kube.node["status"]["allocatable"]["hygon.com/dcunum"] = "8"
    assert service.publish() is True
    assert kube.slices[SLICE]["spec"]["devices"] == []
    [(reason, message)] = kube.events
    assert reason == "DCUModeConflict" and "8 allocatable hygon.com/dcunum" in message
    service.publish()
    assert len(kube.events) == 1  # said once, not every cycle
    kube.node["status"]["allocatable"]["hygon.com/dcunum"] = "0"
    service.publish()
    assert len(kube.slices[SLICE]["spec"]["devices"]) == 2


def test_prepare_reads_the_claim_and_refuses_a_recreated_one(setup):
    service, kube, _, _ = setup
    kube.add_claim(claim("uid-1", result(cores="10", memory="1Gi")))
    record = service.prepare(ClaimRef("ns", "c1", "uid-1"))
    assert record.devices[0].vdev.cu_count == 10
    with pytest.raises(PrepareFailed, match="is now UID uid-1, the kubelet asked for uid-old"):
        service.prepare(ClaimRef("ns", "c1", "uid-old"))
    with pytest.raises(PrepareFailed, match="cannot read it: 404"):
        service.prepare(ClaimRef("ns", "missing", "uid-2"))


def test_a_prepared_claim_is_answered_while_the_api_server_is_away(setup):
    service, kube, _, _ = setup
    kube.add_claim(claim("uid-1", result(cores="10", memory="1Gi")))
    first = service.prepare(ClaimRef("ns", "c1", "uid-1"))
    kube.down = True
    assert service.prepare(ClaimRef("ns", "c1", "uid-1")) == first


def test_a_refused_claim_gets_an_event(setup):
    service, kube, _, _ = setup
    kube.add_claim(claim("uid-1", result(cores="999", memory="1Gi")))
    with pytest.raises(PrepareFailed, match="999 consumed"):
        service.prepare(ClaimRef("ns", "c1", "uid-1"))
    assert kube.events[0][0] == "DCUPrepareFailed"


def test_reconcile_frees_claims_gone_recreated_or_deallocated(setup):
    service, kube, _, _ = setup
    for uid, name in (("u-kept", "kept"), ("u-gone", "gone"), ("u-new", "recreated"), ("u-dealloc", "dealloc")):
        kube.add_claim(claim(uid, result(cores="10", memory="1Gi"), name=name))
        service.prepare(ClaimRef("ns", name, uid))
    del kube.claims[("ns", "gone")]
    kube.add_claim(claim("u-other", result(cores="10", memory="1Gi"), name="recreated"))
    kube.add_claim(claim("u-dealloc", name="dealloc"))
    assert sorted(service.reconcile(max_age=0)) == ["u-dealloc", "u-gone", "u-new"]
    assert set(service.core.prepared) == {"u-kept"}
    assert bin(service.core.state.cu_used[0]).count("1") == 10


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def claim_reads(kube: FakeKube) -> list[tuple[str, dict | None]]:
    return [(path, query) for path, query in kube.reads if "/resourceclaims/" in path]


def test_reconcile_reads_each_claim_once_per_recheck_period_from_the_cache(tmp_path):
    kube, clock = FakeKube(NODE), Clock()
    service = DriverService(kube, DriverCore(NODE, node_cards(tmp_path), paths(tmp_path)), 4, dict,
                            claim_recheck=300.0, clock=clock, naming=DCU_NAMING)
    for uid, name in (("u-a", "a"), ("u-b", "b")):
        kube.add_claim(claim(uid, result(cores="10", memory="1Gi"), name=name))
        service.prepare(ClaimRef("ns", name, uid))
    kube.reads.clear()
    clock.now += 30
    assert service.reconcile() == [] and claim_reads(kube) == []  # both seen allocated at Prepare
    del kube.claims[("ns", "b")]
    clock.now += 271
    assert service.reconcile() == ["u-b"]
    assert claim_reads(kube) == [(p, {"resourceVersion": "0"}) for p in
                                 ("/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/a",
                                  "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/b")]
    kube.reads.clear()
    clock.now += 30
    assert service.reconcile() == [] and claim_reads(kube) == []  # a: checked 30 s ago


def test_a_prepare_short_of_room_frees_claims_deleted_unseen_and_succeeds(tmp_path):
    kube, clock = FakeKube(NODE), Clock()
    service = DriverService(kube, DriverCore(NODE, node_cards(tmp_path), paths(tmp_path)), 4, dict,
                            claim_recheck=300.0, clock=clock, naming=DCU_NAMING)
    kube.add_claim(claim("u-old", result(cores="100", memory="1Gi"), name="old"))
    service.prepare(ClaimRef("ns", "old", "u-old"))
    del kube.claims[("ns", "old")]  # deleted while the driver could not hear it: still prepared here
    kube.add_claim(claim("u-new", result(cores="100", memory="1Gi", share_id="s-2"), name="new"))
    clock.now += 1  # within RECHECK_ON_FAILURE of its Prepare: not read, the new claim is refused
    with pytest.raises(PrepareFailed):
        service.prepare(ClaimRef("ns", "new", "u-new"))
    assert set(service.core.prepared) == {"u-old"}
    clock.now += 10
    record = service.prepare(ClaimRef("ns", "new", "u-new"))
    assert record.devices[0].vdev.cu_count == 100 and set(service.core.prepared) == {"u-new"}


def test_publish_checks_from_the_cache_and_writes_on_an_authoritative_read(setup):
    service, kube, cards, health = setup
    service.publish()
    kube.reads.clear()
    assert service.publish() is False
    assert [q for _, q in kube.reads] == [{"resourceVersion": "0"}, {"resourceVersion": "0"}]  # node, slice
    health[cards[0].id] = Problem(SMI_UNHEALTHY, "reported unhealthy by SMI")
    service.refresh_health()
    kube.reads.clear()
    assert service.publish() is True
    assert [q for _, q in kube.reads] == [{"resourceVersion": "0"}, {"resourceVersion": "0"}, None]


def test_the_driver_names_its_naming_set_explicitly(tmp_path):
    """No default set: a forgotten argument must fail, never silently speak the dcu set."""
    core = DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))
    with pytest.raises(TypeError, match="'naming'"):
        DriverService(FakeKube(NODE), core, 4, dict)  # type: ignore[call-arg]

"""Issue 36, item 5: the namespace DCU quota checked again at Prepare, over what every node's
driver prepared (dra/quotagate.py), so two claims the webhook admitted in the same instant
cannot both be prepared past it."""

import pytest
from dra_helpers import NODE, claim, node_cards, paths, result
from fake_kube import FakeKube

from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.common.protocol.quota import Limit, QuotaLimits
from hami_dcu.dra import quotagate
from hami_dcu.dra.claims import cards_by_device, plan_claim
from hami_dcu.dra.core import DriverCore, PrepareFailed
from hami_dcu.dra.ledger import QuotaLedger, QuotaRefused
from hami_dcu.dra.quotagate import Entry, Held
from hami_dcu.dra.server import ClaimRef
from hami_dcu.dra.service import DriverService

RESOURCES = DCU_NAMING.resources
LEDGER = ("kube-system", "r-hami-dcu-dra-driver-quota")
QUOTA = {"metadata": {"name": "dcu-quota"}, "spec": {"hard": {"limits.hygon.com/dcumem": "10240"}}}


class Wall:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def driver(tmp_path, kube: FakeKube, node: str = NODE, wall: Wall | None = None) -> DriverService:
    cards = node_cards(tmp_path / node)
    ledger = QuotaLedger(kube, *LEDGER, node=node, resources=RESOURCES, wall=wall or Wall())
    return DriverService(kube, DriverCore(node, cards, paths(tmp_path / node)), slots=4,
                         health=lambda: dict.fromkeys(c.id for c in cards), ledger=ledger,
                         now=lambda: "2026-11-27T17:00:00Z", naming=DCU_NAMING)


def share(uid: str, memory: str = "8Gi", node: str = NODE, name: str | None = None) -> dict:
    return claim(uid, result(cores="30", memory=memory, pool=node, share_id=f"s-{uid}"), name=name or uid)


@pytest.fixture
def kube() -> FakeKube:
    kube = FakeKube(NODE)
    kube.add_ledger(*LEDGER)
    kube.quotas["ns"] = [QUOTA]
    return kube


def ledger_entries(kube: FakeKube, namespace: str = "ns") -> dict[str, Entry]:
    return quotagate.read_namespace(kube.configmaps[LEDGER].get("data") or {}, namespace)


# --- pure -------------------------------------------------------------------------------------


def test_a_share_holds_its_memory_and_its_compute_units_as_a_percentage_of_its_card(tmp_path):
    cards = {c.card.pci_bus_id: c for c in node_cards(tmp_path)}
    by_device = cards_by_device(list(cards.values()))
    shares = plan_claim(claim("u", result(cores="20", memory="2Gi", device=next(
        d for d, c in by_device.items() if c.card.compute_units == 60), share_id="s")), NODE, by_device)
    held = quotagate.held_by(shares)
    assert held.memory == 2048 and str(held.cores) == "100/3"  # 20 of a 60-CU card, exact
    whole = quotagate.held_by(plan_claim(claim("w", result()), NODE, by_device))
    assert whole.cores == 100 and whole.memory == 65520
    admin = quotagate.held_by(plan_claim(claim("a", {**result(), "adminAccess": True}), NODE, by_device))
    assert not admin


def test_the_refusal_is_the_webhooks_wording_over_the_other_entries():
    limits = QuotaLimits(memory=Limit(10240, "dcu-quota"))
    entries = {"a": Entry("a", "n1", Held(8192), 0.0)}
    assert quotagate.refusal(limits, entries, "a", Held(8192), RESOURCES) is None  # itself is not counted twice
    assert quotagate.refusal(limits, entries, "b", Held(8192), RESOURCES) == (
        "exceeds ResourceQuota dcu-quota limits.hygon.com/dcumem: quota 10240, used 8192, requested 8192")


def test_the_ledgers_data_reads_back_and_skips_what_a_person_broke():
    data = quotagate.write_namespace({"other": "{}"}, "ns", {"u1": Entry("c1", "n1", Held(100, quotagate.WHOLE / 3),
                                                                          5.0)})
    assert quotagate.read_namespace(data, "ns") == {"u1": Entry("c1", "n1", Held(100, quotagate.WHOLE / 3), 5.0)}
    assert quotagate.read_namespace({"ns": "not json"}, "ns") == {}
    assert quotagate.read_namespace({"ns": '{"u1": {"claim": "c"}}'}, "ns") == {}
    assert "ns" not in quotagate.write_namespace(data, "ns", {})


def test_only_this_nodes_old_entries_without_a_prepared_claim_are_leftovers():
    entries = {"mine-live": Entry("a", "n1", Held(1), 0.0), "mine-old": Entry("b", "n1", Held(1), 0.0),
               "mine-new": Entry("c", "n1", Held(1), 990.0), "theirs": Entry("d", "n2", Held(1), 0.0)}
    assert quotagate.leftovers(entries, "n1", ["mine-live"], 1000.0) == ["mine-old"]


# --- the drivers ------------------------------------------------------------------------------


def test_the_second_claim_past_the_quota_is_refused_at_prepare_naming_the_quota(tmp_path, kube):
    service = driver(tmp_path, kube)
    kube.add_claim(share("u1"))
    kube.add_claim(share("u2"))
    service.prepare(ClaimRef("ns", "u1", "u1"))
    assert set(ledger_entries(kube)) == {"u1"}
    with pytest.raises(QuotaRefused) as refused:
        service.prepare(ClaimRef("ns", "u2", "u2"))
    message = str(refused.value)
    assert "ResourceClaim ns/u2 exceeds ResourceQuota dcu-quota limits.hygon.com/dcumem: quota 10240, used 8192, " \
           "requested 8192" in message
    assert "u2" not in service.core.prepared and set(ledger_entries(kube)) == {"u1"}
    # The claim says so, and its pod's events too.
    [entry] = kube.claims[("ns", "u2")]["status"]["devices"]
    assert entry["conditions"][0]["reason"] == "QuotaExceeded"
    assert ("DCUPrepareFailed", f"node {NODE}: {message}") in kube.events
    # The kubelet tries again once the first is released: it fits.
    service.unprepare(ClaimRef("ns", "u1", "u1"))
    assert ledger_entries(kube) == {}
    service.prepare(ClaimRef("ns", "u2", "u2"))
    assert set(ledger_entries(kube)) == {"u2"}


def test_two_nodes_preparing_at_once_cannot_both_pass(tmp_path, kube):
    """Node n2's driver counts its claim between n1's read of the ledger and n1's replace: n1's
    replace fails (its resourceVersion is stale), n1 reads again and refuses its claim."""
    n1, n2 = driver(tmp_path, kube, "n1"), driver(tmp_path, kube, "n2")
    kube.add_claim(share("u1", node="n1"))
    kube.add_claim(share("u2", node="n2"))
    kube.after_ledger_read = lambda: n2.prepare(ClaimRef("ns", "u2", "u2"))
    with pytest.raises(QuotaRefused, match="used 8192, requested 8192"):
        n1.prepare(ClaimRef("ns", "u1", "u1"))
    assert set(ledger_entries(kube)) == {"u2"} and "u2" in n2.core.prepared and "u1" not in n1.core.prepared


def test_a_namespace_without_a_dcu_quota_writes_no_ledger(tmp_path, kube):
    service = driver(tmp_path, kube)
    kube.quotas["ns"] = [{"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "10"}}}]
    kube.add_claim(share("u1"))
    service.prepare(ClaimRef("ns", "u1", "u1"))
    assert "data" not in kube.configmaps[LEDGER]


def test_a_failed_prepare_takes_its_claim_out_of_the_ledger(tmp_path, kube, monkeypatch):
    service = driver(tmp_path, kube)
    kube.add_claim(share("u1"))

    def no_room(_claim):
        assert set(ledger_entries(kube)) == {"u1"}  # counted before the vDCU is made
        raise PrepareFailed("no room (test)")

    monkeypatch.setattr(service.core, "prepare", no_room)
    with pytest.raises(PrepareFailed, match="no room"):
        service.prepare(ClaimRef("ns", "u1", "u1"))
    assert ledger_entries(kube) == {}


def test_a_lost_replace_is_tried_again_and_a_missing_ledger_refuses(tmp_path, kube):
    service = driver(tmp_path, kube)
    kube.add_claim(share("u1"))
    kube.conflicts = 2
    service.prepare(ClaimRef("ns", "u1", "u1"))
    assert set(ledger_entries(kube)) == {"u1"}
    del kube.configmaps[LEDGER]
    kube.add_claim(share("u2", memory="1Gi"))
    with pytest.raises(PrepareFailed, match="quota ledger ConfigMap kube-system/r-hami-dcu-dra-driver-quota"):
        service.prepare(ClaimRef("ns", "u2", "u2"))


def test_entries_of_a_deleted_node_and_this_nodes_leftovers_are_dropped(tmp_path, kube):
    wall = Wall()
    service = driver(tmp_path, kube, wall=wall)
    kube.configmaps[LEDGER]["data"] = quotagate.write_namespace({}, "ns", {
        "gone": Entry("g", "n-deleted", Held(8192), 0.0), "lost": Entry("l", NODE, Held(1024), 0.0)})
    kube.nodes_gone.add("n-deleted")
    kube.add_claim(share("u1"))
    service.prepare(ClaimRef("ns", "u1", "u1"))  # 8192 + 8192 > 10240 until n-deleted's entry is dropped
    assert set(ledger_entries(kube)) == {"u1"}
    # The reconcile drops this node's leftovers in any namespace.
    kube.configmaps[LEDGER]["data"] = quotagate.write_namespace(kube.configmaps[LEDGER]["data"], "other", {
        "lost": Entry("l", NODE, Held(1024), 0.0)})
    service.reconcile()
    assert quotagate.read_namespace(kube.configmaps[LEDGER]["data"], "other") == {}
    assert kube.configmaps[LEDGER]["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "Helm"}  # kept

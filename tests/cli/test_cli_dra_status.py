"""`hami-dcu status` in DRA mode (pure): per card the claims on it, from our driver's
ResourceSlices (built by the driver's own code) and allocated ResourceClaims; and the DCU
pods waiting for their claims."""

from datetime import UTC, datetime, timedelta

from hami_dcu.cli.cardusage import cluster_usage
from hami_dcu.cli.drausage import dra_usage, rule_selects
from hami_dcu.cli.pending import NO_EVENT, pending_pods
from hami_dcu.cli.status import _taint_rules
from hami_dcu.cli.statusview import as_document, render
from hami_dcu.common.io.kube import KubeError, NotFoundError
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.dra import slices
from hami_dcu.node.discovery import DcuCard, DrmNodes
from hami_dcu.node.health import SMI_UNHEALTHY, Problem
from hami_dcu.node.smi import Card

DCU = DCU_NAMING  # the naming set these tests speak
NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
CARDS = [DcuCard(Card(index=i, serial=f"S{i}", model="K100_AI", memory_mib=65520, compute_units=120,
                      pci_bus_id=f"0000:3{i}:00.0"), DrmNodes(f"/dev/dri/card{i}", f"/dev/dri/renderD{128 + i}"),
                 DCU.id_prefix)
         for i in range(2)]
DEV0, DEV1 = (names.device_name(c.card.pci_bus_id) for c in CARDS)


def node_slice(node="node0"):
    return slices.resource_slice(node, "uid-" + node, slices.slice_spec(node, CARDS, {}, slots=4, generation=1))


def claim(name, device, consumed=None, pods=("p",), namespace="team", pool="node0", driver=names.DRIVER):
    result = {"request": "dcu", "driver": driver, "pool": pool, "device": device}
    if consumed is not None:
        result["consumedCapacity"] = consumed
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": [{"name": "dcu", "exactly": {
                "deviceClassName": names.DEVICE_CLASS, "allocationMode": "ExactCount", "count": 1}}]}},
            "status": {"allocation": {"devices": {"results": [result]}},
                       "reservedFor": [{"resource": "pods", "name": p, "uid": f"uid-{p}"} for p in pods]}}


def test_each_card_counts_the_capacity_its_claims_consume():
    claims = [
        claim("a", DEV0, {"cores": "12", "memory": "2000Mi", "slices": "1"}, pods=("pa",)),
        claim("b", DEV0, {"cores": "36", "memory": str(4096 * 1024 * 1024), "slices": "1"}, pods=()),
        claim("whole", DEV1),  # no consumed capacity: the whole card
        claim("gpu", DEV0, {"cores": "1"}, driver="gpu.example.com"),  # another driver's: not ours to count
    ]
    usage = dra_usage([node_slice()], claims)
    first, second = usage.cards
    assert (first.device, first.model, first.serial) == (DEV0, "K100_AI", "S0")
    assert (first.cores_used, first.memory_used_mib, first.slots_used) == (48, 6096, 2)
    assert (first.cores_total, first.memory_total_mib, first.slots_total) == (120, 65520, 4)
    assert [(s.owner, s.pods) for s in first.shares] == [("team/a", ("pa",)), ("team/b", ())]
    assert (second.cores_used, second.memory_used_mib, second.slots_used) == (120, 65520, 4)
    assert second.shares[0].whole and usage.claims == 3 and usage.problems == []
    table = render(cluster_usage([], [], NOW, DCU), "table", dra=usage, naming=DCU)
    assert "team/a (2000 MiB, 12 CU = 10%), team/b (4096 MiB, 36 CU = 30%)" in table
    assert "team/whole (whole card)" in table
    assert "dra.hygon.com: 1 node, 2 cards, slots 6/8 (75.0%), memory 71616/131040 MiB" in table
    assert "no node has registered DCUs" not in table
    wide = render(cluster_usage([], [], NOW, DCU), "wide", dra=usage, naming=DCU)
    assert "(not in use)" in wide and "pa" in wide
    assert as_document(cluster_usage([], [], NOW, DCU), dra=usage)["dra"]["cards"][0]["shares"][0]["cores"] == 12


def test_a_claim_on_a_device_no_slice_publishes_is_a_problem_not_a_free_card():
    usage = dra_usage([node_slice()], [claim("lost", "hcu-0000-99-00-0", {"cores": "12"}),
                                       claim("moved", DEV0, {"cores": "12"}, pool="node9")])
    assert all(c.cores_used == 0 for c in usage.cards)
    assert len(usage.problems) == 2 and "no ResourceSlice publishes" in usage.problems[0]
    assert "problem: claim team/lost" in render(cluster_usage([], [], NOW, DCU), "table", dra=usage, naming=DCU)


def test_namespace_and_node_narrow_the_listing_not_the_totals():
    both = [node_slice("node0"), node_slice("node1")]
    claims = [claim("a", DEV0, {"cores": "12"}), claim("b", DEV0, {"cores": "24"}, namespace="other")]
    usage = dra_usage(both, claims, node_name="node0", namespace="team")
    assert [c.node for c in usage.cards] == ["node0", "node0"]
    assert usage.cards[0].cores_used == 36 and [s.claim for s in usage.cards[0].shares] == ["a"]
    assert usage.claims == 1


def test_a_pod_waiting_for_its_claim_shows_what_the_claim_asks_for():
    pod = {"metadata": {"name": "w", "namespace": "team", "uid": "uid-w",
                        "creationTimestamp": "2026-05-01T11:58:00Z"},
           "spec": {"resourceClaims": [{"name": "dcu-main", "resourceClaimTemplateName": "hami-dcu-0123"}],
                    "containers": [{"name": "main", "resources": {"claims": [{"name": "dcu-main"}]}}]},
           "status": {"phase": "Pending"}}
    made = claim("w-dcu-main-x1", DEV0)
    del made["status"]
    made["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "w", "uid": "uid-w"}]
    made["metadata"]["annotations"] = {"resource.kubernetes.io/pod-claim-name": "dcu-main"}
    made["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"cores": "12", "memory": "2000Mi"}}
    event = {"involvedObject": {"kind": "Pod", "namespace": "team", "name": "w"}, "type": "Warning",
             "reason": "FailedScheduling", "source": {"component": "default-scheduler"},
             "lastTimestamp": "2026-05-01T11:59:00Z", "message": "0/1 nodes are available: cannot allocate all claims"}
    (waiting,) = pending_pods([pod], [event], [made], NOW, DCU.resources)
    assert waiting.request == "claim dcu-main: 1 x (cores 12, memory 2000Mi)"
    assert waiting.reason == "0/1 nodes are available: cannot allocate all claims"
    assert waiting.age_seconds == timedelta(minutes=2).total_seconds()
    (before_claim,) = pending_pods([pod], [], [], NOW, DCU.resources)
    assert before_claim.request == "claim dcu-main (from template hami-dcu-0123, not created yet)"
    assert before_claim.reason == NO_EVENT
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "someone-elses"
    assert pending_pods([pod], [], [], NOW, DCU.resources) == []  # not a DCU pod


def test_tainted_cards_say_why_from_the_slice_and_from_device_taint_rules():
    sick = {CARDS[1].id: Problem(SMI_UNHEALTHY, "reported unhealthy by SMI")}
    taints = slices.unhealthy_taints(CARDS, sick, "NoSchedule", {}, None, "2026-05-01T11:00:00Z")
    tainted = slices.resource_slice("node0", "uid", slices.slice_spec("node0", CARDS, taints, slots=4, generation=1))
    rule = {"metadata": {"name": "maintain-s0"},
            "spec": {"deviceSelector": {"driver": names.DRIVER, "pool": "node0", "device": DEV0},
                     "taint": {"key": "example.com/maintenance", "value": "firmware", "effect": "NoExecute",
                               "timeAdded": "2026-05-01T11:30:00Z"}}}
    other_pool = {"metadata": {"name": "elsewhere"},
                  "spec": {"deviceSelector": {"pool": "node9"}, "taint": {"key": "k", "effect": "NoSchedule"}}}
    no_selector = {"metadata": {"name": "nothing"}, "spec": {"taint": {"key": "k", "effect": "NoSchedule"}}}
    usage = dra_usage([tainted], [claim("on-sick", DEV1, {"cores": "12"})], rules=[rule, other_pool, no_selector])
    first, second = usage.cards
    assert [t.text for t in first.taints] == [
        "example.com/maintenance=firmware:NoExecute (DeviceTaintRule maintain-s0)"]
    assert [t.text for t in second.taints] == ["dra.hygon.com/unhealthy=SMIReportsUnhealthy:NoSchedule"]
    # The tainted card is still listed with its claim: not a problem, as when it vanished.
    assert second.cores_used == 12 and usage.problems == []
    table = render(cluster_usage([], [], NOW, DCU), "table", dra=usage, naming=DCU)
    assert "TAINTS" in table.splitlines()[0]
    assert "dra.hygon.com/unhealthy=SMIReportsUnhealthy:NoSchedule" in table
    assert "dra.hygon.com: 1 node, 2 cards (2 tainted)," in table
    wide = render(cluster_usage([], [], NOW, DCU), "wide", dra=usage, naming=DCU)
    assert "SMIReportsUnhealthy:NoSchedule since 2026-05-01T11:00:00Z" in wide
    document = as_document(cluster_usage([], [], NOW, DCU), dra=usage)
    assert document["dra"]["cards"][0]["taints"] == [{
        "key": "example.com/maintenance", "value": "firmware", "effect": "NoExecute",
        "time_added": "2026-05-01T11:30:00Z", "rule": "maintain-s0"}]


def test_an_untainted_card_shows_a_dash_and_the_summary_no_count():
    usage = dra_usage([node_slice()], [])
    table = render(cluster_usage([], [], NOW, DCU), "table", dra=usage, naming=DCU)
    assert "tainted" not in table
    assert all(row.split()[3] == "-" for row in table.splitlines()[1:3])


def test_rule_selectors_match_as_the_api_says():
    def rule(selector):
        return {"spec": {"deviceSelector": selector}} if selector is not None else {"spec": {}}

    assert rule_selects(rule({}), names.DRIVER, "node0", DEV0)  # empty: every device
    assert not rule_selects(rule(None), names.DRIVER, "node0", DEV0)  # none: no device
    assert rule_selects(rule({"driver": names.DRIVER}), names.DRIVER, "node0", DEV0)
    assert not rule_selects(rule({"driver": "gpu.example.com"}), names.DRIVER, "node0", DEV0)
    assert rule_selects(rule({"pool": "node0", "device": DEV0}), names.DRIVER, "node0", DEV0)
    assert not rule_selects(rule({"pool": "node0", "device": DEV1}), names.DRIVER, "node0", DEV0)


def test_device_taint_rules_are_read_from_v1_then_v1beta2_and_skipped_when_forbidden():
    class Api:
        def __init__(self, answers):
            self.answers, self.paths = answers, []

        def request(self, method, path, **_):
            self.paths.append(path)
            answer = self.answers[path.split("/")[3]]
            if isinstance(answer, Exception):
                raise answer
            return answer

    rule = {"metadata": {"name": "r"}}
    old = Api({"v1": NotFoundError(404, "NotFound", "no"), "v1beta2": {"items": [rule]}})
    assert _taint_rules(old) == [rule] and [p.split("/")[3] for p in old.paths] == ["v1", "v1beta2"]
    assert _taint_rules(Api({"v1": KubeError(403, "Forbidden", "no")})) == []
    assert _taint_rules(Api({"v1": NotFoundError(404, "NotFound", "no"),
                             "v1beta2": NotFoundError(404, "NotFound", "no")})) == []


def test_the_claim_kube_scheduler_made_for_a_whole_card_pod_is_listed_with_its_pod():
    """DRA mode on Kubernetes 1.37+: a pod asking whole cards by hygon.com/dcunum alone keeps
    it, kube-scheduler makes the claim (the whole card's capacity consumed, as it writes it for
    a device allowing several allocations); status lists it beside a share, and the pod while it
    waits by what its container asks."""
    made = claim("w-extended-resources-x1", DEV0, {"cores": "120", "memory": "65520Mi", "slices": "1"}, pods=("w",))
    made["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    made["status"]["allocation"]["devices"]["results"][0]["request"] = "container-0-request-0"
    usage = dra_usage([node_slice()], [made, claim("s", DEV1, {"cores": "30", "memory": "8000Mi"}, pods=("s",))])
    table = render(cluster_usage([], [], NOW, DCU), "table", dra=usage, naming=DCU)
    assert "team/w-extended-resources-x1 (whole card)" in table
    assert "team/s (8000 MiB, 30 CU = 25%)" in table and usage.claims == 2
    waiting = {"metadata": {"name": "w2", "namespace": "team", "uid": "uid-w2"},
               "spec": {"schedulerName": "hami-scheduler", "containers": [
                   {"name": "main", "resources": {"limits": {"hygon.com/dcunum": "2"}}}]},
               "status": {"phase": "Pending"}}
    (pending,) = pending_pods([waiting], [], [made], NOW, DCU.resources)
    assert pending.request == "main: 2 whole cards"

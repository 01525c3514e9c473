"""The pure parts of the kwok scale harness: the burst's pod mix, the fake nodes, kwok's
narrowed pod-ready stage, and the arithmetic bench/scale.py prints."""

from e2e.realcluster import kwok, scalemix
from e2e.realcluster import scalestats as st
from e2e.realcluster.kwokscale import fake_node
from hami_dcu.common.protocol import keys

NAMES = keys.DCU_NAMING.resources
LIMITS = NAMES.all()


def _limits(pod):
    return pod["spec"]["containers"][0]["resources"]["limits"]


def test_a_burst_rotates_through_every_shape_of_the_mix():
    burst = scalemix.shapes(3 * len(scalemix.MIX) + 2)
    assert burst[: len(scalemix.MIX)] == list(scalemix.MIX)
    assert burst[len(scalemix.MIX)] == scalemix.MIX[0]
    kinds = {(s.cards, s.memory is None) for s in scalemix.MIX}
    assert {(1, False), (1, True), (2, True), (4, True)} <= kinds  # shares, whole, two and four cards
    assert any(dict(s.annotations).get(keys.DEVICE_SCHEDULER_POLICY) for s in scalemix.MIX)
    assert any(dict(s.annotations).get(keys.NODE_SCHEDULER_POLICY) for s in scalemix.MIX)


def test_a_dcu_pod_and_its_plain_twin_differ_only_in_the_dcu_limits():
    shape = next(s for s in scalemix.MIX if s.annotations)
    dcu = scalemix.manifest("p-1", shape, "run-a", dcu=True)
    plain = scalemix.manifest("p-1", shape, "run-a", dcu=False)
    assert _limits(dcu) == {NAMES.count: "1", NAMES.memory: str(shape.memory),
                            NAMES.cores: str(shape.cores)}
    assert not set(_limits(plain)) & set(LIMITS)
    _limits(dcu).clear()
    assert dcu == plain
    assert plain["metadata"]["labels"] == {scalemix.RUN_LABEL: "run-a"}
    assert plain["metadata"]["annotations"] == dict(shape.annotations)
    # Both kinds go to the fake nodes only, past kwok's taint.
    assert plain["spec"]["nodeSelector"] == {scalemix.FAKE_NODE_LABEL: "kwok"}
    assert plain["spec"]["tolerations"] == [kwok.TOLERATION]


def test_whole_card_shapes_ask_for_cards_only():
    whole = scalemix.manifest("w", scalemix.Shape("whole-4", 4), "r", dcu=True)
    assert _limits(whole) == {NAMES.count: "4"}


def test_fewest_nodes_counts_whole_cards_and_the_binding_share_dimension():
    whole = [scalemix.Shape("w", 1)] * 17
    assert scalemix.fewest_nodes(whole, cards_per_node=8) == 3
    # Five 50 % shares need three cards by cores though two would hold their slots.
    halves = [scalemix.Shape("h", 1, 1000, 50)] * 5
    assert scalemix.fewest_nodes(halves, cards_per_node=1) == 3
    # Nine small shares need three cards by slots (four per card).
    small = [scalemix.Shape("s", 1, 1000, 1)] * 9
    assert scalemix.fewest_nodes(small, cards_per_node=1) == 3
    big = [scalemix.Shape("m", 1, 40000, 1)] * 3
    assert scalemix.fewest_nodes(big, cards_per_node=1, card_memory=65520) == 2
    assert scalemix.fewest_nodes([], cards_per_node=8) == 0


def test_a_fake_node_is_kwoks_tainted_and_offers_the_cards_slots():
    node = fake_node("kwok-00001", cards=8)
    assert node["metadata"]["annotations"] == {kwok.MANAGED_ANNOTATION: kwok.MANAGED_VALUE}
    assert node["metadata"]["labels"][scalemix.FAKE_NODE_LABEL] == "kwok"
    assert "dcu" not in node["metadata"]["labels"]  # the chart's device-plugin DaemonSet selects dcu=on
    assert node["spec"]["taints"] == [kwok.TAINT]
    assert node["status"]["allocatable"][NAMES.count] == str(8 * keys.DEFAULT_SLOTS_PER_CARD)
    assert node["status"]["capacity"] == node["status"]["allocatable"]


def test_pod_ready_waits_for_a_dcu_pods_allocation():
    stage = {"metadata": {"name": "pod-ready"}, "spec": {"selector": {"matchExpressions": [
        {"key": ".status.phase", "operator": "In", "values": ["Pending"]}]}}}
    kwok.narrow_pod_ready(stage)
    expressions = stage["spec"]["selector"]["matchExpressions"]
    assert expressions[0] == {"key": ".status.phase", "operator": "In", "values": ["Pending"]}
    assert expressions[1] == {"key": f'.metadata.annotations["{keys.POD_BIND_PHASE}"]', "operator": "NotIn",
                              "values": [keys.BIND_PHASE_ALLOCATING, keys.BIND_PHASE_FAILED]}


def test_a_burst_rate_runs_from_the_first_create_to_the_last_bind():
    burst = st.Burst(pods=3, created={"a": 10.0, "b": 10.5, "c": 11.0}, bound={"a": 10.2, "b": 11.5, "c": 12.0},
                     running={"a": 10.4, "b": 12.5})
    assert burst.pods_per_second() == 3 / 2.0
    assert [round(x, 3) for x in burst.create_to_bound()] == [0.2, 1.0, 1.0]
    assert [round(x, 3) for x in burst.bound_to_running()] == [0.2, 1.0]
    assert st.Burst(pods=1, created={"a": 1.0}).pods_per_second() == 0.0


def test_quantiles_by_nearest_rank():
    samples = [float(i) for i in range(1, 101)]
    assert st.quantile(samples, 0.5) in (50.0, 51.0)
    assert st.quantile(samples, 0.99) == 99.0
    assert st.quantile(samples, 1.0) == 100.0
    assert st.quantile([], 0.5) == 0.0


METRICS = """# HELP apiserver_request_total Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",resource="pods",subresource="",verb="POST"} 10
apiserver_request_total{code="409",resource="pods",subresource="",verb="POST"} 2
apiserver_request_total{code="201",resource="pods",subresource="binding",verb="POST"} 4
apiserver_request_total{code="200",resource="nodes",subresource="",verb="PATCH"} 7
# HELP hami_dcu_scheduler_bind_seconds Time to answer /bind
# TYPE hami_dcu_scheduler_bind_seconds histogram
hami_dcu_scheduler_bind_seconds_bucket{le="+Inf",result="ok"} 4.0
hami_dcu_scheduler_bind_seconds_count{result="ok"} 4.0
hami_dcu_scheduler_bind_seconds_sum{result="ok"} 0.2
hami_dcu_scheduler_bind_seconds_count{result="error"} 1.0
hami_dcu_scheduler_bind_seconds_sum{result="error"} 20.0
hami_dcu_card_slots{card="c1",model="K100_AI",node="n1"} 4.0
"""


def test_samples_are_summed_by_the_labels_asked_for():
    by_verb = st.samples(METRICS, "apiserver_request_total", ("verb", "resource"))
    assert by_verb == {("POST", "pods"): 16.0, ("PATCH", "nodes"): 7.0}
    assert st.samples(METRICS, "hami_dcu_scheduler_bind_seconds", ("result",), "_count") == {
        ("ok",): 4.0, ("error",): 1.0}
    assert st.samples(METRICS, "hami_dcu_scheduler_bind_seconds", (), "_sum") == {(): 20.2}
    assert st.samples(METRICS, "hami_dcu_absent") == {}


def test_deltas_and_per_pod_figures():
    before = {("POST", "pods"): 10.0, ("PATCH", "nodes"): 7.0}
    after = {("POST", "pods"): 30.0, ("PATCH", "nodes"): 7.0, ("GET", "nodes"): 5.0}
    gained = st.deltas(before, after)
    assert gained == {("POST", "pods"): 20.0, ("GET", "nodes"): 5.0}  # unchanged series are left out
    assert st.per_pod(gained, 10) == [(("POST", "pods"), 2.0), (("GET", "nodes"), 0.5)]
    assert st.per_pod(gained, 10, top=1) == [(("POST", "pods"), 2.0)]
    assert st.per_pod(gained, 0) == []
    assert st.histogram_mean({(): 3.0}, {(): 4.0}) == 0.75
    assert st.histogram_mean({}, {}) == 0.0


def test_figures_net_of_the_background_rate():
    gained = {("PATCH", "nodes"): 130.0, ("POST", "pods"): 100.0, ("PUT", "leases"): 40.0}
    background = {("PATCH", "nodes"): 20.0, ("PUT", "leases"): 20.0}  # over 10 s without pods
    # A 20 s burst: twice the background's 10 s is taken off; what falls to 0 or below is left out.
    assert st.net_of_background(gained, background, 10.0, 20.0) == {("PATCH", "nodes"): 90.0, ("POST", "pods"): 100.0}
    assert st.net_of_background(gained, background, 0.0, 20.0) == gained


def test_the_final_line_is_exactly_what_the_issue_asks_for():
    line = st.final_line(1000, 2000, 25.04, 50.1)
    assert line == "scale: nodes=1000 pods=2000 dcu_pods_per_s=25.0 plain_pods_per_s=50.1 ratio=2.00"
    assert st.ratio(1.0, 0.0) == float("inf")


def test_dra_modes_line_has_the_same_fields_under_its_own_label():
    line = st.final_line(1000, 2000, 40.0, 50.0, label="scale-dra")
    assert line == "scale-dra: nodes=1000 pods=2000 dcu_pods_per_s=40.0 plain_pods_per_s=50.0 ratio=1.25"

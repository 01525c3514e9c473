"""Which pod an Allocate serves without the node lock, read from the kubelet's pod resources
List (deviceplugin/admitting.py; issue 34, docs/architecture.md, Which pod an Allocate serves
without the lock). The List answers here are shaped as a v1.37 kubelet gives them during an
Allocate (e2e/test_kind_admission_order.py records them on kind): the pod being admitted is
listed, its container being served without ids; pods admitted before are listed with theirs;
pods the kubelet has not taken up yet are not listed."""

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin.admitting import AdmittingRefused, Listed, admitting_pod, listings
from hami_dcu.deviceplugin.lockless import awaiting_pods
from hami_dcu.node.api.podresources.v1 import api_pb2

DCU = keys.DCU_NAMING
R = DCU.resources.count
NODE = "n1"


def pod(name, *asks, phase="Pending", init=(), sidecars=(), namespace="default", uid=None):
    """A pod bound to NODE, its app containers asking `asks` of R (0: not at all)."""
    def ctr(cname, n, **extra):
        return {"name": cname, "image": "x", "resources": {"limits": {R: str(n)} if n else {}}, **extra}

    return {
        "metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{namespace}-{name}"},
        "spec": {"nodeName": NODE, "schedulerName": "volcano",
                 "initContainers": [ctr(f"init{i}", n) for i, n in enumerate(init)]
                 + [ctr(f"side{i}", n, restartPolicy="Always") for i, n in enumerate(sidecars)],
                 "containers": [ctr(f"c{i}", n) for i, n in enumerate(asks)]},
        "status": {"phase": phase},
    }


def listed(p, **ids):
    """How List shows pod `p`: every container it shows, with the ids given (else none)."""
    shown = [c["name"] for c in p["spec"]["initContainers"] if c.get("restartPolicy") == "Always"]
    shown += [c["name"] for c in p["spec"]["containers"]]
    return Listed(p["metadata"]["namespace"], p["metadata"]["name"], {c: tuple(ids.get(c, ())) for c in shown})


def gang():
    return [pod(f"g{i}", 1) for i in range(4)]


def test_the_gang_pod_listed_without_its_ids_is_the_one_being_admitted():
    g = gang()
    answer = [listed(g[0], c0=["DCU-S1-fake-0"]), listed(g[1], c0=["DCU-S1-fake-1"]), listed(g[2])]
    assert admitting_pod(g, g, answer, R, 1) is g[2]


def test_the_first_of_a_gang_is_named_while_the_others_are_not_listed_yet():
    g = gang()
    assert admitting_pod(g, g, [listed(g[0])], R, 1) is g[0]


def test_it_composes_with_the_api_side_of_lockless_awaiting_pods():
    g = gang()
    awaiting = [a.pod for a in awaiting_pods(g, NODE, R, DCU.pod_devices_to_allocate)]
    assert awaiting == g
    assert admitting_pod(awaiting, g, [listed(g[0], c0=["a"]), listed(g[1])], R, 1) is g[1]


def test_the_second_container_of_a_pod_is_served_with_the_first_already_listed_with_ids():
    p, q = pod("p", 1, 0, 2), pod("q", 1)
    answer = [listed(p, c0=["a"]), listed(q)]
    assert admitting_pod([p, q], [p, q], [listed(p, c0=["a"])], R, 2) is p  # q not listed yet
    with pytest.raises(AdmittingRefused) as refused:
        admitting_pod([p, q], [p, q], answer, R, 2)
    assert refused.value.ambiguous


def test_none_listed_without_ids_is_refused_not_guessed():
    g = gang()
    answer = [listed(g[0], c0=["a"]), listed(g[1], c0=["b"])]  # the admitting pod is not awaiting per the API read
    with pytest.raises(AdmittingRefused, match="none of the 2 pods") as refused:
        admitting_pod(g[:2], g, answer, R, 1)
    assert not refused.value.ambiguous


def test_nobody_listed_at_all_is_refused():
    with pytest.raises(AdmittingRefused, match="none of the 4 pods"):
        admitting_pod(gang(), gang(), [], R, 1)


def test_two_pods_listed_without_ids_are_ambiguous():
    g = gang()
    with pytest.raises(AdmittingRefused, match="2 pods are listed") as refused:
        admitting_pod(g, g, [listed(g[0]), listed(g[1])], R, 1)
    assert refused.value.ambiguous
    assert "default/g0" in str(refused.value) and "default/g1" in str(refused.value)


def test_a_placed_pod_listed_without_ids_may_be_reallocated_by_the_kubelet_so_the_call_is_ambiguous():
    # After a kubelet restart the kubelet re-issues Allocate from a pod worker for a container
    # it starts with no ids recorded (GetDeviceRunContainerOptions), beside the admissions.
    g = gang()
    running = pod("old", 1, phase="Running")
    with pytest.raises(AdmittingRefused, match="may be allocating it again") as refused:
        admitting_pod(g, [*g, running], [listed(running), listed(g[0])], R, 1)
    assert refused.value.ambiguous


def test_only_a_placed_pod_listed_without_ids_names_no_awaiting_pod():
    g = gang()
    running = pod("old", 1, phase="Running")
    with pytest.raises(AdmittingRefused, match="no pod awaiting an allocation is being admitted") as refused:
        admitting_pod(g, [*g, running], [listed(running), listed(g[0], c0=["a"])], R, 1)
    assert not refused.value.ambiguous


def test_pods_that_ask_for_nothing_or_are_finished_are_no_rivals():
    g = gang()
    plain = pod("plain", 0)
    done = pod("done", 1, phase="Succeeded")
    answer = [listed(plain), listed(done), listed(g[0], c0=["a"]), listed(g[1])]
    assert admitting_pod(g, [*g, plain, done], answer, R, 1) is g[1]


def test_a_name_listed_twice_is_ambiguous():
    g = gang()
    with pytest.raises(AdmittingRefused, match="lists 2 pods named default/g0") as refused:
        admitting_pod(g, g, [listed(g[0], c0=["a"]), listed(g[0])], R, 1)
    assert refused.value.ambiguous


def test_the_namespace_tells_pods_of_one_name_apart():
    a, b = pod("w", 1, namespace="a"), pod("w", 1, namespace="b")
    assert admitting_pod([a, b], [a, b], [listed(a, c0=["x"]), listed(b)], R, 1) is b


def test_a_count_other_than_the_next_containers_is_refused():
    p = pod("p", 2)
    with pytest.raises(AdmittingRefused, match="asks for 2 and the kubelet passed 1") as refused:
        admitting_pod([p], [p], [listed(p)], R, 1)
    assert not refused.value.ambiguous


def test_a_sidecar_asking_is_shown_by_list_and_served_first():
    p = pod("p", 1, sidecars=(2,))
    assert admitting_pod([p], [p], [listed(p)], R, 2) is p
    assert admitting_pod([p], [p], [listed(p, side0=["a", "b"])], R, 1) is p
    with pytest.raises(AdmittingRefused, match="none of the 1 pods"):
        admitting_pod([p], [p], [listed(p, side0=["a", "b"], c0=["c"])], R, 1)


def test_asks_only_in_plain_init_containers_cannot_be_seen_so_such_a_pod_is_a_possible_one():
    hidden = pod("h", 0, init=(1,))
    other = pod("o", 1)
    assert admitting_pod([hidden], [hidden], [listed(hidden)], R, 1) is hidden
    with pytest.raises(AdmittingRefused, match="only in init containers init0") as refused:
        admitting_pod([hidden, other], [hidden, other], [listed(hidden), listed(other)], R, 1)
    assert refused.value.ambiguous


def test_a_plain_init_container_ask_beside_served_app_containers_means_admitted():
    p = pod("p", 1, init=(1,))
    q = pod("q", 1)
    assert admitting_pod([p, q], [p, q], [listed(p, c0=["a"]), listed(q)], R, 1) is q


def test_listings_keeps_containers_without_devices_and_reads_only_the_resource():
    response = api_pb2.ListPodResourcesResponse(pod_resources=[
        api_pb2.PodResources(name="p", namespace="ns", containers=[
            api_pb2.ContainerResources(name="a", devices=[
                api_pb2.ContainerDevices(resource_name=R, device_ids=["x", "y"]),
                api_pb2.ContainerDevices(resource_name="other/thing", device_ids=["z"])]),
            api_pb2.ContainerResources(name="b")]),
        api_pb2.PodResources(name="q", namespace="ns")])
    assert listings(response, R) == [Listed("ns", "p", {"a": ("x", "y"), "b": ()}), Listed("ns", "q", {})]

"""The extender's latency histograms are observed by the verbs they time: /filter, /bind (with
its lock wait and the pod's create-to-bound), /preempt, each by outcome; a repeated /bind of a
pod already bound does not count create-to-bound twice."""

from datetime import UTC, datetime, timedelta

from scheduler_helpers import bind_args, create_nodes, dcu_pod, filter_args, until

from hami_dcu.common.io.podlatency import CREATE_TO_BOUND_BUCKETS


def sample(service, name, **labels):
    return service.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_filter_bind_and_preempt_fill_their_histograms(kube, service, client):
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("p"))
    await until(lambda: service.cache.node("n1") is not None and service.cache.node("n1").present)
    # kube-scheduler sends the pod as stored; an older creationTimestamp stands for a pod
    # that waited in the queue for 30 s.
    sent = {**pod, "metadata": {**pod["metadata"],
                                "creationTimestamp": (datetime.now(UTC) - timedelta(seconds=30)).isoformat()}}
    assert (await (await client.post("/filter", json=filter_args(sent, ["n1"]))).json())["NodeNames"] == ["n1"]
    assert sample(service, "hami_dcu_scheduler_filter_seconds_count", result="ok") == 1
    assert (await (await client.post("/bind", json=bind_args(pod, "n1"))).json()) == {"Error": ""}
    assert sample(service, "hami_dcu_scheduler_bind_seconds_count", result="ok") == 1
    assert sample(service, "hami_dcu_scheduler_node_lock_wait_seconds_count") == 1
    assert sample(service, "hami_dcu_pod_create_to_bound_seconds_count", mode="devicePlugin") == 1
    waited = sample(service, "hami_dcu_pod_create_to_bound_seconds_sum", mode="devicePlugin")
    assert 30 <= waited < 40  # whole-second timestamps: up to a second late, plus this test's own time
    assert sample(service, "hami_dcu_pod_create_to_bound_seconds_bucket", mode="devicePlugin", le="20.0") == 0
    assert sample(service, "hami_dcu_pod_create_to_bound_seconds_bucket", mode="devicePlugin", le="60.0") == 1
    assert 60 in CREATE_TO_BOUND_BUCKETS

    # kube-scheduler's retry of the same bind: answered from the pod, the pod's wait not counted again.
    assert (await (await client.post("/bind", json=bind_args(pod, "n1"))).json()) == {"Error": ""}
    assert sample(service, "hami_dcu_scheduler_bind_seconds_count", result="ok") == 2
    assert sample(service, "hami_dcu_pod_create_to_bound_seconds_count", mode="devicePlugin") == 1

    # A pod that does not fit anywhere: filter's "unschedulable" outcome.
    big = kube.create_pod("default", dcu_pod("big", memory=10**6))
    await (await client.post("/filter", json=filter_args(big, ["n1"]))).json()
    assert sample(service, "hami_dcu_scheduler_filter_seconds_count", result="unschedulable") == 1

    urgent = dcu_pod("urgent", memory=1000, cores=50)
    body = {"Pod": urgent, "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": pod["metadata"]["uid"]}],
                                                            "NumPDBViolations": 0}}}
    await (await client.post("/preempt", json=body)).json()
    plain = {"metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
    await (await client.post("/preempt", json={"Pod": plain, "NodeNameToMetaVictims": {}})).json()
    assert sample(service, "hami_dcu_scheduler_preempt_seconds_count", result="ok") == 1
    assert sample(service, "hami_dcu_scheduler_preempt_seconds_count", result="passthrough") == 1
    # A malformed preempt body never reaches the verb: nothing is timed for it.
    await (await client.post("/preempt", json={"Pod": 3})).json()
    total = sum(sample(service, "hami_dcu_scheduler_preempt_seconds_count", result=r)
                for r in ("ok", "passthrough", "refused", "invalid", "no-victims", "error"))
    assert total == 2


async def test_a_failed_bind_counts_no_create_to_bound(kube, service, client):
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("p", memory=10**6))  # fits nowhere, even at bind time
    await until(lambda: service.cache.node("n1") is not None and service.cache.node("n1").present)
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    assert reply["Error"]
    assert sample(service, "hami_dcu_scheduler_bind_seconds_count", result="error") == 1
    assert sample(service, "hami_dcu_pod_create_to_bound_seconds_count", mode="devicePlugin") == 0

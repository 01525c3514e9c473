"""Namespace DCU quotas in the extender: /filter refuses a placement past the quota (whole
cards counted with their real memory), racing pods cannot both pass, the webhook in the
extender's process denies at admission, limits and use are on /metrics."""

from datetime import UTC, datetime

from prometheus_client import generate_latest
from scheduler_helpers import dcu_pod, dcu_settings, filter_args, node_object, until

from hami_dcu.common.protocol import keys
from hami_dcu.scheduler.extender import parse_filter_args
from hami_dcu.scheduler.quotas import admission_view
from hami_dcu.scheduler.service import SchedulerService
from hami_dcu.webhook.decision import Settings, review

NOW = datetime.now(UTC)


def quota(name: str, memory: str | None = None, cores: str | None = None, namespace: str = "default") -> dict:
    hard = {}
    if memory is not None:
        hard["limits.hygon.com/dcumem"] = memory
    if cores is not None:
        hard["limits.hygon.com/dcucores"] = cores
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"}, "spec": {"hard": hard}}


def offline() -> SchedulerService:
    service = SchedulerService(None, dcu_settings())
    for name in ("n1", "n2"):
        service.cache.apply_node(node_object(name), NOW)
    return service


def filtered(service: SchedulerService, pod: dict) -> dict:
    return service.filter_pod(parse_filter_args(filter_args(pod, ["n1", "n2"])))


async def test_filter_refuses_a_placement_past_the_quota_and_racing_pods_cannot_both_pass():
    service = offline()
    service.quotas.apply(quota("dcu", memory="5000"))
    first = filtered(service, dcu_pod("a", memory=3000, uid="ua"))
    assert first["NodeNames"] == ["n1"]
    # The first pod is only assumed (not bound yet): it counts at once.
    second = filtered(service, dcu_pod("b", memory=3000, uid="ub"))
    assert second["NodeNames"] == []
    assert second["FailedNodes"]["n1"] == ("namespace DCU quota: exceeds ResourceQuota dcu "
                                           "limits.hygon.com/dcumem: quota 5000, used 3000, requested 3000")
    assert filtered(service, dcu_pod("c", memory=2000, uid="uc"))["NodeNames"] == ["n1"]
    # Another namespace has its own (no) quota.
    other = dcu_pod("d", memory=3000, uid="ud")
    other["metadata"]["namespace"] = "elsewhere"
    assert filtered(service, other)["NodeNames"] == ["n2"]  # n1's cores are taken, the quota is not


async def test_a_whole_card_counts_its_real_memory_at_filter_time():
    service = offline()
    service.quotas.apply(quota("dcu", memory="60000"))
    whole = filtered(service, dcu_pod("w", memory=None, cores=None, uid="uw"))
    assert whole["NodeNames"] == []
    assert "quota 60000, used 0, requested 65520" in whole["FailedNodes"]["n1"]


async def test_the_webhook_in_the_extenders_process_denies_at_admission():
    service = offline()
    service.quotas.apply(quota("dcu", memory="5000", cores="100"))
    settings = Settings(naming=keys.DCU_NAMING, quota=admission_view(service.quotas, service.cache))
    assert filtered(service, dcu_pod("a", memory=3000, cores=60, uid="ua"))["NodeNames"] == ["n1"]
    denied = review(dcu_pod("b", memory=1000, cores=50, scheduler="default-scheduler"), settings)
    assert not denied.allowed and denied.reason == "quota-exceeded"
    assert denied.message == ("pod exceeds ResourceQuota dcu limits.hygon.com/dcucores: quota 100, used 60, "
                              "requested 50")
    assert review(dcu_pod("c", memory=1000, cores=40), settings).allowed
    service.quotas.apply(quota("dcu", memory="0"))
    blocked = review(dcu_pod("d", memory=None, cores=None), settings)
    assert not blocked.allowed and "a limit of 0 blocks every DCU pod" in blocked.message


async def test_limits_and_use_are_on_metrics():
    service = offline()
    service.quotas.apply(quota("dcu", memory="5000", cores="300"))
    filtered(service, dcu_pod("a", memory=3000, cores=60, uid="ua"))
    text = generate_latest(service.metrics.registry).decode()
    assert ('hami_dcu_quota_limit{namespace="default",quota="dcu",resource="limits.hygon.com/dcumem"} 5000.0'
            in text)
    assert 'hami_dcu_quota_used{namespace="default",quota="dcu",resource="limits.hygon.com/dcucores"} 60.0' in text


async def test_the_watch_delivers_resource_quotas(kube, service, client):
    kube.create_node(node_object("n1"))
    kube.request("POST", "/api/v1/namespaces/default/resourcequotas", body=quota("dcu", cores="50"))
    await until(lambda: bool(service.quotas.limits("default")) and service.cache.node("n1") is not None)
    answer = await (await client.post("/filter", json=filter_args(dcu_pod("p", cores=60, uid="up"), ["n1"]))).json()
    assert answer["NodeNames"] == [] and "limits.hygon.com/dcucores: quota 50" in answer["FailedNodes"]["n1"]
    kube.request("DELETE", "/api/v1/namespaces/default/resourcequotas/dcu")
    await until(lambda: not service.quotas.limits("default"))
    answer = await (await client.post("/filter", json=filter_args(dcu_pod("p", cores=60, uid="up"), ["n1"]))).json()
    assert answer["NodeNames"] == ["n1"]

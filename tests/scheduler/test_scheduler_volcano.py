"""Volcano mode: the extender acts on no pod whose schedulerName is Volcano's (issue 24).

kube-scheduler sends only its own profiles' pods, so these requests come only from a
misconfiguration; the extender must then refuse rather than place a pod Volcano places too."""

from collections.abc import AsyncIterator

import pytest
from scheduler_helpers import bind_args, create_nodes, dcu_pod, filter_args, lock_of, until

from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.common.protocol import keys
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.bind import BindSettings
from hami_dcu.scheduler.filtering import FilterSettings
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings

DCU = keys.DCU_NAMING  # the naming set these tests speak

VOLCANO = "volcano"


@pytest.fixture
async def volcano_client(kube, aiohttp_client) -> AsyncIterator[tuple[SchedulerService, object]]:
    akube = AsyncKube(kube)
    service = SchedulerService(akube, ServiceSettings(filter=FilterSettings(naming=DCU, volcano_scheduler=VOLCANO),
                                                      bind=BindSettings(lock_wait=1.5, settle_wait=1.0)))
    service.start()
    assert await service.wait_synced(10)
    yield service, await aiohttp_client(build_app(service, manage_lifecycle=False))
    await service.stop()
    akube.close()
    kube.api_client.rest_client.pool_manager.clear()


async def test_filter_places_no_volcano_pod_and_assumes_nothing(kube, volcano_client):
    service, client = volcano_client
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("v", scheduler=VOLCANO))
    await until(lambda: service.cache.node("n1") is not None)
    answer = await (await client.post("/filter", json=filter_args(pod, ["n1"]))).json()
    assert answer["NodeNames"] == []
    assert "Volcano places this pod" in answer["FailedAndUnresolvableNodes"]["n1"]
    assert service.cache.placements.all() == []
    # A pod of the extender's own profile is still placed by the same service.
    ours = kube.create_pod("default", dcu_pod("ours"))
    assert (await (await client.post("/filter", json=filter_args(ours, ["n1"]))).json())["NodeNames"] == ["n1"]


async def test_bind_refuses_a_volcano_pod_and_writes_nothing(kube, volcano_client):
    _, client = volcano_client
    create_nodes(kube, ["n1"])
    pod = kube.create_pod("default", dcu_pod("v", scheduler=VOLCANO))
    reply = await (await client.post("/bind", json=bind_args(pod, "n1"))).json()
    assert "Volcano places this pod" in reply["Error"]
    stored = kube.get_pod("default", "v")
    assert not stored["spec"].get("nodeName")
    assert DCU.pod_devices_allocated not in (stored["metadata"].get("annotations") or {})
    assert lock_of(kube, "n1") is None


async def test_preemption_offers_no_victims_for_a_volcano_pod(kube, volcano_client):
    service, client = volcano_client
    pod = dcu_pod("v", scheduler=VOLCANO)
    body = {"Pod": pod, "NodeNameToVictims": None,
            "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "x"}], "NumPDBViolations": 0}}}
    assert await (await client.post("/preempt", json=body)).json() == {"NodeNameToMetaVictims": {}}
    # A decision, not a failure: counted under its own result, not as an error.
    samples = service.metrics.registry.get_sample_value
    assert samples("hami_dcu_scheduler_preempt_seconds_count", {"result": "volcano"}) == 1
    assert not samples("hami_dcu_scheduler_preempt_seconds_count", {"result": "error"})


def test_the_flag_reaches_the_extenders_guard():
    from hami_dcu.cli.main import build_parser
    from hami_dcu.scheduler import command

    parser, _ = build_parser()
    assert command.settings_from(parser.parse_args(["scheduler"])).filter.volcano_scheduler == ""
    on = command.settings_from(parser.parse_args(["scheduler", "--volcano-scheduler-name", VOLCANO]))
    assert on.filter.volcano_scheduler == VOLCANO

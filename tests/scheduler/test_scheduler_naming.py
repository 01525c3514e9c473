"""At start-up the scheduler and a device plugin report components of the other naming set
as a Warning event and a log line (not silent Pending)."""

import logging
from datetime import UTC, datetime

import pytest

from hami_dcu.common.io.kube import AsyncKube
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import encode_reported
from hami_dcu.common.protocol.namingcheck import EVENT_REASON
from hami_dcu.deviceplugin.namingwatch import check_node_naming
from hami_dcu.scheduler.filtering import FilterSettings, plan_pod
from hami_dcu.scheduler.fit import PodFit
from hami_dcu.scheduler.namingwatch import check_naming
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings


def warnings_about(kube, name: str) -> list[str]:
    events = kube.request("GET", "/api/v1/namespaces/default/events")["items"]
    return [e["message"] for e in events if e["reason"] == EVENT_REASON and e["involvedObject"]["name"] == name]


async def test_the_scheduler_reports_nodes_registered_in_the_other_set(kube, caplog):
    kube.create_node({"metadata": {"name": "hcu-node", "annotations": {
        "hami.io/node-hcu-register": "HCU-A,4,65520,100,HCU-K100_AI,0,true,0,hami:"}}})
    kube.create_node({"metadata": {"name": "dcu-node", "annotations": {
        "hami.io/node-dcu-register": "DCU-A,4,65520,100,DCU-K100_AI,0,true,0,hami:"}}})
    akube = AsyncKube(kube)

    async def post(obj, reason, message, kind):
        return await akube.create_event(obj, reason, message, kind, component="hami-scheduler")

    try:
        with caplog.at_level(logging.WARNING):
            message = await check_naming(akube, keys.DCU_NAMING, post)
    finally:
        akube.close()
    assert message is not None and "node(s) hcu-node register cards only as hami.io/node-hcu-register" in message
    assert message in caplog.text
    assert warnings_about(kube, "hcu-node") == [message] and warnings_about(kube, "dcu-node") == []


async def test_a_cluster_of_one_set_is_left_alone(kube):
    kube.create_node({"metadata": {"name": "n1", "annotations": {"hami.io/node-dcu-register": "x:"}}})
    akube = AsyncKube(kube)
    posted = []

    async def post(obj, reason, message, kind):
        posted.append(message)

    try:
        assert await check_naming(akube, keys.DCU_NAMING, post) is None
    finally:
        akube.close()
    assert posted == []


def test_a_device_plugin_reports_pods_placed_by_a_scheduler_of_the_other_set(kube):
    kube.create_node({"metadata": {"name": "n1", "annotations": {}}})
    kube.create_pod("default", {"metadata": {"name": "p", "annotations": {
        "hami.io/dcu-devices-allocated": "DCU-A,DCU,1000,10:;"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}})
    message = check_node_naming(kube, "n1", keys.HCU_NAMING)
    assert message is not None and "this device plugin speaks the hcu names, but pod(s) default/p carry " \
        "hami.io/dcu-devices-allocated" in message
    assert warnings_about(kube, "n1") == [message]
    assert check_node_naming(kube, "n1", keys.DCU_NAMING) is None


def test_extenders_of_both_sets_live_in_one_process_each_reading_and_writing_its_own_keys(kube):
    """The set is the extender's setting, not the process's: two of them side by side each
    read their own registration and requests and write their own allocation keys."""
    now = datetime.now(UTC)
    dcu, hcu = keys.DCU_NAMING, keys.HCU_NAMING
    node = {"metadata": {"name": "n1", "resourceVersion": "1", "annotations": {
        dcu.node_register: "DCU-A,4,65520,100,DCU-K100_AI,0,true,0,hami:",
        hcu.node_register: "HCU-B,4,65520,100,HCU-K100_AI,0,true,0,hami:",
        dcu.node_handshake: encode_reported(now), hcu.node_handshake: encode_reported(now)}}}
    for naming, card in ((dcu, "DCU-A"), (hcu, "HCU-B")):
        other = keys.other_naming(naming)
        akube = AsyncKube(kube)
        try:
            service = SchedulerService(akube, ServiceSettings(filter=FilterSettings(naming=naming)))
            service.cache.apply_node(node, now)
            entry = service.cache.node("n1")
            assert [c.id for c in entry.cards] == [card]
            assert plan_pod(pod_asking(other), service.settings.filter) is None  # not its resources
            plan = plan_pod(pod_asking(naming), service.settings.filter)
            assert plan is not None
            fit = plan.fit(entry.cards, entry.used)
            assert isinstance(fit, PodFit)
            written = service.binder.allocation_annotations(fit, "n1")
            assert naming.pod_allocation_keys <= set(written) and not other.pod_allocation_keys & set(written)
            assert written[naming.pod_devices_allocated] == f"{card},{naming.device_type},1000,10:;"
        finally:
            akube.close()


def pod_asking(naming: keys.Naming) -> dict:
    names = naming.resources
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": {"containers": [
        {"name": "main", "resources": {"limits": {names.count: "1", names.memory: "1000", names.cores: "10"}}}]}}


def test_the_extender_settings_name_the_naming_set_explicitly():
    """No default set: a forgotten argument must fail, never silently speak the dcu set."""
    with pytest.raises(TypeError, match="'naming'"):
        FilterSettings()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="'filter'"):
        ServiceSettings()  # type: ignore[call-arg]

"""At start-up the scheduler and a device plugin report components of the other naming set
as a Warning event and a log line (not silent Pending)."""

import logging

from hami_dcu.common import keys
from hami_dcu.common.kube import AsyncKube
from hami_dcu.common.namingcheck import EVENT_REASON
from hami_dcu.deviceplugin.namingwatch import check_node_naming
from hami_dcu.scheduler.namingwatch import check_naming


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

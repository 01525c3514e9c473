"""Usage per card from Node and Pod objects (pure): what `hami-dcu status` shows."""

from datetime import UTC, datetime, timedelta

from hami_dcu.cli.cardusage import cluster_usage
from hami_dcu.cli.statusview import age, render, summary_line
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import (
    ContainerDevice,
    LockValue,
    NodeDevice,
    encode_lock,
    encode_node_devices,
    encode_pod_devices,
    encode_reported,
)

DCU = keys.DCU_NAMING  # the naming set these tests speak

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)


def node(name, cards=2, lock=None, reported=NOW - timedelta(seconds=12), register=None, healthy=True):
    annotations = {
        DCU.node_register: register if register is not None else encode_node_devices(
            [NodeDevice(f"DCU-{name}-{i}", 4, 65520, 100, "DCU-K100_AI", numa=i, health=healthy or i > 0, index=i)
             for i in range(cards)]),
    }
    if reported is not None:
        annotations[DCU.node_handshake] = encode_reported(reported)
    if lock is not None:
        annotations[keys.NODE_LOCK] = lock
    return {"metadata": {"name": name, "annotations": annotations}}


def pod(name, node_name, devices, namespace="team", phase="Running", init=(), containers=("main",), bound=True):
    spec = {"containers": [{"name": c} for c in containers], "initContainers": [{"name": c} for c in init]}
    annotations = {DCU.pod_devices_allocated: encode_pod_devices(devices), keys.POD_BIND_PHASE: "success"}
    if bound:
        spec["nodeName"] = node_name
    else:
        annotations[keys.POD_NODE] = node_name
    return {"metadata": {"name": name, "namespace": namespace, "annotations": annotations}, "spec": spec,
            "status": {"phase": phase}}


def dev(card, mem, cores):
    return ContainerDevice(card, "DCU", mem, cores)


def test_a_card_counts_each_container_share_and_lists_who_holds_it():
    pods = [
        pod("a", "n1", [[dev("DCU-n1-0", 2000, 15)]]),
        pod("b", "n1", [[dev("DCU-n1-0", 4096, 20)], [], [dev("DCU-n1-0", 1024, 5)]],
            containers=("worker", "logger", "helper")),
    ]
    usage = cluster_usage([node("n1")], pods, NOW, DCU)
    card = usage.nodes[0].cards[0]
    assert (card.slots_used, card.memory_used_mib, card.cores_used_percent) == (3, 7120, 40)
    assert [(s.owner, s.memory_mib, s.cores_percent) for s in card.shares] == [
        ("team/a/main", 2000, 15), ("team/b/worker", 4096, 20), ("team/b/helper", 1024, 5)]
    idle = usage.nodes[0].cards[1]
    assert (idle.slots_used, idle.memory_used_mib, idle.shares) == (0, 0, [])
    wide = render(usage, "wide", naming=DCU).splitlines()
    column = wide[0].index("POD/CONTAINER")
    assert wide[1][column:].startswith("team/a/main")
    assert wide[2][:column].strip() == "" and wide[2][column:].split()[:3] == ["team/b/worker", "4096", "MiB,"]


def test_a_native_sidecar_and_its_app_container_on_one_card_count_as_the_extender_counts_them():
    # issue 23: a sidecar (restartPolicy Always) runs beside the app container, so both shares count.
    p = pod("p", "n1", [[dev("DCU-n1-0", 1000, 10)], [dev("DCU-n1-0", 2000, 20)]], init=("proxy",))
    p["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    card = cluster_usage([node("n1")], [p], NOW, DCU).nodes[0].cards[0]
    assert (card.slots_used, card.memory_used_mib, card.cores_used_percent) == (2, 3000, 30)
    assert [s.owner for s in card.shares] == ["team/p/proxy", "team/p/main"]


def test_init_containers_count_by_their_peak_as_the_scheduler_counts_them():
    # init 3000 MiB then app 1000 MiB on one card: the pod holds 3000 MiB and one slot, not 4000 and two.
    p = pod("p", "n1", [[dev("DCU-n1-0", 3000, 30)], [dev("DCU-n1-0", 1000, 10)]], init=("setup",))
    card = cluster_usage([node("n1")], [p], NOW, DCU).nodes[0].cards[0]
    assert (card.slots_used, card.memory_used_mib, card.cores_used_percent) == (1, 3000, 30)
    assert [s.container for s in card.shares] == ["setup", "main"]


def test_finished_pods_hold_nothing_and_an_allocation_before_the_binding_counts():
    pods = [
        pod("done", "n1", [[dev("DCU-n1-0", 5000, 50)]], phase="Succeeded"),
        pod("failed", "n1", [[dev("DCU-n1-0", 5000, 50)]], phase="Failed"),
        pod("binding", "n1", [[dev("DCU-n1-1", 100, 1)]], phase="Pending", bound=False),
    ]
    usage = cluster_usage([node("n1")], pods, NOW, DCU)
    first, second = usage.nodes[0].cards
    assert first.memory_used_mib == 0 and second.memory_used_mib == 100
    assert usage.summary.pods == 1


def test_lock_holder_and_age_and_the_plugin_report_age():
    lock = encode_lock(LockValue(NOW - timedelta(seconds=75), "team", "big-one"))
    usage = cluster_usage([node("n1", lock=lock)], [], NOW, DCU)
    n1 = usage.nodes[0]
    assert n1.lock.holder == "team/big-one" and n1.lock.age_seconds == 75
    assert n1.report.age_seconds == 12
    table = render(usage, "table", naming=DCU)
    assert "held by team/big-one for 1m15s" in table and "12s ago" in table


def test_a_node_handshaked_by_volcano_shows_who_asked_and_when():
    n1, n2 = node("n1", reported=None), node("n2", reported=None)
    n1["metadata"]["annotations"][DCU.node_handshake] = "Requesting_2026.05.01 11:59:15"
    n2["metadata"]["annotations"][DCU.node_handshake] = "Deleted_2026.05.01 11:59:15"
    usage = cluster_usage([n1, n2], [], NOW, DCU)
    assert usage.nodes[0].report.age_seconds == 45
    table = render(usage, "table", naming=DCU)
    assert "requested by Volcano 45s ago, no reply yet" in table
    assert "dropped by Volcano (no reply for 60s)" in table


def test_unreadable_values_become_problems_never_free_cards():
    broken_pod = pod("x", "n1", [])
    broken_pod["metadata"]["annotations"][DCU.pod_devices_allocated] = "DCU-n1-0,DCU,lots,5:;"
    stray = pod("y", "n1", [[dev("DCU-elsewhere", 10, 1)]])
    nodes = [node("n1", lock="yesterday"), node("n2", register="garbage", reported=None)]
    usage = cluster_usage(nodes, [broken_pod, stray], NOW, DCU)
    n1, n2 = usage.nodes
    assert any("pod team/x" in p and "usedmem 'lots'" in p for p in n1.problems)
    assert any("team/y holds DCU-elsewhere" in p for p in n1.problems)
    assert n1.lock.holder.startswith("unreadable lock")
    assert n2.cards == [] and any(DCU.node_register in p for p in n2.problems)
    assert any("never reported" in p for p in n2.problems)
    assert "(2 problems: -o wide)" in render(usage, "table", naming=DCU)
    assert "usedmem 'lots'" in render(usage, "wide", naming=DCU)


def test_node_and_namespace_filters():
    pods = [pod("a", "n1", [[dev("DCU-n1-0", 1000, 10)]], namespace="x"),
            pod("b", "n1", [[dev("DCU-n1-0", 2000, 20)]], namespace="y"),
            pod("c", "n2", [[dev("DCU-n2-0", 4000, 40)]], namespace="x")]
    only_n1 = cluster_usage([node("n1"), node("n2")], pods, NOW, DCU, node_name="n1")
    assert [n.name for n in only_n1.nodes] == ["n1"] and only_n1.summary.pods == 2
    only_x = cluster_usage([node("n1"), node("n2")], pods, NOW, DCU, namespace="x")
    card = only_x.nodes[0].cards[0]
    assert [s.pod for s in card.shares] == ["a"] and card.memory_used_mib == 3000  # totals count every pod
    assert only_x.summary.pods == 2


def test_nodes_without_dcus_are_left_out_and_unhealthy_cards_show():
    plain = {"metadata": {"name": "cpu-only", "annotations": {}}}
    usage = cluster_usage([plain, node("n1", healthy=False)], [], NOW, DCU)
    assert [n.name for n in usage.nodes] == ["n1"]
    assert usage.summary.healthy_cards == 1 and "UNHEALTHY" in render(usage, "table", naming=DCU)


def test_summary_line_and_machine_readable_output():
    usage = cluster_usage([node("n1")], [pod("a", "n1", [[dev("DCU-n1-0", 65520, 100)]])], NOW, DCU)
    line = summary_line(usage.summary)
    assert line == ("cluster: 1 node, 2 cards (2 healthy), slots 1/8 (12.5%), memory 65520/131040 MiB (50.0%), "
                    "cores 100/200% (50.0%), 1 pod")
    import json

    import yaml

    document = json.loads(render(usage, "json", naming=DCU))
    assert document["nodes"][0]["report"]["at"] == "2026-05-01T11:59:48Z"
    assert document["nodes"][0]["cards"][0]["shares"][0]["pod"] == "a"
    assert yaml.safe_load(render(usage, "yaml", naming=DCU)) == document


def test_ages_read_like_kubectl():
    assert [age(s) for s in (-3, 5, 60, 190, 3600, 7500, 86400, 90000)] == [
        "0s", "5s", "1m", "3m10s", "1h", "2h5m", "1d", "1d1h"]


def test_what_pods_and_nodes_say_reaches_the_terminal_escaped():
    # A bind phase and a lock value are annotations: an author who could write them must not
    # retitle the operator's terminal or forge a row of `hami-dcu status`.
    forged = pod("a", "n1", [[dev("DCU-n1-0", 2000, 15)]])
    forged["metadata"]["annotations"][keys.POD_BIND_PHASE] = "ok\x1b]0;owned\x07\nn9  DCU-fake  K100"
    usage = cluster_usage([node("n1", lock="\x1b[2Jheld\nby me")], [forged], NOW, DCU)
    for output in ("table", "wide"):
        text = render(usage, output, naming=DCU)
        assert "\x1b" not in text and "\x07" not in text
        assert not any(line.startswith("n9") for line in text.splitlines())
    wide = render(usage, "wide", naming=DCU)
    assert "ok\\x1b]0;owned\\x07\\n..." in wide
    assert "unreadable lock '\\x1b[2Jheld\\nby me'" in wide

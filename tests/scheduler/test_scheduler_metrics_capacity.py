"""/metrics carries capacity beside allocation, lock holds and bind phases, read from the
cache at scrape time, and the serving certificate's expiry read from its file."""

from datetime import UTC, datetime, timedelta

from scheduler_helpers import node_object

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import ContainerDevice, LockValue, encode_lock, encode_pod_devices
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.scheduler.cache import ClusterCache
from hami_dcu.scheduler.metrics import SchedulerMetrics
from hami_dcu.webhook import certs

DCU = keys.DCU_NAMING  # the naming set these tests speak

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def bound_pod(name, card, memory, cores, phase):
    allocated = encode_pod_devices([[ContainerDevice(card, "DCU", memory, cores)]])
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "5",
                         "annotations": {DCU.pod_devices_allocated: allocated, keys.POD_BIND_PHASE: phase}},
            "spec": {"nodeName": "n1", "containers": [{"name": "main"}]}, "status": {"phase": "Pending"}}


def test_capacity_allocation_lock_and_bind_phases_per_scrape():
    cache = ClusterCache(naming=DCU_NAMING)
    locked = encode_lock(LockValue(NOW - timedelta(seconds=40), "default", "b"))
    cache.apply_node(node_object("n1", extra={keys.NODE_LOCK: locked}), NOW)
    cache.apply_node(node_object("n2"), NOW)
    card = cache.node("n1").cards[0].id
    cache.apply_pod(bound_pod("a", card, 2000, 15, keys.BIND_PHASE_SUCCESS))
    cache.apply_pod(bound_pod("b", card, 4000, 20, keys.BIND_PHASE_ALLOCATING))
    metrics = SchedulerMetrics(cache, wall_clock=lambda: NOW.timestamp())
    value = metrics.registry.get_sample_value
    labels = {"node": "n1", "card": card, "model": "DCU-K100_AI"}
    assert value("hami_dcu_card_memory_mib", labels) == 65520
    assert value("hami_dcu_card_allocated_memory_mib", labels) == 6000
    assert value("hami_dcu_card_cores_percent", labels) == 100
    assert value("hami_dcu_card_allocated_cores_percent", labels) == 35
    assert value("hami_dcu_card_slots", labels) == keys.DEFAULT_SLOTS_PER_CARD
    assert value("hami_dcu_card_allocated_slots", labels) == 2
    assert value("hami_dcu_card_healthy", labels) == 1
    assert value("hami_dcu_node_lock_held", {"node": "n1"}) == 1
    assert value("hami_dcu_node_lock_held_seconds", {"node": "n1"}) == 40
    assert value("hami_dcu_node_lock_held", {"node": "n2"}) == 0
    assert value("hami_dcu_node_lock_held_seconds", {"node": "n2"}) is None
    assert value("hami_dcu_pods_bind_phase", {"phase": "allocating"}) == 1
    assert value("hami_dcu_pods_bind_phase", {"phase": "success"}) == 1
    assert value("hami_dcu_namespace_allocated_memory_mib", {"namespace": "default"}) == 6000
    assert value("hami_dcu_namespace_allocated_slots", {"namespace": "default"}) == 2
    assert value("hami_dcu_namespace_allocated_cores_percent", {"namespace": "default"}) == 35


def test_certificate_expiry_follows_the_file(tmp_path):
    metrics = SchedulerMetrics(ClusterCache(naming=DCU_NAMING))
    path = tmp_path / "tls.crt"
    first = certs.issue(["svc"], now=NOW)
    path.write_bytes(first.cert)
    metrics.watch_certificate(str(path))
    labels = {"certificate": "serving", "file": str(path)}
    expiry = metrics.registry.get_sample_value("hami_dcu_certificate_expiry_timestamp_seconds", labels)
    assert expiry == (NOW + timedelta(days=certs.SERVING_DAYS)).timestamp()
    path.write_bytes(certs.issue(["svc"], now=NOW + timedelta(days=100)).cert)  # renewed
    renewed = metrics.registry.get_sample_value("hami_dcu_certificate_expiry_timestamp_seconds", labels)
    assert renewed == expiry + 100 * 86400
    path.write_text("not a certificate")
    assert metrics.registry.get_sample_value("hami_dcu_certificate_expiry_timestamp_seconds", labels) is None


def test_nodes_whose_plugin_stopped_reporting_are_counted():
    """A node whose device plugin has not reported within the handshake limit takes no DCU
    pod (`device plugin not reporting` in /filter); the gauge shows how many there are, so a
    dashboard can tell that apart from a full cluster."""
    cache = ClusterCache(naming=DCU_NAMING)
    cache.apply_node(node_object("fresh", handshake=NOW - timedelta(seconds=10)), NOW)
    cache.apply_node(node_object("silent", handshake=NOW - timedelta(minutes=5)), NOW)
    cache.apply_node(node_object("late", handshake=NOW - timedelta(seconds=50)), NOW)
    cache.apply_node({"metadata": {"name": "cpu-only", "resourceVersion": "1"}}, NOW)  # never had cards
    at = {"now": NOW}
    metrics = SchedulerMetrics(cache, wall_clock=lambda: at["now"].timestamp())
    assert metrics.registry.get_sample_value("hami_dcu_nodes_not_reporting") == 1
    at["now"] = NOW + timedelta(seconds=30)  # "late" is now 80 s old; "fresh" 40 s
    assert metrics.registry.get_sample_value("hami_dcu_nodes_not_reporting") == 2

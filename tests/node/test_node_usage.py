"""Per-container usage samples: the pure mapping from the kubelet's pod resources answer, the
node's grants and the SMI's readings to Hygon's exporter series."""

import pytest

from hami_dcu.node.podresources import Claim, ClaimDevice, ContainerHoldings, DeviceIds
from hami_dcu.node.usage import (
    CardFacts,
    Held,
    Names,
    NodeView,
    VdevFacts,
    held_by,
    usage_samples,
)
from hami_dcu.node.usagesmi import MIB, Readings, Usage

CARDS = (CardFacts(0, "S0", "K100_AI", "0000:3D:00.0", 65536), CardFacts(1, "S1", "K100_AI", "0000:5D:00.0", 65536))
RESOURCE = "hygon.com/dcunum"


def dp_view(**kwargs) -> NodeView:
    """Device-plugin mode: card 0 has two vDCUs (vdev 3 and 5), card 1 none."""
    ids = {f"DCU-S{c}-fake-{s}": Held(c) for c in (0, 1) for s in range(4)}
    ids |= {"DCU-S0-fake-0": Held(0, 3), "DCU-S0-fake-1": Held(0, 5)}
    return NodeView(node="n1", cards=CARDS, vdevs=(VdevFacts(3, 0, 18, 2000), VdevFacts(5, 0, 30, 4000)),
                    resource=RESOURCE, by_device_id=ids, **kwargs)


def readings() -> Readings:
    return Readings(cards={0: Usage(40.0, 6 * 1024 * MIB), 1: Usage(90.0, 60 * 1024 * MIB)},
                    vdevs={3: Usage(72.0, 1500 * MIB), 5: Usage(10.0, 100 * MIB)})


def pod(name: str, *ids: str, container: str = "main", resource: str = RESOURCE, namespace: str = "team") -> \
        ContainerHoldings:
    return ContainerHoldings(namespace, name, container, devices=(DeviceIds(resource, ids),))


def series(samples, name: str) -> dict[tuple, float]:
    return {s.labels: s.value for s in samples if s.name == name}


def labelled(samples, name: str, **want: str) -> list[float]:
    return [s.value for s in samples if s.name == name and want.items() <= dict(s.labels).items()]


def test_a_vdcu_carries_its_containers_namespace_pod_and_container_with_hcu_exporters_labels():
    samples = usage_samples("hcu", dp_view(), [pod("infer", "DCU-S0-fake-0")], readings())
    labels, unheld = sorted(series(samples, "vhcu_utilizationrate"), key=lambda ls: dict(ls)["hcu_pod_name"] == "")
    assert dict(unheld)["vhcu_minor_number"] == "5" and dict(unheld)["hcu_pod_name"] == ""  # a vDCU nobody holds
    assert dict(labels) == {"vhcu_minor_number": "3", "vhcu_computer_unit": "18", "vhcu_memory_cap": str(2000 * MIB),
                            "device_id": "S0", "minor_number": "0", "name": "K100_AI", "node": "n1",
                            "hcu_pod_namespace": "team", "hcu_pod_name": "infer", "container": "main"}
    assert [k for k, _ in labels] == list(Names("hcu").vdev_labels)  # hcu-exporter's label order
    assert series(samples, "vhcu_utilizationrate")[labels] == 72.0
    assert series(samples, "vhcu_usedmemory_bytes")[labels] == 1500 * MIB


def test_the_dcu_naming_set_uses_dcu_exporters_names():
    samples = usage_samples("dcu", dp_view(), [pod("infer", "DCU-S0-fake-0")], readings())
    assert labelled(samples, "vdcu_utilizationrate", dcu_pod_namespace="team", dcu_pod_name="infer") == [72.0]
    assert {s.name for s in samples} == {"dcu_utilizationrate", "dcu_usedmemory_bytes", "dcu_memorycap_bytes",
                                         "vdcu_utilizationrate", "vdcu_usedmemory_bytes"}
    with pytest.raises(ValueError, match="unknown naming set"):
        usage_samples("xcu", dp_view(), [], readings())


def test_two_pods_sharing_a_card_each_get_their_own_vdcu():
    samples = usage_samples("hcu", dp_view(), [pod("a", "DCU-S0-fake-0"), pod("b", "DCU-S0-fake-1")], readings())
    assert labelled(samples, "vhcu_utilizationrate", hcu_pod_name="a", vhcu_minor_number="3") == [72.0]
    assert labelled(samples, "vhcu_utilizationrate", hcu_pod_name="b", vhcu_minor_number="5") == [10.0]
    # the shared card itself names nobody
    assert labelled(samples, "hcu_utilizationrate", minor_number="0") == [40.0]
    assert labelled(samples, "hcu_utilizationrate", minor_number="0", hcu_pod_name="") == [40.0]


def test_a_card_held_whole_carries_its_container_and_an_idle_one_carries_none():
    samples = usage_samples("hcu", dp_view(), [pod("train", "DCU-S1-fake-2")], readings())
    assert labelled(samples, "hcu_utilizationrate", minor_number="1", hcu_pod_name="train",
                    pcieBus_number="0000:5D:00.0") == [90.0]
    assert labelled(samples, "hcu_usedmemory_bytes", hcu_pod_name="train") == [60 * 1024 * MIB]
    assert labelled(samples, "hcu_memorycap_bytes", hcu_pod_name="train") == [65536 * MIB]
    idle = usage_samples("hcu", dp_view(), [], readings())
    assert labelled(idle, "hcu_utilizationrate", minor_number="1", hcu_pod_name="", container="") == [90.0]


def test_an_unrecorded_id_on_a_shared_card_names_nobody():
    """A share whose kubelet ids the plugin never recorded (granted by an older plugin) has an
    id that looks like a whole card's: it must not label the shared card with that pod."""
    samples = usage_samples("hcu", dp_view(), [pod("legacy", "DCU-S0-fake-3")], readings())
    assert not [s for s in samples if dict(s.labels).get("hcu_pod_name") == "legacy"]


def test_ids_of_other_resources_and_unknown_ids_count_for_nothing():
    containers = [pod("gpu", "DCU-S0-fake-0", resource="nvidia.com/gpu"), pod("ghost", "DCU-S9-fake-0")]
    samples = usage_samples("hcu", dp_view(), containers, readings())
    assert {dict(s.labels)["hcu_pod_name"] for s in samples} == {""}


def test_nothing_read_is_no_sample_never_a_zero():
    partial = Readings(cards={1: Usage(5.0, 0)}, vdevs={5: Usage(0.0, 0)})
    samples = usage_samples("hcu", dp_view(), [pod("a", "DCU-S0-fake-0"), pod("b", "DCU-S0-fake-1")], partial)
    assert not labelled(samples, "vhcu_utilizationrate", hcu_pod_name="a")  # vdev 3 unread
    assert labelled(samples, "vhcu_utilizationrate", hcu_pod_name="b") == [0.0]  # read: idle
    assert not labelled(samples, "hcu_utilizationrate", minor_number="0")
    assert usage_samples("hcu", dp_view(), [pod("a", "DCU-S0-fake-0")], Readings()) == []


def dra_view() -> NodeView:
    cdi = "dra.hygon.com/dcu=uid-a-hcu-0000-3d-00-0-dcu"
    return NodeView(node="n1", cards=CARDS, vdevs=(VdevFacts(2, 0, 36, 8192),), driver="dra.hygon.com",
                    by_cdi_id={cdi: Held(0, 2), "dra.hygon.com/dcu=uid-w-hcu-0000-5d-00-0-dcu": Held(1)},
                    by_claim_device={("team", "share-a", "hcu-0000-3d-00-0"): Held(0, 2)})


def claim_pod(name: str, claim: str, device: str, *cdi: str, driver: str = "dra.hygon.com",
              container: str = "main") -> ContainerHoldings:
    return ContainerHoldings("team", name, container, claims=(
        Claim("team", claim, (ClaimDevice(driver, "n1", device, cdi),)),))


def test_dra_a_claim_share_is_found_by_its_cdi_id():
    holder = claim_pod("p", "share-a", "hcu-0000-3d-00-0", "dra.hygon.com/dcu=uid-a-hcu-0000-3d-00-0-dcu")
    samples = usage_samples("hcu", dra_view(), [holder], Readings(vdevs={2: Usage(33.0, 10 * MIB)}))
    (labels,) = series(samples, "vhcu_utilizationrate")
    assert dict(labels)["hcu_pod_name"] == "p" and dict(labels)["vhcu_computer_unit"] == "36"
    assert dict(labels)["vhcu_memory_cap"] == str(8192 * MIB)


def test_dra_without_cdi_ids_the_claim_and_device_name_it():
    holder = claim_pod("p", "share-a", "hcu-0000-3d-00-0")
    assert held_by(dra_view(), holder) == {Held(0, 2)}
    assert held_by(dra_view(), claim_pod("p", "other-claim", "hcu-0000-3d-00-0")) == set()


def test_dra_another_drivers_devices_count_for_nothing():
    holder = claim_pod("p", "share-a", "hcu-0000-3d-00-0", "dra.hygon.com/dcu=uid-a-hcu-0000-3d-00-0-dcu",
                       driver="gpu.example.com")
    assert held_by(dra_view(), holder) == set()


def test_dra_a_claim_shared_by_two_containers_has_a_series_for_each():
    cdi = "dra.hygon.com/dcu=uid-w-hcu-0000-5d-00-0-dcu"
    holders = [claim_pod("p", "whole", "hcu-0000-5d-00-0", cdi, container=c) for c in ("left", "right")]
    samples = usage_samples("hcu", dra_view(), holders, Readings(cards={1: Usage(50.0, 0)}))
    assert sorted(dict(s.labels)["container"] for s in samples if s.name == "hcu_utilizationrate"
                  and s.labels[1] == ("minor_number", "1")) == ["left", "right"]

"""Per-container usage in DRA mode: the driver's prepared claims as the usage view, found by
the CDI ids (or the claim and device names) the kubelet reports per container."""

from dra_helpers import DEV0, DEV1, NODE, claim, node_cards, paths, result

from hami_dcu.common.protocol.dra import names
from hami_dcu.dra.core import DriverCore
from hami_dcu.dra.usageview import driver_view
from hami_dcu.node.podresources import Claim, ClaimDevice, ContainerHoldings
from hami_dcu.node.usage import Held
from hami_dcu.node.usagecollector import UsageCollector
from hami_dcu.node.usagesmi import MockUsage


def holder(pod: str, claim_name: str, device: str, cdi: list[str]) -> ContainerHoldings:
    return ContainerHoldings("ns", pod, "main", claims=(Claim("ns", claim_name, (
        ClaimDevice(names.DRIVER, NODE, device, tuple(cdi)),)),))


class Kubelet:
    def __init__(self, containers: list[ContainerHoldings]) -> None:
        self.containers = containers

    def list(self) -> list[ContainerHoldings]:
        return self.containers


def test_a_prepared_share_and_a_whole_card_are_found_by_their_cdi_ids(tmp_path):
    core = DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))
    share = core.prepare(claim("uid-a", result(cores="30", memory="8Gi"), name="share-a"))
    whole = core.prepare(claim("uid-w", result(device=DEV1), name="whole"))
    view = driver_view(core)
    (vdev,) = view.vdevs
    assert (vdev.card_index, vdev.cu_count, vdev.memory_mib) == (0, 30, 8192)
    share_cdi = share.cdi_ids(share.devices[0])
    whole_cdi = whole.cdi_ids(whole.devices[0])
    assert view.by_cdi_id[share_cdi[0]] == Held(0, vdev.vdev)
    assert view.by_cdi_id[whole_cdi[0]] == Held(1)
    assert view.by_claim_device[("ns", "share-a", DEV0)] == Held(0, vdev.vdev)

    kubelet = Kubelet([holder("infer", "share-a", DEV0, share_cdi), holder("train", "whole", DEV1, whole_cdi)])
    collector = UsageCollector("hcu", NODE, lambda: driver_view(core), MockUsage(), kubelet)  # type: ignore[arg-type]
    families = {f.name: f for f in collector.collect()}
    (sample,) = families["vhcu_utilizationrate"].samples
    assert sample.labels["hcu_pod_name"] == "infer" and sample.labels["device_id"] == "SER0"
    assert sample.labels["vhcu_computer_unit"] == "30" and sample.labels["vhcu_memory_cap"] == str(8192 * 1024 * 1024)
    by_card = {s.labels["minor_number"]: s.labels["hcu_pod_name"] for s in families["hcu_utilizationrate"].samples}
    assert by_card == {"0": "", "1": "train"}


def test_unprepared_claims_hold_nothing(tmp_path):
    core = DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))
    record = core.prepare(claim("uid-a", result(cores="30", memory="1Gi")))
    core.unprepare("uid-a")
    view = driver_view(core)
    assert view.vdevs == () and record.cdi_ids(record.devices[0])[0] not in view.by_cdi_id

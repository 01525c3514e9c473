"""Per-container usage as Prometheus samples: whose each vDCU and card is (the kubelet's pod
resources answer, matched against what this node granted) and what it uses (the SMI's
readings). Pure: no I/O; the collector (usagecollector.py) gathers the inputs at scrape time.

The series are the ones Hygon's exporters publish, so HAMi-WebUI and Hygon's Grafana
dashboards read ours as theirs: with naming set `hcu`, hcu-exporter's

    vhcu_utilizationrate / vhcu_usedmemory_bytes  {vhcu_minor_number, vhcu_computer_unit,
        vhcu_memory_cap, device_id, minor_number, name, node, hcu_pod_namespace, hcu_pod_name, container}
    hcu_utilizationrate / hcu_usedmemory_bytes / hcu_memorycap_bytes  {device_id, minor_number,
        name, node, pcieBus_number, hcu_pod_namespace, hcu_pod_name, container}

and with `dcu` the same names and labels with `dcu` for `hcu` (HAMi's dcu-exporter). A vDCU's
utilisation is the busy percent of its own compute units; memory is in bytes; `device_id` is
the card's serial (the registered card id without its `DCU-`/`HCU-` prefix), `minor_number`
its SMI index. A card's series carry a container while that container holds it whole, a
vDCU's the container it was made for; one used by several containers (a DRA claim they share)
has a series per container. Nothing read: no sample (never a made-up zero).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hami_dcu.node.podresources import ContainerHoldings
from hami_dcu.node.usagesmi import MIB, Readings

FAMILIES = ("dcu", "hcu")


@dataclass(frozen=True)
class CardFacts:
    index: int  # SMI index
    serial: str
    model: str
    pci_bus_id: str
    memory_mib: int


@dataclass(frozen=True)
class VdevFacts:
    vdev: int
    card_index: int
    cu_count: int
    memory_mib: int


@dataclass(frozen=True)
class Held:
    """What one kubelet device id or CDI device id stands for on this node: a vDCU, or a card
    held whole (`vdev` None)."""

    card_index: int
    vdev: int | None = None


@dataclass(frozen=True)
class NodeView:
    """What this node granted, as the plugin or the driver knows it."""

    node: str
    cards: tuple[CardFacts, ...]
    vdevs: tuple[VdevFacts, ...] = ()
    resource: str = ""  # device-plugin mode: the count resource whose ids `by_device_id` knows
    by_device_id: Mapping[str, Held] = field(default_factory=dict)  # kubelet device id -> held
    driver: str = ""  # DRA mode: the driver whose claim devices `by_cdi_id` knows
    by_cdi_id: Mapping[str, Held] = field(default_factory=dict)  # fully qualified CDI id -> held
    # DRA, when the kubelet reports no CDI ids: (claim namespace, claim name, device) -> held,
    # only where that names one device grant.
    by_claim_device: Mapping[tuple[str, str, str], Held] = field(default_factory=dict)


@dataclass(frozen=True)
class Holder:
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]  # in the family's label order
    value: float


@dataclass(frozen=True)
class Names:
    """The series and label names of one naming set."""

    family: str

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown naming set {self.family!r}: expected one of {', '.join(FAMILIES)}")

    @property
    def card_busy(self) -> str:
        return f"{self.family}_utilizationrate"

    @property
    def card_used(self) -> str:
        return f"{self.family}_usedmemory_bytes"

    @property
    def card_capacity(self) -> str:
        return f"{self.family}_memorycap_bytes"

    @property
    def vdev_busy(self) -> str:
        return f"v{self.family}_utilizationrate"

    @property
    def vdev_used(self) -> str:
        return f"v{self.family}_usedmemory_bytes"

    @property
    def workload(self) -> tuple[str, str, str]:
        return f"{self.family}_pod_namespace", f"{self.family}_pod_name", "container"

    @property
    def card_labels(self) -> tuple[str, ...]:
        return ("device_id", "minor_number", "name", "node", "pcieBus_number", *self.workload)

    @property
    def vdev_labels(self) -> tuple[str, ...]:
        f = self.family
        return (f"v{f}_minor_number", f"v{f}_computer_unit", f"v{f}_memory_cap", "device_id", "minor_number", "name",
                "node", *self.workload)

    def help(self, name: str) -> str:
        return {
            self.card_busy: "Card busy percent (0-100); workload labels while one container holds the card whole",
            self.card_used: "Card memory in use, bytes; workload labels while one container holds the card whole",
            self.card_capacity: "Card memory, bytes",
            self.vdev_busy: "vDCU busy percent of its own compute units (0-100), with the container it serves",
            self.vdev_used: "vDCU memory in use, bytes, with the container it serves",
        }[name]

    def label_names(self, name: str) -> tuple[str, ...]:
        return self.vdev_labels if name in (self.vdev_busy, self.vdev_used) else self.card_labels

    @property
    def all(self) -> tuple[str, ...]:
        return self.card_busy, self.card_used, self.card_capacity, self.vdev_busy, self.vdev_used


def held_by(view: NodeView, container: ContainerHoldings) -> set[Held]:
    """What the container holds on this node, by the ids the kubelet reports for it. Ids this
    node did not grant (another resource, another driver, a grant since gone) count for nothing."""
    held: set[Held] = set()
    for devices in container.devices:
        if devices.resource == view.resource:
            held |= {view.by_device_id[i] for i in devices.ids if i in view.by_device_id}
    for claim in container.claims:
        for device in claim.devices:
            if device.driver and device.driver != view.driver:
                continue
            by_cdi = {view.by_cdi_id[i] for i in device.cdi_ids if i in view.by_cdi_id}
            by_name = view.by_claim_device.get((claim.namespace, claim.name, device.device))
            held |= by_cdi or ({by_name} if by_name is not None else set())
    return held


def usage_samples(family: str, view: NodeView, containers: Sequence[ContainerHoldings],
                  readings: Readings) -> list[Sample]:
    """The usage series of this node: every card and vDCU with a reading, labelled with the
    containers the kubelet says hold it."""
    names = Names(family)
    vdev_ids = {v.vdev for v in view.vdevs}
    shared_cards = {v.card_index for v in view.vdevs}
    vdev_holders: dict[int, set[Holder]] = {}
    whole_holders: dict[int, set[Holder]] = {}
    for container in containers:
        holder = Holder(container.namespace, container.pod, container.container)
        for held in held_by(view, container):
            if held.vdev is not None and held.vdev in vdev_ids:
                vdev_holders.setdefault(held.vdev, set()).add(holder)
            elif held.vdev is None and held.card_index not in shared_cards:
                # A card with vDCUs on it is shared, never held whole: an id that says
                # otherwise is a share whose record is gone, and names nobody.
                whole_holders.setdefault(held.card_index, set()).add(holder)

    def workload(who: Holder | None) -> tuple[str, str, str]:
        return ("", "", "") if who is None else (who.namespace, who.pod, who.container)

    def each(holders: set[Holder] | None) -> list[Holder | None]:
        if not holders:
            return [None]  # one series naming nobody
        ordered = sorted(holders, key=lambda h: (h.namespace, h.pod, h.container))
        return [*ordered]

    cards = {c.index: c for c in view.cards}
    samples: list[Sample] = []
    for card in sorted(view.cards, key=lambda c: c.index):
        usage = readings.cards.get(card.index)
        if usage is None:
            continue
        for who in each(whole_holders.get(card.index)):
            base = (card.serial, str(card.index), card.model, view.node, card.pci_bus_id, *workload(who))
            labels = tuple(zip(names.card_labels, base, strict=True))
            samples += [Sample(names.card_busy, labels, usage.busy_percent),
                        Sample(names.card_used, labels, float(usage.used_bytes)),
                        Sample(names.card_capacity, labels, float(card.memory_mib * MIB))]
    for vdev in sorted(view.vdevs, key=lambda v: v.vdev):
        reading, on = readings.vdevs.get(vdev.vdev), cards.get(vdev.card_index)
        if reading is None or on is None:
            continue
        for who in each(vdev_holders.get(vdev.vdev)):
            values = (str(vdev.vdev), str(vdev.cu_count), str(vdev.memory_mib * MIB), on.serial, str(on.index),
                      on.model, view.node, *workload(who))
            labels = tuple(zip(names.vdev_labels, values, strict=True))
            samples += [Sample(names.vdev_busy, labels, reading.busy_percent),
                        Sample(names.vdev_used, labels, float(reading.used_bytes))]
    return samples

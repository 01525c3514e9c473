"""What Volcano's Hygon deviceshare decides (HYGON-AI/volcano, `deviceshare.VHCUEnable`):
pure, no I/O. The stand-in (volcano_standin.py) does the reads and writes around it.

Written from the fork's protocol (docs/architecture.md, Volcano mode, and the points below),
quirks included, because a stand-in that is kinder than the fork would prove nothing:

* a node counts only with both `hami.io/node-hcu-register` and `hami.io/node-handshake-hcu`;
  the register is split on `:` into records of at least 7 comma fields (one short record
  drops the node); numbers that do not parse read as 0; the card's id is its position;
* the handshake: a `Requesting_` stamp in the fork's own layout younger than 60 s keeps the
  node; older (or unreadable, e.g. HAMi's layout, which the fork parses as the zero time)
  makes the fork stamp `Deleted_` and drop the node; `Deleted...` drops it; anything else
  (the plugin's `Reported ...`) is answered with `Requesting_<now>` and the node is used;
* a pod asks for HCU when one of its app containers names the count or the memory resource in
  its limits; count from limits only (none: 1 card), memory and cores from limits then
  requests; no memory means a whole card (cores forced to 100); memory without cores, 0 cores;
* pods already on a node add their memory and cores to its cards, but not a sharer count, so
  the 4 slots of a card are enforced only between pods of one session;
* binpack tries the fullest card first; spread keeps index order; type and uuid selections are
  case-insensitive substrings of comma lists (so `",,"` matches every card, unlike HAMi);
* the allocation names only the HCU containers, entries joined by `;` with none after the last.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import (
    ContainerDevice,
    decode_handshake,
    encode_pod_devices,
    encode_volcano_deleted,
    encode_volcano_requesting,
)

JSON = dict[str, Any]
NAMING = keys.HCU_NAMING  # the fork speaks only the hcu names
REQUEST_TYPE = NAMING.device_type  # "HCU"
HANDSHAKE_TTL = timedelta(seconds=60)
LOCK_TTL = timedelta(minutes=5)
BINPACK, SPREAD = "binpack", "spread"
WHOLE_CARD_PERCENT = 100
BY_MEMORY = 101  # the fork's marker: memory asked in MiB, not as a percentage of the card
ZERO_TIME = datetime(1, 1, 1, tzinfo=UTC)  # what Go's time.Parse gives on an error
# The six keys the fork writes at Allocate and strips at Release, in the order of its map literal.
ALLOCATION_KEYS = (keys.POD_NODE, keys.POD_TIME, NAMING.pod_devices_to_allocate, NAMING.pod_devices_allocated,
                   keys.POD_BIND_PHASE, keys.POD_BIND_TIME)


@dataclass
class ForkCard:
    index: int
    uuid: str
    count: int  # sharers allowed
    memory: int  # MiB
    cores: int
    type: str
    health: bool
    used_num: int = 0
    used_mem: int = 0
    used_cores: int = 0

    def fullness(self) -> float:
        return (self.used_num / self.count if self.count else 0.0) + (
            self.used_cores / self.cores if self.cores else 0.0) + (
            self.used_mem / self.memory if self.memory else 0.0)


@dataclass(frozen=True)
class HcuRequest:
    """One HCU container's request, as the fork's ExtractResourceRequest reads it."""

    container: str
    count: int
    memory: int  # MiB when percent is BY_MEMORY
    percent: int
    cores: int


# --- the node ------------------------------------------------------------------------------


def _atoi(text: str) -> int:
    """Go's strconv.Atoi with its error ignored: 0 for anything that is not an integer."""
    try:
        return int(text, 10) if text.strip() == text else 0
    except ValueError:
        return 0


def read_register(value: str) -> list[ForkCard] | None:
    """The fork's decodeNodeDevices: None when it cannot use the value at all."""
    if ":" not in value:
        return None
    cards = []
    for position, record in enumerate(value.split(":")):
        if "," not in record:
            continue
        fields = record.split(",")
        if len(fields) < 7:
            return None
        cards.append(ForkCard(index=position, uuid=fields[0], count=_atoi(fields[1]), memory=_atoi(fields[2]),
                              cores=_atoi(fields[3]), type=fields[4], health=fields[6] in ("1", "t", "T", "true",
                                                                                            "TRUE", "True")))
    return cards


@dataclass(frozen=True)
class HandshakeStep:
    usable: bool
    write: str | None  # the value the fork patches onto the node, None when it writes nothing


def handshake_step(value: str, now: datetime) -> HandshakeStep:
    """NewHCUDevices' handshake rule at a session open."""
    if "Requesting" in value:
        seen = decode_handshake(value[value.index("Requesting"):])
        stamped = seen.at if seen.by_volcano and seen.at is not None else ZERO_TIME
        if now > stamped + HANDSHAKE_TTL:
            return HandshakeStep(False, encode_volcano_deleted(now))
        return HandshakeStep(True, None)
    if "Deleted" in value:
        return HandshakeStep(False, None)
    return HandshakeStep(True, encode_volcano_requesting(now))


def charge(cards: list[ForkCard], pods: Iterable[JSON]) -> None:
    """Add the shares of the pods already on the node (their `hcu-devices-allocated`) to its
    cards: memory and cores only, as the fork loads them."""
    by_uuid = {c.uuid: c for c in cards}
    for pod in pods:
        value = ((pod.get("metadata") or {}).get("annotations") or {}).get(NAMING.pod_devices_allocated)
        if not value:
            continue
        for entry in value.split(";"):
            for record in entry.split(":"):
                fields = record.split(",")
                if len(fields) < 4:
                    continue
                for uuid, card in by_uuid.items():
                    if uuid in fields[0]:  # the fork matches by substring
                        card.used_mem += _atoi(fields[2])
                        card.used_cores += _atoi(fields[3])


# --- the pod -------------------------------------------------------------------------------


def _quantity(container: JSON, name: str, requests_too: bool) -> int | None:
    resources = container.get("resources") or {}
    for section in ("limits", "requests") if requests_too else ("limits",):
        value = (resources.get(section) or {}).get(name)
        if value is not None:
            return int(parse_quantity(value))  # Quantity.Value(): "2k" is 2000
    return None


def hcu_containers(pod: JSON) -> list[JSON]:
    """The app containers that ask for HCU (the count or the memory resource in limits), in
    order: the fork writes one allocation entry for each, and none for the others."""
    names = NAMING.resources
    return [c for c in (pod.get("spec") or {}).get("containers") or []
            if names.count in ((c.get("resources") or {}).get("limits") or {})
            or names.memory in ((c.get("resources") or {}).get("limits") or {})]


def hcu_requests(pod: JSON) -> list[HcuRequest]:
    """The requests of the pod's HCU containers, in order."""
    names = NAMING.resources
    found = []
    for container in hcu_containers(pod):
        count = _quantity(container, names.count, requests_too=False)
        memory = _quantity(container, names.memory, requests_too=True)
        cores = _quantity(container, names.cores, requests_too=True)
        if memory is None:
            found.append(HcuRequest(container["name"], 1 if count is None else count, 0, WHOLE_CARD_PERCENT, 100))
        else:
            found.append(HcuRequest(container["name"], 1 if count is None else count, memory, BY_MEMORY,
                                    cores or 0))
    return found


def _listed(value: str, text: str) -> bool:
    upper = text.upper()
    return any(part.upper() in upper for part in value.split(","))


def _selected(annotations: JSON, card: ForkCard) -> bool:
    if REQUEST_TYPE not in card.type:
        return False
    for use, nouse, text in ((NAMING.use_type, NAMING.nouse_type, card.type),
                             (keys.USE_DCU_UUID, keys.NOUSE_DCU_UUID, card.uuid)):
        if use in annotations:
            if not _listed(annotations[use], text):
                return False
        elif nouse in annotations and _listed(annotations[nouse], text):
            return False
    return True


def fit(pod: JSON, cards: list[ForkCard], policy: str = BINPACK) -> list[list[ContainerDevice]] | None:
    """The cards for each HCU container, charging them to `cards` as the fork's TryAddPod
    does; None when the pod does not fit (then `cards` may be part-charged, as in the fork:
    a session's device state is thrown away with the session)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    entries = []
    for request in hcu_requests(pod):
        if request.count > len(cards):
            return None
        order = sorted(cards, key=ForkCard.fullness, reverse=True) if policy == BINPACK else list(cards)
        wanted, devices = request.count, []
        for card in order:
            if card.used_num >= card.count:
                continue
            memory = request.memory if request.percent == BY_MEMORY else card.memory * request.percent // 100
            if card.memory - card.used_mem < memory or card.used_cores + request.cores > 100:
                continue
            if (request.cores == 100 and card.used_num > 0) or (card.used_cores == 100 and request.cores == 0):
                continue
            if not _selected(annotations, card):
                continue
            card.used_num += 1
            card.used_mem += memory
            card.used_cores += request.cores
            devices.append(ContainerDevice(card.uuid, REQUEST_TYPE, memory, request.cores))
            wanted -= 1
            if wanted == 0:
                break
        if wanted > 0:
            return None
        entries.append(devices)
    return entries


def encode_allocation(entries: list[list[ContainerDevice]]) -> str:
    """The fork's encodePodDevices: our codec's form without the `;` after the last entry."""
    return encode_pod_devices(entries, NAMING.pod_devices_allocated).removesuffix(";")


def allocation_annotations(node: str, entries: list[list[ContainerDevice]], now: datetime) -> dict[str, str]:
    """The six keys of the fork's Allocate patch, in its order."""
    value = encode_allocation(entries)
    stamp = str(int(now.timestamp()))
    return dict(zip(ALLOCATION_KEYS, (node, stamp, value, value, keys.BIND_PHASE_ALLOCATING, stamp), strict=True))


def released(annotations: JSON) -> dict[str, None] | None:
    """The fork's Release: the null patch of the six keys, None when bind-phase is success."""
    if annotations.get(keys.POD_BIND_PHASE) == keys.BIND_PHASE_SUCCESS:
        return None
    return dict.fromkeys(ALLOCATION_KEYS)


def lock_blocks(value: str | None, now: datetime) -> str | None:
    """With NodeLockEnable: why an existing `hami.io/mutex.lock` stops the Allocate (younger
    than 5 min, or a time the fork cannot parse), None when it may take the lock (none, or
    an expired one it deletes first). Only the part before the first comma is read."""
    if value is None:
        return None
    stamp = value.split(",", 1)[0]
    try:
        since = datetime.fromisoformat(stamp)
    except ValueError:
        return f"lock {value!r}: time {stamp!r} is not RFC3339"
    if since.tzinfo is None:
        return f"lock {value!r}: time {stamp!r} has no zone"
    if now - since > LOCK_TTL:
        return None
    return "node has been locked within 5 minutes"

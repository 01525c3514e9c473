"""The wire formats of the HAMi DCU protocol: one encoder and one decoder per format.

Formats (HAMi's, byte for byte; docs/architecture.md, Wire formats):

* node device list (`hami.io/node-dcu-register`): each card a comma record terminated by `:`.
  HAMi has no version marker, so the record's field count tells the forms apart:
  9 fields `ID,Count,Devmem,Devcore,Type,Numa,Health,Index,Mode` (what we write), or the
  legacy 7 `ID,Count,Devmem,Devcore,Type,Numa,Health` (Index 0, Mode `hami-core`).
  A JSON array of HAMi's DeviceInfo objects is accepted on decode.
* pod device list (`hami.io/dcu-devices-to-allocate` / `-allocated`): one entry per
  container, init containers first, each terminated by `;`; an entry is zero or more
  `UUID,Type,Usedmem,Usedcores` records each terminated by `:`. Empty entries are kept:
  the position of an entry is the container it belongs to.
* node lock (`hami.io/mutex.lock`): `<RFC3339>,<namespace>,<name>`; legacy bare `<RFC3339>`.
  An empty namespace or name parses (HAMi's parser takes it) as a lock naming nobody:
  HAMi cannot look such a holder up either, so only expiry frees it, as a legacy lock.
* handshake (`hami.io/node-handshake-dcu`): `Reported <time>` from the plugin,
  `Requesting_<YYYY-MM-DD HH:MM:SS>` from HAMi's scheduler; Volcano's Hygon deviceshare
  (HYGON-AI/volcano) stamps `Requesting_<YYYY.MM.DD HH:MM:SS>` and `Deleted_<same>` instead.
* bind time (`hami.io/bind-time`, also `hami.io/vgpu-time`): Unix seconds in decimal.

Numbers are read as Go's `strconv.ParseInt(s, 10, 32)` reads them (HAMi's decoders): an
optional sign, decimal digits, the int32 range; so `+4` and `-1` (a NUMA node sysfs cannot
tell) decode. Whether a negative figure makes sense is the reader's call: a card index must
not be negative (HAMi's rule); the scheduler and the plugin refuse negative shares.

Every decoder raises only `CodecError`, whose message names the annotation and the part.
Nothing here does I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from hami_dcu.common.protocol import keys, untrusted
from hami_dcu.common.protocol.errors import HamiDcuError

INT32_MAX = 2**31 - 1


PART_SHOWN = 120  # characters of an undecodable value quoted in a CodecError


class CodecError(HamiDcuError, ValueError):
    """A wire value that cannot be decoded. The message names the annotation and the part."""

    def __init__(self, annotation: str, part: str, problem: str) -> None:
        self.annotation = annotation
        self.part = part
        self.problem = problem
        # The part is what someone wrote into an annotation: shown escaped and cut short.
        super().__init__(f"{annotation}: {problem} in '{untrusted.shown(part, PART_SHOWN)}'")


# --- node device list ---------------------------------------------------------------------


@dataclass(frozen=True)
class NodeDevice:
    """One card as the plugin registers it on the node."""

    id: str
    count: int
    devmem: int  # MiB
    devcore: int  # percent, 100 for a whole card
    type: str  # model, e.g. "DCU-K100_AI"
    numa: int = 0
    health: bool = True
    index: int = 0
    mode: str = keys.DEVICE_MODE


# What an error names when the caller does not say which annotation the value is (the key is
# the naming set's, which only the caller knows).
NODE_DEVICES = "node device list"
POD_DEVICES = "pod device list"


def encode_node_devices(devices: list[NodeDevice], annotation: str = NODE_DEVICES) -> str:
    """Encode in the 9-field string form, each card terminated by `:`; `annotation` only
    names the value in errors."""
    out = []
    for d in devices:
        dev_id = _check_field(annotation, "device id", d.id)
        dev_type = _check_field(annotation, "device type", d.type)
        mode = _check_field(annotation, "mode", d.mode)
        out.append(
            f"{dev_id},{d.count},{d.devmem},{d.devcore},{dev_type},{d.numa},{_go_bool(d.health)},{d.index},{mode}:"
        )
    return "".join(out)


def decode_node_devices(value: str, annotation: str = NODE_DEVICES) -> list[NodeDevice]:
    """Decode the string form (7 or 9 fields a card) or a JSON array of DeviceInfo. Both
    naming sets write the same form (Hygon's v3 plugin: `HCU-<serial>,4,...,HCU-<model>,
    <numa>,true,<index>,hami:`); `annotation` only names the value in errors."""
    stripped = value.strip()
    # A string-form value always ends with the record terminator ':'; a JSON array with ']'.
    if stripped.startswith("[") and stripped.endswith("]"):
        return _decode_node_devices_json(stripped, annotation)
    text = value
    if ":" not in text:
        raise CodecError(annotation, value, "no device record (records end with ':')")
    devices = []
    for record in text.split(":"):
        if not record:
            continue
        fields = record.split(",")
        if len(fields) not in (7, 9):
            raise CodecError(annotation, record, f"{len(fields)} fields, expected 7 or 9")
        dev_id, count, devmem, devcore, dev_type, numa, health = fields[:7]
        if not dev_id:
            raise CodecError(annotation, record, "empty device id")
        index, mode = 0, keys.LEGACY_DEVICE_MODE
        if len(fields) == 9:
            index = _int32(annotation, record, "index", fields[7])
            if index < 0:
                raise CodecError(annotation, record, f"index {index} is negative")
            mode = fields[8]
        devices.append(
            NodeDevice(
                id=dev_id,
                count=_int32(annotation, record, "count", count),
                devmem=_int32(annotation, record, "devmem", devmem),
                devcore=_int32(annotation, record, "devcore", devcore),
                type=dev_type,
                numa=_int32(annotation, record, "numa", numa),
                health=_go_parse_bool(annotation, record, health),
                index=index,
                mode=mode,
            )
        )
    return devices


def _decode_node_devices_json(text: str, annotation: str) -> list[NodeDevice]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CodecError(annotation, text[:80], f"invalid JSON ({exc.msg})") from exc
    except ValueError as exc:  # a number past Python's 4,300-digit limit for int()
        raise CodecError(annotation, text[:80], "invalid JSON (a number too long to read)") from exc
    if not isinstance(items, list):
        raise CodecError(annotation, text[:80], "JSON value is not an array")
    devices = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("id"), str) or not item["id"]:
            raise CodecError(annotation, json.dumps(item)[:80], "device without an id")
        part = item["id"]
        # HAMi's JSON omits zero values (omitempty), so absent numbers are 0, absent health false.
        devices.append(
            NodeDevice(
                id=item["id"],
                count=_json_int(annotation, part, "count", item.get("count", 0)),
                devmem=_json_int(annotation, part, "devmem", item.get("devmem", 0)),
                devcore=_json_int(annotation, part, "devcore", item.get("devcore", 0)),
                type=str(item.get("type", "")),
                numa=_json_int(annotation, part, "numa", item.get("numa", 0)),
                health=item.get("health", False) is True,
                index=_json_int(annotation, part, "index", item.get("index", 0)),
                mode=str(item.get("mode", "")),
            )
        )
    return devices


# --- pod device list ----------------------------------------------------------------------


@dataclass(frozen=True)
class ContainerDevice:
    """One card (or a share of it) given to one container."""

    uuid: str
    type: str  # the request type, "DCU", never the card model
    usedmem: int  # MiB
    usedcores: int  # percent of the card


# One entry per container in codec order (init containers first); an empty list is a
# container without a DCU.
PodDevices = list[list[ContainerDevice]]


def encode_pod_devices(pod_devices: PodDevices, annotation: str = POD_DEVICES) -> str:
    """`annotation` only names the value in errors."""
    out = []
    for container in pod_devices:
        for d in container:
            uuid = _check_field(annotation, "device uuid", d.uuid)
            dev_type = _check_field(annotation, "device type", d.type)
            out.append(f"{uuid},{dev_type},{d.usedmem},{d.usedcores}:")
        out.append(";")
    return "".join(out)


def decode_pod_devices(value: str, annotation: str = POD_DEVICES) -> PodDevices:
    """Decode a pod device list, keeping empty entries so index i is container i.

    Every entry is terminated by `;`, so the text after the last `;` is not an entry (HAMi
    HEAD keeps it as one more empty entry; dropping it makes decode(encode(x)) == x and
    changes no container's index). Text without a final `;` is read as one last entry.
    HAMi v2.5's placeholder record `,,0,0` (no uuid) decodes as "no device". `annotation`
    only names the value in errors.
    """
    if value == "":
        return []
    entries = value.split(";")
    if entries[-1] == "":
        entries.pop()
    return [_decode_container_devices(entry, annotation) for entry in entries]


def _decode_container_devices(entry: str, annotation: str) -> list[ContainerDevice]:
    devices = []
    for record in entry.split(":"):
        if "," not in record:
            continue  # HAMi skips a segment without a comma ("" between terminators, stray text)
        fields = record.split(",")
        if len(fields) < 4:
            raise CodecError(annotation, record, f"{len(fields)} fields, expected UUID,Type,Usedmem,Usedcores")
        uuid, dev_type = fields[0], fields[1]
        usedmem = _int32(annotation, record, "usedmem", fields[2])
        usedcores = _int32(annotation, record, "usedcores", fields[3])
        if not uuid:
            continue
        devices.append(ContainerDevice(uuid=uuid, type=dev_type, usedmem=usedmem, usedcores=usedcores))
    return devices


# --- node lock ----------------------------------------------------------------------------


@dataclass(frozen=True)
class LockValue:
    """Who holds a node's lock and since when. Legacy locks name no holder."""

    since: datetime
    namespace: str | None = None
    name: str | None = None

    @property
    def holder(self) -> str:
        return f"{self.namespace}/{self.name}" if self.name else "an unnamed holder (legacy lock)"

    def held_by(self, namespace: str, name: str) -> bool:
        return self.namespace == namespace and self.name == name


def encode_lock(lock: LockValue) -> str:
    stamp = format_rfc3339(lock.since)
    if lock.name is None:
        return stamp
    return f"{stamp},{lock.namespace},{lock.name}"


def decode_lock(value: str, annotation: str = keys.NODE_LOCK) -> LockValue:
    parts = value.split(",")
    if len(parts) == 1:
        return LockValue(since=_parse_rfc3339(annotation, value, parts[0]))
    if len(parts) != 3:
        raise CodecError(annotation, value, "expected '<RFC3339>,<namespace>,<name>'")
    since = _parse_rfc3339(annotation, value, parts[0])
    if not parts[1] or not parts[2]:
        return LockValue(since=since)  # names nobody: see the module docstring
    return LockValue(since=since, namespace=parts[1], name=parts[2])


def format_rfc3339(moment: datetime) -> str:
    """Go's time.RFC3339: seconds precision, `Z` for UTC, `+hh:mm` otherwise."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    text = moment.replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _parse_rfc3339(annotation: str, whole: str, text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise CodecError(annotation, whole, f"timestamp {text!r} is not RFC3339") from exc
    if moment.tzinfo is None:
        raise CodecError(annotation, whole, f"timestamp {text!r} has no time zone")
    return moment


# --- bind time ----------------------------------------------------------------------------


def encode_unix_seconds(moment: datetime) -> str:
    return str(int(moment.timestamp()))


def decode_unix_seconds(value: str, annotation: str = keys.POD_BIND_TIME) -> datetime:
    text = value.strip()
    # Decimal digits only: int() would also take '+', '_' and Unicode digits, which HAMi's
    # strconv.ParseInt does not.
    if not text.isascii() or not text.isdigit() or len(text) > 12:
        raise CodecError(annotation, value, "expected Unix seconds")
    return datetime.fromtimestamp(int(text), UTC)


# --- handshake ----------------------------------------------------------------------------

_REQUESTING_FORMAT = "%Y-%m-%d %H:%M:%S"
# Volcano's Hygon deviceshare writes Go's layout `2006.01.02 15:04:05` from its local clock
# and reads it back with time.Parse, which takes a zoneless time as UTC: its 60 s staleness
# rule therefore counts from the stamp read as UTC, and so do we (a scheduler container runs
# in UTC unless told otherwise, and then the two agree).
_VOLCANO_FORMAT = "%Y.%m.%d %H:%M:%S"


@dataclass(frozen=True)
class Handshake:
    """The plugin says `Reported`, the scheduler answers `Requesting`; `at` is None when the
    time could not be read (HAMi then treats the node as healthy)."""

    state: str  # keys.HANDSHAKE_REPORTED / HANDSHAKE_REQUESTING / HANDSHAKE_DELETED / "" unknown
    at: datetime | None
    by_volcano: bool = False  # stamped in the layout of Volcano's Hygon deviceshare


def encode_reported(now: datetime) -> str:
    # HAMi's plugin writes Go's time.String(); nobody parses it, so ISO text is compatible.
    return f"{keys.HANDSHAKE_REPORTED} {now.isoformat()}"


def encode_requesting(now: datetime) -> str:
    # The scheduler side parses this one, as local time, in Go's time.DateTime layout.
    return f"{keys.HANDSHAKE_REQUESTING}_{now.astimezone().strftime(_REQUESTING_FORMAT)}"


def encode_volcano_requesting(now: datetime) -> str:
    """What Volcano's Hygon deviceshare stamps on a node whose plugin it takes up (its local
    clock, its own layout)."""
    return f"{keys.HANDSHAKE_REQUESTING}_{now.astimezone().strftime(_VOLCANO_FORMAT)}"


def encode_volcano_deleted(now: datetime) -> str:
    """What Volcano's Hygon deviceshare stamps on a node it drops (no answer for 60 s)."""
    return f"{keys.HANDSHAKE_DELETED}_{now.astimezone().strftime(_VOLCANO_FORMAT)}"


def decode_handshake(value: str) -> Handshake:
    if value.startswith(keys.HANDSHAKE_REQUESTING):
        _, _, stamp = value.partition("_")
        at, by_volcano = _requesting_time(stamp)
        return Handshake(keys.HANDSHAKE_REQUESTING, at, by_volcano)
    if value.startswith(keys.HANDSHAKE_REPORTED):
        stamp = value[len(keys.HANDSHAKE_REPORTED) :].strip()
        try:
            at = datetime.fromisoformat(stamp)
            at = at if at.tzinfo else at.astimezone()
        except ValueError:
            # Go's time.String() ("2025-08-07 10:00:00.1 +0800 CST m=+30.0") from HAMi's plugin.
            at = _parse_go_time_string(stamp)
        return Handshake(keys.HANDSHAKE_REPORTED, at)
    if value.startswith(keys.HANDSHAKE_DELETED):
        _, _, stamp = value.partition("_")
        return Handshake(keys.HANDSHAKE_DELETED, None, _requesting_time(stamp)[1])
    return Handshake("", None)


def _requesting_time(stamp: str) -> tuple[datetime | None, bool]:
    """The time in HAMi's layout (local time), else in Volcano's (UTC, as the fork reads
    it), None when neither reads it; and whether it was Volcano's."""
    try:
        return datetime.strptime(stamp, _REQUESTING_FORMAT).astimezone(), False
    except ValueError:
        pass
    try:
        return datetime.strptime(stamp, _VOLCANO_FORMAT).replace(tzinfo=UTC), True
    except ValueError:
        return None, False


def _parse_go_time_string(stamp: str) -> datetime | None:
    fields = stamp.split(" ")
    if len(fields) < 3:
        return None
    day, clock, offset = fields[0], fields[1].split(".")[0], fields[2]
    try:
        return datetime.strptime(f"{day} {clock} {offset}", "%Y-%m-%d %H:%M:%S %z")
    except ValueError:
        return None


# --- helpers ------------------------------------------------------------------------------


_DECIMAL = re.compile(r"[+-]?[0-9]+")
INT32_MIN = -(2**31)
_INT32_DIGITS = len(str(INT32_MAX))
# Characters that separate fields, records and entries: never allowed inside a field.
_SEPARATORS = re.compile(r"[,:;]")


def _int32(annotation: str, record: str, field: str, text: str) -> int:
    # Go's ParseInt(s, 10, 32): a sign and decimal digits only (Python's int() would also
    # take " 5" and "1_000"). The digit count is checked before int(), which is slow on a
    # long string and refuses one past 4,300 digits.
    if not _DECIMAL.fullmatch(text) or len(text.lstrip("+-").lstrip("0")) > _INT32_DIGITS:
        if _DECIMAL.fullmatch(text):
            raise CodecError(annotation, record, f"{field} {text[:20]!r} is out of the int32 range")
        raise CodecError(annotation, record, f"{field} {text[:20]!r} is not an integer")
    number = int(text)
    if not INT32_MIN <= number <= INT32_MAX:
        raise CodecError(annotation, record, f"{field} {text} is out of the int32 range")
    return number


def _check_field(annotation: str, field: str, text: str) -> str:
    if not text and field in ("device id", "device uuid"):
        raise CodecError(annotation, text, f"{field} is empty")
    if _SEPARATORS.search(text):
        raise CodecError(annotation, text, f"{field} must not contain ',', ':' or ';'")
    return text


def _json_int(annotation: str, part: str, field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise CodecError(annotation, part, f"{field} {untrusted.shown(repr(value), 40)} is not an integer")
    if not INT32_MIN <= value <= INT32_MAX or (field == "index" and value < 0):
        shown = value if abs(value) <= 2**63 else "(beyond int64)"
        raise CodecError(annotation, part, f"{field} {shown} is out of range")
    return value


def _go_bool(value: bool) -> str:
    return "true" if value else "false"


_GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}
_GO_FALSE = {"0", "f", "F", "FALSE", "false", "False"}


def _go_parse_bool(annotation: str, record: str, text: str) -> bool:
    """strconv.ParseBool's accepted spellings, nothing more."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise CodecError(annotation, record, f"health {text!r} is not a boolean")

"""What the driver prepared, per claim: the durable record a restart rebuilds from.

One JSON file per claim UID in the driver's state directory (mounted into no container).
It is written before any file a container sees and removed after them, so it is the truth:
after a crash the vdev files and CDI specs are rewritten from it. The record's format is
declared once, as marshmallow schemas (`ClaimRecordSchema`), for writing and for reading
back: a record that does not match says which field, and is left for a person. `encode` and
`decode` are pure.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marshmallow import ValidationError, fields, post_dump, post_load, pre_load, validate

from hami_dcu.common.protocol import safejson
from hami_dcu.common.protocol.dra import names
from hami_dcu.common.protocol.errors import DraError
from hami_dcu.common.protocol.schema import JsonBoolean, Strict, load, one_line
from hami_dcu.common.protocol.untrusted import shown
from hami_dcu.node.vdev import VdevDir, VdevSpec, write_atomic

log = logging.getLogger(__name__)
JSON = dict[str, Any]
RECORD_VERSION = 1


@dataclass(frozen=True)
class VdevGrant:
    """A vDCU: the allocator's grant and what its vdev file says."""

    card_index: int
    cu_mask: int
    pipe: int
    vdev: int
    cu_count: int
    memory_mib: int


@dataclass(frozen=True)
class PreparedDevice:
    request: str
    pool: str
    device: str
    share_id: str | None
    pci_bus_id: str
    dri_card: str  # host paths of the card's DRM nodes
    dri_render: str
    vdev: VdevGrant | None  # None: the whole card
    # adminAccess (monitoring): the card's nodes without holding it; absent from older records.
    admin: bool = False

    def cdi_name(self, claim_uid: str) -> str:
        # CDI device names allow [A-Za-z0-9_.:-]; the request may be "request/subrequest".
        return f"{claim_uid}-{self.device}-{self.request.replace('/', '.')}"

    def vdev_spec(self, claim_uid: str) -> VdevSpec | None:
        if self.vdev is None:
            return None
        g = self.vdev
        # The vdev directory names the claim where device-plugin mode names the pod, and the
        # request where it names the container: both are DNS labels without "_".
        return VdevSpec(pod_uid=claim_uid, container=self.request.replace("/", "-"), card_index=g.card_index,
                        pipe=g.pipe, vdev=g.vdev, cu_mask=g.cu_mask, cu_count=g.cu_count, memory_mib=g.memory_mib,
                        pci_bus_id=self.pci_bus_id)

    def vdev_dir(self, claim_uid: str) -> VdevDir | None:
        """The grant in the allocator's terms, to take back or free it."""
        if self.vdev is None:
            return None
        g = self.vdev
        return VdevDir(pod_uid=claim_uid, container=self.request, card_index=g.card_index, pipe=g.pipe, vdev=g.vdev,
                       cu_mask=g.cu_mask)


@dataclass(frozen=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]

    def cdi_ids(self, device: PreparedDevice) -> list[str]:
        return [f"{names.CDI_KIND}={device.cdi_name(self.uid)}"]


class RecordError(DraError, ValueError):
    pass


class HexMask(fields.Field[int]):
    """A CU mask as the record writes it: "0x..." (up to 128 bits: JSON numbers lose them)."""

    default_error_messages = {"invalid": "Not a CU mask (a hexadecimal string such as 0x3f)."}

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> str:
        return hex(value)

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> int:
        if not isinstance(value, str):
            raise self.make_error("invalid")
        try:
            mask = int(value, 16)
        except ValueError:
            raise self.make_error("invalid") from None
        if not 0 <= mask < 1 << 128:
            raise self.make_error("invalid")
        return mask


def _count(key: str) -> fields.Integer:
    return fields.Integer(required=True, strict=True, data_key=key, validate=validate.Range(min=0))


def _text(key: str) -> fields.String:
    return fields.String(required=True, data_key=key)


class VdevGrantSchema(Strict):
    card_index = _count("cardIndex")
    cu_mask = HexMask(required=True, data_key="cuMask")
    pipe = _count("pipe")
    vdev = _count("vdev")
    cu_count = _count("cuCount")
    memory_mib = _count("memoryMiB")

    @post_load
    def _grant(self, data: JSON, **_kwargs: Any) -> VdevGrant:
        return VdevGrant(**data)


class PreparedDeviceSchema(Strict):
    request = _text("request")
    pool = _text("pool")
    device = _text("device")
    share_id = fields.String(load_default=None, data_key="shareID")
    pci_bus_id = _text("pciBusID")
    dri_card = _text("driCard")
    dri_render = _text("driRender")
    vdev = fields.Nested(VdevGrantSchema, load_default=None)  # null: the whole card
    # Written only when true; records from before adminAccess have none.
    admin = JsonBoolean(load_default=False, data_key="adminAccess")

    @post_dump
    def _admin_only_when_true(self, data: JSON, **_kwargs: Any) -> JSON:
        if not data["adminAccess"]:
            del data["adminAccess"]
        return data

    @post_load
    def _device(self, data: JSON, **_kwargs: Any) -> PreparedDevice:
        return PreparedDevice(**data)


class ClaimRecordSchema(Strict):
    version = fields.Integer(required=True, strict=True, dump_default=RECORD_VERSION)
    uid = _text("uid")
    namespace = _text("namespace")
    name = _text("name")
    devices = fields.List(fields.Nested(PreparedDeviceSchema), required=True)

    @pre_load
    def _same_format(self, data: object, **_kwargs: Any) -> object:
        """A record of another format is refused as such, before its fields are compared to ours."""
        if isinstance(data, dict) and data.get("version") != RECORD_VERSION:
            found = f"format {shown(data['version'])}" if "version" in data else "no format version"
            raise ValidationError(f"Record has {found}; this driver reads format {RECORD_VERSION}.", "version")
        return data

    @post_load
    def _claim(self, data: JSON, **_kwargs: Any) -> PreparedClaim:
        return PreparedClaim(uid=data["uid"], namespace=data["namespace"], name=data["name"],
                             devices=tuple(data["devices"]))


_RECORD = ClaimRecordSchema()


def encode(record: PreparedClaim) -> str:
    return json.dumps(_RECORD.dump(record), indent=1, sort_keys=True) + "\n"


def decode(text: str | bytes) -> PreparedClaim:
    try:
        data = safejson.loads(text)  # bounded: a corrupt file must not take the driver down
    except safejson.JsonError as exc:
        raise RecordError(str(exc)) from exc
    try:
        record: PreparedClaim = load(_RECORD, data)
    except ValidationError as exc:
        raise RecordError(f"malformed record: {one_line(exc.messages)}") from exc
    return record


class RecordStore:
    """The records on disk: `<dir>/<claim uid>.json`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, uid: str) -> Path:
        return self.directory / f"{uid}.json"

    def save(self, record: PreparedClaim) -> None:
        write_atomic(self.path(record.uid), encode(record))

    def remove(self, uid: str) -> None:
        self.path(uid).unlink(missing_ok=True)

    def load_all(self) -> list[PreparedClaim]:
        """Every readable record; an unreadable one is logged and kept on disk for a person."""
        try:
            files = sorted(self.directory.glob("*.json"))
        except OSError:
            return []
        records = []
        for path in files:
            try:
                record = decode(path.read_bytes())
            except (OSError, RecordError) as exc:
                log.error("DRA record %s cannot be read, ignored: %s", path, exc)
                continue
            if record.uid != path.stem:
                log.error("DRA record %s names claim %s, ignored", path, record.uid)
                continue
            records.append(record)
        return records

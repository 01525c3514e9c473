"""The plugin's own record of its grants, in a directory no container can reach.

Each vDCU's directory under the vdev dir is mounted into its container (read-only), so what
it holds is not evidence of anything: a restart rebuilds from this store instead. One file per
grant, `<vdev dirname>.conf`, holding the vDCU's configuration exactly as rendered for the
container (vdev.render_conf: one encoder); the name records the grant (vdev.parse_dirname), the
`PciBusId` line the card it was made on. Files are written atomically, readable by root only.

Both parts are HAMi's formats and stay in their codec (`vdev.py`); what a record must say is
declared once, as a marshmallow schema (`GrantRecordSchema`), so a record that is not one of
ours (a negative index, a mask wider than a card's 128 bits, a vdev id past the node's) is
refused naming the field, and the others are still taken back.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

from marshmallow import ValidationError, fields, post_load, validate

from hami_dcu.common.protocol.errors import DevicePluginError
from hami_dcu.common.protocol.schema import Strict, one_line
from hami_dcu.node.allocator import PIPES_PER_CARD, VDEVS_PER_NODE
from hami_dcu.node.vdev import (
    VDEV_CONF,
    VdevDir,
    VdevSpec,
    conf_bus_id,
    parse_dirname,
    render_conf,
    write_atomic,
)

log = logging.getLogger(__name__)
SUFFIX = ".conf"
ADOPTED = "# adopted from "  # how a record adopted by directory name begins
RECORD_MODE = 0o600


class GrantRecordError(DevicePluginError, ValueError):
    """A file in the store that is not a grant record of ours; the message says why."""


def _index(most: int | None = None) -> fields.Integer:
    return fields.Integer(required=True, strict=True, validate=validate.Range(min=0, max=most))


class GrantRecordSchema(Strict):
    """What one record says: the grant (from its name) and its card's PCI bus id (from its
    configuration; None for a grant adopted by name)."""

    pod_uid = fields.String(required=True, validate=validate.Length(min=1))
    container = fields.String(required=True, validate=validate.Length(min=1))
    card_index = _index()
    pipe = _index(PIPES_PER_CARD - 1)
    vdev = _index(VDEVS_PER_NODE - 1)
    cu_mask = fields.Integer(required=True, strict=True, validate=validate.Range(min=0, max=(1 << 128) - 1))
    pci_bus_id = fields.String(load_default=None)

    @post_load
    def _record(self, data: dict[str, Any], **_kwargs: Any) -> tuple[VdevDir, str | None]:
        bus_id = data.pop("pci_bus_id")
        return VdevDir(**data), bus_id


_RECORD = GrantRecordSchema()


def load_record(dirname: str, conf: str | None) -> tuple[VdevDir, str | None]:
    """The grant a record named `dirname` with configuration `conf` (None: unreadable) holds,
    and its card's PCI bus id. Raises GrantRecordError. Pure."""
    grant = parse_dirname(dirname)
    if grant is None:
        raise GrantRecordError("not a grant record (its name is not a vdev directory name)")
    try:
        record: tuple[VdevDir, str | None] = _RECORD.load(
            {**dataclasses.asdict(grant), "pci_bus_id": None if conf is None else conf_bus_id(conf)})
    except ValidationError as exc:
        raise GrantRecordError(f"not a grant of this plugin: {one_line(exc.messages)}") from exc
    return record


class GrantStore:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def save(self, spec: VdevSpec) -> None:
        write_atomic(self.directory / (spec.dirname + SUFFIX), render_conf(spec, device_id=0))
        os.chmod(self.directory / (spec.dirname + SUFFIX), RECORD_MODE)

    def conf_text(self, dirname: str) -> str | None:
        """The vDCU configuration recorded for grant `dirname` (None: no record, or a grant
        adopted by name, whose record holds no configuration)."""
        try:
            text = (self.directory / (dirname + SUFFIX)).read_text()
        except (OSError, UnicodeDecodeError):
            return None
        return None if text.startswith(ADOPTED) else text

    def remove(self, dirname: str) -> None:
        (self.directory / (dirname + SUFFIX)).unlink(missing_ok=True)

    def records(self) -> list[tuple[str, VdevDir, str | None]]:
        """(dirname, grant, PCI bus id or None) of every record, sorted by name."""
        try:
            names = sorted(p.name for p in self.directory.iterdir() if p.name.endswith(SUFFIX) and p.is_file())
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            dirname = name.removesuffix(SUFFIX)
            try:
                conf: str | None = (self.directory / name).read_text()
            except (OSError, UnicodeDecodeError):
                conf = None  # unreadable: kept on the card its name says, as an adopted grant is
            try:
                record, bus_id = load_record(dirname, conf)
            except GrantRecordError as exc:
                log.warning("grant store %s: ignoring %s: %s", self.directory, name, exc)
                continue
            found.append((dirname, record, bus_id))
        return found

    def adopt_legacy(self, vdev_dir: Path) -> int:
        """Once, when the store is new and the vdev dir is not (an upgrade from a plugin without
        a store): record every grant by its directory's name. Its vdev0.conf is not read, so
        nothing a container wrote decides a card; a grant whose card index shifted since is
        kept on the index its name says."""
        if self.directory.exists() and any(self.directory.iterdir()):
            return 0
        try:
            names = sorted(p.name for p in vdev_dir.iterdir() if p.is_dir() and parse_dirname(p.name))
        except FileNotFoundError:
            return 0
        self.directory.mkdir(parents=True, exist_ok=True)
        for name in names:
            write_atomic(self.directory / (name + SUFFIX), f"{ADOPTED}{vdev_dir / name / VDEV_CONF}\n")
            os.chmod(self.directory / (name + SUFFIX), RECORD_MODE)
        if names:
            log.warning("grant store %s: adopted %d grants from %s by their directory names (first start with a "
                        "state dir)", self.directory, len(names), vdev_dir)
        return len(names)

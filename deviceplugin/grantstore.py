"""The plugin's own record of its grants, in a directory no container can reach.

Each vDCU's directory under the vdev dir is mounted into its container (read-only), so what
it holds is not evidence of anything: a restart rebuilds from this store instead. One file per
grant, `<vdev dirname>.conf`, holding the vDCU's configuration exactly as rendered for the
container (vdev.render_conf: one encoder); the name records the grant (vdev.parse_dirname), the
`PciBusId` line the card it was made on. Files are written atomically, readable by root only.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

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
        except OSError:
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
            record = parse_dirname(dirname)
            if record is None:
                log.warning("grant store %s: ignoring %s, not a grant record", self.directory, name)
                continue
            try:
                bus_id = conf_bus_id((self.directory / name).read_text())
            except OSError:
                bus_id = None
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

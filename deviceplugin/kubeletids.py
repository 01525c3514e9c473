"""Which kubelet device ids each vDCU was granted for, so the kubelet's pod resources answer
(container -> device ids) finds the container's vDCU: `<state dir>/<grant dirname>.ids`, one
id a line, written at Allocate beside the grant record (`.conf`) and removed with it.

The kubelet hands a device id to one container at a time and reports exactly the ids it passed
to Allocate, so the ids name the grant even when they are on another card than the one the
scheduler chose (the grant follows the scheduler). Not fsynced: after a power loss the node's
pods start again and are allocated anew.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from hami_dcu.node.vdev import write_atomic

log = logging.getLogger(__name__)
SUFFIX = ".ids"


class KubeletIds:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def save(self, dirname: str, ids: Sequence[str]) -> None:
        write_atomic(self.directory / (dirname + SUFFIX), "".join(f"{i}\n" for i in ids), durable=False)

    def remove(self, dirname: str) -> None:
        (self.directory / (dirname + SUFFIX)).unlink(missing_ok=True)

    def load(self) -> dict[str, str]:
        """Kubelet device id -> grant dirname, for every grant with a record."""
        found: dict[str, str] = {}
        try:
            paths = sorted(p for p in self.directory.iterdir() if p.name.endswith(SUFFIX))
        except FileNotFoundError:
            return found
        for path in paths:
            try:
                ids = path.read_text().split()
            except OSError as exc:
                log.warning("kubelet ids record %s cannot be read: %s", path, exc)
                continue
            found |= dict.fromkeys(ids, path.name.removesuffix(SUFFIX))
        return found

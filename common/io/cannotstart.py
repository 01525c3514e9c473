"""The one failure a component's shell raises when it cannot start with what it was given
(flags, files, the SMI): the CLI says it on one line and exits 2 (cli/errors.py), where a
log line with a timestamp would read as something that happened while running."""

from __future__ import annotations

from hami_dcu.common.protocol.errors import HamiDcuError


class CannotStart(HamiDcuError, RuntimeError):
    pass

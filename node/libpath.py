"""Where the plugin may load a shared library from: only a file that no one but root can
change, in directories no one but root can change (as sshd's StrictModes judges key files).

The plugin runs as root and loads `librocm_smi64.so` from the host's DTK: were any directory on
the way writable by a container or another user, planting a library there would run code as
the plugin. The chart mounts the DTK read-only into tenants; this check makes a mistake there
(or on the host) a clear start failure instead of a silent load.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


def find(name: str, search: str | None) -> Path | None:
    """`name` as the dynamic loader would find it on `search` (LD_LIBRARY_PATH), or None when
    it is not there (the loader then says why it cannot load it)."""
    if "/" in name:
        return Path(name) if Path(name).exists() else None
    for directory in (search or "").split(":"):
        if directory and (Path(directory) / name).is_file():
            return Path(directory) / name
    return None


def unsafe(path: Path) -> str | None:
    """Why loading `path` is unsafe, or None: the file (after symlinks) and every directory
    above it must be owned by root and writable by no group or other user."""
    resolved = path.resolve()
    for item in [resolved, *resolved.parents]:
        try:
            info = os.stat(item)
        except OSError as exc:
            return f"{item}: {exc.strerror}"
        if info.st_uid != 0:
            return f"{item} is owned by uid {info.st_uid}, not root"
        sticky_dir = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not (sticky_dir and item != resolved.parent):
            return f"{item} is writable by {'others' if info.st_mode & stat.S_IWOTH else 'its group'}"
    return None

"""The node state two driver processes share during a rolling update (docs/operations.md,
"Upgrading the DRA driver").

While the DaemonSet replaces its pod, the old and the new driver run side by side on the node,
both registered with the kubelet, which may prepare a claim in one and unprepare it in the
other. Both keep the records, the vDCU allocator and the prepared claims in memory, rebuilt from
the records on disk; each would otherwise hand out CUs, pipes and vdev ids the other already
granted. So every call that reads or changes them holds one lock over the node's state
directory, `fcntl.flock` on a file there (both pods mount the same host directory), and reloads
from the records first when they changed since this process last held it.

A change is known two ways. Every holder that changed the records leaves a fresh token in the
lock file; and the record directory's listing (names, inodes, mtimes, sizes) is compared too,
which also catches a driver from before this lock (the first upgrade to it), which writes
records without the token.
"""

from __future__ import annotations

import fcntl
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = "node-state.lock"
TOKEN_BYTES = 64  # a token is 32 hex digits; more is read to see a longer, foreign one as different

Listing = frozenset[tuple[str, int, int, int]]


class Hold:
    """One holding of the lock: `stale` when the records changed since this process last held
    it (reload them before reading the memory); `changed()` once this holder wrote them."""

    __slots__ = ("changes", "stale")

    def __init__(self, stale: bool) -> None:
        self.stale = stale
        self.changes = False

    def changed(self) -> None:
        self.changes = True


class SharedState:
    """The lock over `<state dir>/node-state.lock`, for the records in `records`. Threads of
    one process are serialized by a thread lock first: flock excludes other open files, not the
    threads sharing this one."""

    def __init__(self, state_dir: Path, records: Path) -> None:
        self.path = state_dir / LOCK_FILE
        self.records = records
        self._thread_lock = threading.Lock()
        self._seen: tuple[bytes, Listing] | None = None  # None: never held, everything is stale

    @contextmanager
    def hold(self) -> Iterator[Hold]:
        with self._thread_lock:
            # Opened per holding, not kept: a process simulating many nodes (bench/, e2e's
            # drasim) would otherwise keep a descriptor per node. Closing it drops the lock too.
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                hold = Hold(self._seen != (os.pread(fd, TOKEN_BYTES, 0), self._listing()))
                try:
                    yield hold
                finally:
                    token = self._mark(fd) if hold.changes else os.pread(fd, TOKEN_BYTES, 0)
                    self._seen = (token, self._listing())
            finally:
                os.close(fd)

    def _mark(self, fd: int) -> bytes:
        """A fresh token for the others to see this holder's change by."""
        token = uuid.uuid4().hex.encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, token, 0)
        return token

    def _listing(self) -> Listing:
        found = set()
        try:
            with os.scandir(self.records) as entries:
                for entry in entries:
                    if entry.name.endswith(".json") and not entry.name.startswith("."):
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:  # removed by a driver from before this lock
                            continue
                        found.add((entry.name, st.st_ino, st.st_mtime_ns, st.st_size))
        except FileNotFoundError:
            pass
        return frozenset(found)

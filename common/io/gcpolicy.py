"""Garbage collection for long-running servers whose heap is mostly long-lived objects.

CPython's full collections walk every tracked object. With 5,000 nodes and 40,000 pods in
the extender's cache (and the `kubernetes` client's modules, which the webhook loads too)
that is over a million objects, a pause of hundreds of milliseconds that lands on whichever
request is running: it set the extender's /filter p99 and the webhook's worst review.

After start-up (the webhook) or each list of nodes or pods (the extender: the start, and
every resync) the surviving objects are moved out of the collector's sight with
`gc.freeze()`: full collections then walk only what was created since, so their cost
follows the churn, not the heap's size. Frozen objects are still freed by reference
counting when dropped; only a reference cycle among them would outlive its use, and the
cache's records hold none. The collection run just before freezing keeps today's cyclic
garbage from becoming permanent; after the first freeze it too walks only the young objects.

A list also leaves megabytes of freed response buffers and decoded objects behind, many
of them in the C allocator's per-thread arenas (the API calls run on a thread pool), which
glibc does not hand back to the system by itself: `malloc_trim` after each list returns
them, so the process's RSS is what its cache holds, not what its largest list once took.

The first generation's threshold is raised from 700 to 10,000 allocations: a /filter
allocates a few hundred objects, so it rarely triggers a collection at all, and one that
runs walks at most 10,000 young objects (well under a millisecond).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time

log = logging.getLogger(__name__)
YOUNG_THRESHOLD = 10_000
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024  # glibc's default, kept from moving


def tune() -> None:
    """Once, at process start."""
    _, second, third = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, second, third)
    _fixed_mmap_threshold()


def _fixed_mmap_threshold() -> None:
    """Allocations of 128 KiB and more get their own mapping, returned to the system when
    freed. glibc otherwise raises that threshold the first time such a block is freed, and
    then serves every later one from the heap, which it keeps: each TLS connection asyncio
    accepts allocates a 256 KiB buffer, so a flood of short connections left the heap, and
    the RSS, as large as the flood's peak (issue 21)."""
    mallopt = getattr(_LIBC, "mallopt", None)
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def settle(what: str = "") -> None:
    """After start-up or a list: collect what is garbage now, freeze what survives, return
    freed memory."""
    started = time.perf_counter()
    found = gc.collect()
    gc.freeze()
    _trim()
    log.debug("gc after %s: %d unreachable, %d objects frozen, %.0f ms", what, found,
              gc.get_freeze_count(), (time.perf_counter() - started) * 1000)


def release_garbage() -> None:
    """Collect cyclic garbage now and hand the freed memory back (after a burst of dropped
    connections: asyncio's TLS connections sit in reference cycles, each with 256 KiB of
    buffers, until a collection that the raised threshold makes rare)."""
    gc.collect()
    _trim()


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name) if name else None
    except OSError:
        return None


_LIBC = _libc()


def _trim() -> None:
    """Hand freed heap memory back to the system (glibc's malloc_trim; nothing elsewhere)."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)

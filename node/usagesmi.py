"""What the cards and vDCUs on this node use right now: busy percent and memory in use.

* `DmiUsage` asks the driver: cards through ROCm SMI (`rsmi_dev_busy_percent_get`,
  `rsmi_dev_memory_usage_get`, the library the SMI backend already loaded), vDCUs through
  Hygon's DMI library `libhydmi.so` (`dmiGetVDeviceInfo`, `dmiGetVDevBusyPercent`), which
  knows each vDCU by the vdev id of its `/etc/vdev/vdev<N>.conf`.
* `MockUsage` makes numbers up for mock cards: deterministic per seed and time, and different
  from one second to the next, so tests (and the kind suite) can see them change.

Decoding what the libraries answer is pure (`vdev_usage`); nothing here decides whose usage
it is (usage.py does).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hami_dcu.common.protocol.errors import NodeError
from hami_dcu.node import libpath

log = logging.getLogger(__name__)
MIB = 1024 * 1024
DMI_NAME_SIZE = 256  # dmi_error.h
DMI_STATUS_SUCCESS = 0
RSMI_STATUS_SUCCESS = 0
RSMI_MEM_TYPE_VRAM = 0


@dataclass(frozen=True)
class Usage:
    busy_percent: float  # 0..100, of the card or of the vDCU's own compute units
    used_bytes: int


@dataclass(frozen=True)
class CardQuery:
    index: int  # SMI index
    serial: str
    memory_mib: int


@dataclass(frozen=True)
class VdevQuery:
    vdev: int  # the vdev id of /etc/vdev/vdev<N>.conf, the driver's virtual device id
    card_index: int
    memory_mib: int


@dataclass(frozen=True)
class Readings:
    cards: dict[int, Usage] = field(default_factory=dict)  # SMI index -> usage
    vdevs: dict[int, Usage] = field(default_factory=dict)  # vdev id -> usage


class UsageError(NodeError, RuntimeError):
    pass


class UsageReader(Protocol):
    def read(self, cards: Sequence[CardQuery], vdevs: Sequence[VdevQuery]) -> Readings:
        """Usage of the cards and vDCUs asked for; one that cannot be read is left out.
        Raises UsageError when nothing can be read at all."""
        ...


class DmiDeviceInfo(ctypes.Structure):
    """dmi_virtual.h's dmiDeviceInfo, field for field."""

    _fields_ = [
        ("name", ctypes.c_char * DMI_NAME_SIZE),
        ("compute_unit_count", ctypes.c_int),
        ("global_mem_size", ctypes.c_size_t),  # bytes
        ("usage_mem_size", ctypes.c_size_t),  # bytes
        ("container_id", ctypes.c_uint64),
        ("device_id", ctypes.c_int),  # the physical card's SMI index
    ]


def vdev_usage(info: DmiDeviceInfo, busy_percent: int, card_index: int) -> Usage | None:
    """A vDCU's usage from what DMI answered, None when the answer is not about the vDCU we
    granted on `card_index` (the id is another card's: the driver and our record disagree)
    or is out of range."""
    if info.device_id != card_index:
        return None
    if not 0 <= busy_percent <= 100 or info.usage_mem_size > info.global_mem_size > 0:
        return None
    return Usage(busy_percent=float(busy_percent), used_bytes=int(info.usage_mem_size))


class DmiUsage:
    """The real numbers. `rsmi` is the ROCm SMI library the SMI backend initialised; libhydmi is
    loaded on first use and, when it cannot be, vDCUs go unread (logged once) while cards are
    still read."""

    def __init__(self, rsmi: ctypes.CDLL, hydmi_library: str = "libhydmi.so") -> None:
        self.rsmi = rsmi
        self.hydmi_library = hydmi_library
        self._dmi: ctypes.CDLL | None = None
        self._dmi_error: str | None = None

    def _load_dmi(self) -> ctypes.CDLL | None:
        if self._dmi is not None or self._dmi_error is not None:
            return self._dmi
        found = libpath.find(self.hydmi_library, os.environ.get("LD_LIBRARY_PATH"))
        if found is not None and (why := libpath.unsafe(found)):
            self._dmi_error = f"refusing to load {found}: {why}"
        else:
            try:
                self._dmi = ctypes.CDLL(str(found) if found is not None else self.hydmi_library)
            except OSError as exc:
                self._dmi_error = f"cannot load {self.hydmi_library}: {exc}"
        if self._dmi_error:
            log.warning("vDCU usage is not published: %s (cards' usage still is)", self._dmi_error)
        return self._dmi

    def read(self, cards: Sequence[CardQuery], vdevs: Sequence[VdevQuery]) -> Readings:
        readings = Readings()
        for card in cards:
            busy, used = ctypes.c_uint32(), ctypes.c_uint64()
            if (self.rsmi.rsmi_dev_busy_percent_get(card.index, ctypes.byref(busy)) == RSMI_STATUS_SUCCESS
                    and self.rsmi.rsmi_dev_memory_usage_get(card.index, RSMI_MEM_TYPE_VRAM,
                                                            ctypes.byref(used)) == RSMI_STATUS_SUCCESS):
                readings.cards[card.index] = Usage(float(busy.value), int(used.value))
        dmi = self._load_dmi() if vdevs else None
        if dmi is not None:
            for vdev in vdevs:
                info, busy_int = DmiDeviceInfo(), ctypes.c_int()
                if (dmi.dmiGetVDeviceInfo(vdev.vdev, ctypes.byref(info)) != DMI_STATUS_SUCCESS
                        or dmi.dmiGetVDevBusyPercent(vdev.vdev, ctypes.byref(busy_int)) != DMI_STATUS_SUCCESS):
                    continue
                usage = vdev_usage(info, busy_int.value, vdev.card_index)
                if usage is None:
                    log.debug("vdev %d: DMI reports card %d, busy %d: not the vDCU granted on card %d", vdev.vdev,
                              info.device_id, busy_int.value, vdev.card_index)
                    continue
                readings.vdevs[vdev.vdev] = usage
        if (cards or vdevs) and not readings.cards and not readings.vdevs:
            raise UsageError("neither ROCm SMI nor DMI answered for any card or vDCU")
        return readings


def _spread(seed: int, key: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}/{key}".encode(), digest_size=8).digest(), "big")


class MockUsage:
    """Numbers for mock cards: within each `period` constant, from one period to the next always
    different (the busy percent steps by 37 modulo 101, memory by 13 % of the share modulo 89),
    the same for the same seed and time."""

    def __init__(self, seed: int = 0, clock: Callable[[], float] = time.time, period: float = 1.0) -> None:
        self.seed = seed
        self.clock = clock
        self.period = period

    def _usage(self, key: str, memory_mib: int, tick: int) -> Usage:
        base = _spread(self.seed, key)
        busy = (base + 37 * tick) % 101
        share = ((base >> 16) + 13 * tick) % 89 + 5  # 5..93 % of the memory
        return Usage(busy_percent=float(busy), used_bytes=memory_mib * MIB * share // 100)

    def read(self, cards: Sequence[CardQuery], vdevs: Sequence[VdevQuery]) -> Readings:
        tick = int(self.clock() // self.period)
        return Readings(
            cards={c.index: self._usage(f"card/{c.serial}", c.memory_mib, tick) for c in cards},
            vdevs={v.vdev: self._usage(f"vdev/{v.card_index}/{v.vdev}", v.memory_mib, tick) for v in vdevs},
        )

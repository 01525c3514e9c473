"""SMI backends: what the cards of this node are, behind one small interface.

* `RsmiBackend` reads the real cards through `librocm_smi64.so` (ctypes).
* `MockBackend` reads a YAML list of cards, for tests, the demo and kind.

Model names come from the PCI device id table and compute-unit counts from the model
table below. An unknown model is reported and gets a fallback name and CU count: never an
empty type (HAMi's plugin registered `DCU-` for one, Project-HAMi/dcu-vgpu-device-plugin#25).
"""

from __future__ import annotations

import ctypes
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml

from hami_dcu.common.protocol.errors import NodeError
from hami_dcu.node import libpath

log = logging.getLogger(__name__)

# PCI device id (hex, no 0x) -> model, as rsmi_dev_id_get reports it.
DEVICE_ID_MODELS: dict[str, str] = {
    "51b7": "Z200SM_80",
    "52b7": "ZIFANG 8182",
    "54b7": "Z100",
    "55b7": "Z100L",
    "56b7": "Z200SM_81",
    "57b7": "ZIFANG 8185",
    "61b7": "K500SM",
    "62b7": "K100",
    "6210": "K100_AI",
    "6211": "K100_LC_E_AI",
    "6212": "K100_LC_AI",
    "6213": "K100_AI_i",
    "6214": "HG Design DCU K500",
    "62a0": "K500SM_AI",
    "62b0": "K500SM_AI",
    "62c7": "K100-LC",
    "55c7": "Z200SM_71",
    "55d7": "Z200SM_71_S",
    "61a7": "K500SM_B",
    "61c7": "K500SM_B",
    "61d7": "K500SM",
    "61e7": "K500SM",
    "61f7": "HG Design DCU K500",
    "1d94": "K500SM",
}
# Compute units per model. HAMi knows only these and writes cu_count 0 for the rest.
MODEL_COMPUTE_UNITS: dict[str, int] = {
    "K100_AI": 120,
    "K100_LC_AI": 120,
    "K100_LC_E_AI": 128,
    "K100": 120,
    "Z100": 60,
    "Z100L": 60,
}
FALLBACK_MODEL = "UNKNOWN"
# Two K100_AI cards, for the demo, the chart's mock mode and `--smi mock` without a file.
SAMPLE_MOCK_DEVICES = Path(__file__).with_name("mock-devices.yaml")
# Without a known count, assume the smallest card we know: a vDCU then never gets CUs that
# do not exist, at the price of using only part of a larger unknown card.
FALLBACK_COMPUTE_UNITS = 60
MAX_COMPUTE_UNITS = 128  # two 64-bit cu_mask lines


@dataclass(frozen=True)
class Card:
    """One physical card as the SMI layer reports it."""

    index: int  # SMI device index
    serial: str
    model: str  # without the "DCU-" prefix, e.g. "K100_AI"
    memory_mib: int
    compute_units: int
    pci_bus_id: str  # "0000:3D:00.0"
    numa: int = 0
    healthy: bool = True


class SmiBackend(Protocol):
    def cards(self) -> list[Card]:
        """All cards, in SMI index order. Raises SmiError when the SMI layer fails."""
        ...


class SmiError(NodeError, RuntimeError):
    """The SMI layer failed: the node cannot say what its cards are now."""

    http_status = 503
    grpc_code = "UNAVAILABLE"


def model_for_device_id(device_id: str, unknown: list[str] | None = None) -> str:
    model = DEVICE_ID_MODELS.get(device_id.lower().removeprefix("0x"))
    if model is None:
        log.warning("unknown DCU PCI device id %s: reported as model %s", device_id, FALLBACK_MODEL)
        if unknown is not None:
            unknown.append(device_id)
        return FALLBACK_MODEL
    return model


def compute_units_for(model: str) -> int:
    units = MODEL_COMPUTE_UNITS.get(model)
    if units is None:
        log.warning("no compute-unit count known for model %s: assuming %d", model, FALLBACK_COMPUTE_UNITS)
        return FALLBACK_COMPUTE_UNITS
    return units


def format_bdf(bdf: int) -> str:
    """rsmi's 64-bit BDF id as `DDDD:BB:DD.F` (upper-case hex, as HAMi prints it)."""
    return f"{bdf >> 32 & 0xFFFFFFFF:04X}:{bdf >> 8 & 0xFF:02X}:{bdf >> 3 & 0x1F:02X}.{bdf & 0x7:X}"


def _whole(value: object, what: str, hint: str) -> int:
    """A YAML whole number; a quantity like "64Gi" is refused with what to write instead."""
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
        raise SmiError(f"{what} {value!r} is not a whole number ({hint})")
    return int(value)


class MockBackend:
    """Cards from a YAML list of `{serial, model, memory_mib, compute_units, pci_bus_id, numa}`
    (`healthy: false` marks a card unhealthy). The file is looked at on every call, so a test
    can change health under a running plugin, and parsed again only when it changed: the
    plugin asks every second, and 20 plugins parsing YAML each second were a share of the
    machine a benchmark measures."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._parsed: tuple[tuple[int, ...], list[Card] | SmiError] | None = None

    def cards(self) -> list[Card]:
        try:
            info = self.path.stat()
        except OSError as exc:
            raise SmiError(f"mock SMI file {self.path}: {exc}") from exc
        stamp = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if self._parsed is None or self._parsed[0] != stamp:
            try:
                self._parsed = (stamp, self._parse())
            except SmiError as exc:
                self._parsed = (stamp, exc)
        found = self._parsed[1]
        if isinstance(found, SmiError):
            raise SmiError(str(found))
        return list(found)

    def _parse(self) -> list[Card]:
        try:
            entries = yaml.safe_load(self.path.read_text()) or []
        except (OSError, yaml.YAMLError) as exc:
            raise SmiError(f"mock SMI file {self.path}: {exc}") from exc
        if isinstance(entries, dict):
            entries = entries.get("cards") or []
        if not isinstance(entries, list):
            raise SmiError(f"mock SMI file {self.path}: expected a list of cards, got {type(entries).__name__}")
        cards = []
        for index, entry in enumerate(entries):
            where = f"mock SMI file {self.path}: card {index}"
            if not isinstance(entry, dict):
                raise SmiError(f"{where}: expected a mapping of serial, model, memory_mib, ..., got {entry!r}")
            if "memory_mib" not in entry or "pci_bus_id" not in entry:
                missing = [k for k in ("memory_mib", "pci_bus_id") if k not in entry]
                raise SmiError(f"{where}: {' and '.join(missing)} missing")
            model = str(entry.get("model") or FALLBACK_MODEL)
            cards.append(
                Card(
                    index=index,
                    serial=str(entry.get("serial") or ""),
                    model=model,
                    memory_mib=_whole(entry["memory_mib"], f"{where}: memory_mib", "MiB, e.g. 65536 for 64Gi"),
                    compute_units=_whole(entry.get("compute_units") or compute_units_for(model),
                                         f"{where}: compute_units", "e.g. 120"),
                    pci_bus_id=str(entry["pci_bus_id"]).upper(),
                    numa=_whole(entry.get("numa", 0), f"{where}: numa", "a NUMA node number"),
                    healthy=bool(entry.get("healthy", True)),
                )
            )
        return cards


class RsmiBackend:
    """The real cards through ROCm SMI (`librocm_smi64.so`), as HAMi's dcu-dcgm reads them."""

    RSMI_STATUS_SUCCESS = 0
    RSMI_MEM_TYPE_VRAM = 0

    def __init__(self, library: str = "librocm_smi64.so") -> None:
        found = libpath.find(library, os.environ.get("LD_LIBRARY_PATH"))
        if found is not None and (why := libpath.unsafe(found)):
            raise SmiError(f"refusing to load {found}: {why} (a library anyone but root can replace would run "
                           "as the kubelet plugin, as root)")
        try:
            self.lib = ctypes.CDLL(str(found) if found is not None else library)
        except OSError as exc:
            raise SmiError(f"cannot load {library}: {exc} (is the DTK/hyhal library path set?)") from exc
        self.unknown_device_ids: list[str] = []
        self._check("rsmi_init", self.lib.rsmi_init(ctypes.c_uint64(0)))

    def _check(self, call: str, status: int) -> None:
        if status != self.RSMI_STATUS_SUCCESS:
            raise SmiError(f"{call} failed with rsmi status {status}")

    def cards(self) -> list[Card]:
        count = ctypes.c_uint32()
        self._check("rsmi_num_monitor_devices", self.lib.rsmi_num_monitor_devices(ctypes.byref(count)))
        cards = []
        for index in range(count.value):
            bdf = ctypes.c_uint64()
            self._check("rsmi_dev_pci_id_get", self.lib.rsmi_dev_pci_id_get(index, ctypes.byref(bdf)))
            serial_buf = ctypes.create_string_buffer(64)
            status = self.lib.rsmi_dev_serial_number_get(index, serial_buf, ctypes.c_uint32(64))
            serial = serial_buf.value.decode(errors="replace").strip() if status == 0 else ""
            dev_id = ctypes.c_uint16()
            self._check("rsmi_dev_id_get", self.lib.rsmi_dev_id_get(index, ctypes.byref(dev_id)))
            total = ctypes.c_uint64()
            self._check(
                "rsmi_dev_memory_total_get",
                self.lib.rsmi_dev_memory_total_get(index, self.RSMI_MEM_TYPE_VRAM, ctypes.byref(total)),
            )
            model = model_for_device_id(f"{dev_id.value:04x}", self.unknown_device_ids)
            cards.append(
                Card(
                    index=index,
                    serial=serial,
                    model=model,
                    memory_mib=total.value // (1024 * 1024),
                    compute_units=compute_units_for(model),
                    pci_bus_id=format_bdf(bdf.value),
                )
            )
        return cards

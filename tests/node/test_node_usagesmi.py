"""Usage readings: the mock's numbers change with time and repeat with the seed; the DMI
decoder and the library shell read what the driver answers and leave out what it does not."""

import ctypes
import itertools
import struct

import pytest

from hami_dcu.node.usagesmi import (
    MIB,
    CardQuery,
    DmiDeviceInfo,
    DmiUsage,
    MockUsage,
    Usage,
    UsageError,
    VdevQuery,
    vdev_usage,
)

CARDS = [CardQuery(0, "S0", 65536), CardQuery(1, "S1", 65536)]
VDEVS = [VdevQuery(3, 0, 2000), VdevQuery(5, 1, 4000)]


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_mock_numbers_change_every_period_and_stay_in_range():
    clock = Clock(1000.0)
    mock = MockUsage(seed=7, clock=clock)
    seen = []
    for step in range(120):
        clock.now = 1000.0 + step
        seen.append(mock.read(CARDS, VDEVS))
    for before, after in itertools.pairwise(seen):
        for vdev in (3, 5):
            assert before.vdevs[vdev].busy_percent != after.vdevs[vdev].busy_percent
            assert before.vdevs[vdev].used_bytes != after.vdevs[vdev].used_bytes
        assert before.cards[0] != after.cards[0]
    for reading in seen:
        for query in VDEVS:
            usage = reading.vdevs[query.vdev]
            assert 0 <= usage.busy_percent <= 100
            assert 0 < usage.used_bytes < query.memory_mib * MIB
    assert len({r.vdevs[3].busy_percent for r in seen}) > 50  # not a couple of values in turn


def test_mock_numbers_are_the_same_for_the_same_seed_and_time_and_hold_within_a_period():
    a, b = MockUsage(seed=7, clock=Clock(1000.2)), MockUsage(seed=7, clock=Clock(1000.9))
    assert a.read(CARDS, VDEVS) == b.read(CARDS, VDEVS)
    other = MockUsage(seed=8, clock=Clock(1000.2)).read(CARDS, VDEVS)
    assert other != a.read(CARDS, VDEVS)
    assert MockUsage(clock=Clock(5.0)).read([], []).vdevs == {}


def sample_info(card: int, busy_cap: int = 2000 * MIB, used: int = 1500 * MIB) -> bytes:
    """dmiDeviceInfo as the library writes it on a 64-bit Linux: name[256], int, (pad), size_t,
    size_t, uint64, int, (pad)."""
    return struct.pack("<256si4xQQQi4x", b"K100_AI", 18, busy_cap, used, 0xC0FFEE, card)


def test_dmi_device_info_has_the_headers_layout():
    raw = sample_info(card=1)
    assert ctypes.sizeof(DmiDeviceInfo) == len(raw) == 296
    info = DmiDeviceInfo.from_buffer_copy(raw)
    assert (info.name, info.compute_unit_count, info.device_id) == (b"K100_AI", 18, 1)
    assert (info.global_mem_size, info.usage_mem_size, info.container_id) == (2000 * MIB, 1500 * MIB, 0xC0FFEE)


def test_vdev_usage_decodes_a_sample_and_refuses_another_cards_or_impossible_answers():
    info = DmiDeviceInfo.from_buffer_copy(sample_info(card=1))
    assert vdev_usage(info, 72, card_index=1) == Usage(72.0, 1500 * MIB)
    assert vdev_usage(info, 72, card_index=0) is None  # the id is a vDCU of another card
    assert vdev_usage(info, 101, card_index=1) is None
    assert vdev_usage(info, -1, card_index=1) is None
    too_much = DmiDeviceInfo.from_buffer_copy(sample_info(card=1, busy_cap=1000 * MIB, used=2000 * MIB))
    assert vdev_usage(too_much, 5, card_index=1) is None


class FakeLib:
    """ROCm SMI and DMI calls as ctypes makes them: results written through byref arguments."""

    def __init__(self, busy: dict[int, int], used: dict[int, int], vdevs: dict[int, bytes]) -> None:
        self.busy, self.used, self.vdevs = busy, used, vdevs

    def rsmi_dev_busy_percent_get(self, index, out):
        if index not in self.busy:
            return 2
        out._obj.value = self.busy[index]
        return 0

    def rsmi_dev_memory_usage_get(self, index, kind, out):
        assert kind == 0  # VRAM
        out._obj.value = self.used[index]
        return 0

    def dmiGetVDeviceInfo(self, vdev, out):
        if vdev not in self.vdevs:
            return 17  # DMI_STATUS_VDEV_NOT_EXIST
        ctypes.memmove(ctypes.addressof(out._obj), self.vdevs[vdev], len(self.vdevs[vdev]))
        return 0

    def dmiGetVDevBusyPercent(self, vdev, out):
        out._obj.value = 64
        return 0


def test_dmi_usage_reads_cards_and_vdevs_and_leaves_out_what_does_not_answer():
    lib = FakeLib(busy={0: 40}, used={0: 6 * MIB, 1: 0}, vdevs={3: sample_info(card=0), 5: sample_info(card=0)})
    reader = DmiUsage(lib)  # type: ignore[arg-type]
    reader._dmi = lib  # type: ignore[assignment]
    got = reader.read(CARDS, VDEVS)
    assert got.cards == {0: Usage(40.0, 6 * MIB)}  # card 1's busy percent failed
    assert got.vdevs == {3: Usage(64.0, 1500 * MIB)}  # vdev 5 is on card 0, we granted it on card 1


def test_dmi_usage_without_libhydmi_still_reads_cards_and_fails_when_nothing_answers():
    lib = FakeLib(busy={0: 40, 1: 3}, used={0: 0, 1: 0}, vdevs={})
    reader = DmiUsage(lib, hydmi_library="libnosuchlibrary-hami-test.so")  # type: ignore[arg-type]
    got = reader.read(CARDS, VDEVS)
    assert set(got.cards) == {0, 1} and got.vdevs == {}
    assert reader._dmi_error and "libnosuchlibrary-hami-test.so" in reader._dmi_error
    with pytest.raises(UsageError):
        DmiUsage(FakeLib({}, {}, {}), hydmi_library="libnosuchlibrary-hami-test.so").read(CARDS, [])  # type: ignore[arg-type]

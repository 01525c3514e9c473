"""CU allocator properties, vdev names, SMI backends (mock and a gcc-built fake librocm_smi64)."""

import shutil
import subprocess

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.node.allocator import AllocationError, NodeState, lowest_free_bits
from hami_dcu.node.discovery import discover, drm_nodes_by_bus_id
from hami_dcu.node.faketree import lay_out
from hami_dcu.node.smi import Card, MockBackend, RsmiBackend, SmiError, format_bdf
from hami_dcu.node.vdev import VdevSpec, parse_dirname


@given(st.lists(st.integers(min_value=0, max_value=40), max_size=12), st.data())
def test_cu_grants_never_overlap_and_free_exactly(sizes, data):
    state = NodeState(compute_units={0: 120})
    grants = []
    for size in sizes:
        free = 120 - bin(state.cu_used.get(0, 0)).count("1")
        if size > free:
            with pytest.raises(AllocationError, match="compute units requested"):
                state.allocate(0, size)
            continue
        grant = state.allocate(0, size)
        assert bin(grant.cu_mask).count("1") == size
        assert all(grant.cu_mask & g.cu_mask == 0 for g in grants)
        assert grant.cu_mask < 1 << 120
        grants.append(grant)
        if grants and data.draw(st.booleans()):
            gone = grants.pop(data.draw(st.integers(0, len(grants) - 1)))
            state.release(gone)
    union = 0
    for g in grants:
        union |= g.cu_mask
    assert state.cu_used.get(0, 0) == union
    assert state.vdevs_used == {g.vdev for g in grants}


def test_lowest_free_bits_and_shortfall():
    assert lowest_free_bits(0, 18, 120) == 0x3FFFF
    assert lowest_free_bits(0x3FFFF, 1, 120) == 1 << 18  # HAMi's byteAlloc overlapped here
    assert lowest_free_bits(0b1010, 2, 8) == 0b0101
    with pytest.raises(AllocationError, match="3 compute units short"):
        lowest_free_bits((1 << 8) - 2, 4, 8)


def test_pipes_and_vdev_ids_run_out_with_clear_errors():
    state = NodeState(compute_units={0: 120})
    for _ in range(20):
        state.allocate(0, 0)
    with pytest.raises(AllocationError, match="all 20 pipes"):
        state.allocate(0, 0)


@given(
    st.text(alphabet="abcdef0123456789-", min_size=1, max_size=36),
    st.from_regex(r"[a-z]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True),
    st.integers(0, 15),
    st.integers(0, 19),
    st.integers(0, 199),
    st.integers(0, (1 << 128) - 1),
)
def test_dirname_round_trip(uid, container, card, pipe, vdev, mask):
    spec = VdevSpec(uid, container, card, pipe, vdev, mask, 1, 1, "0000:3D:00.0")
    record = parse_dirname(spec.dirname)
    assert (record.pod_uid, record.container, record.card_index, record.pipe, record.vdev, record.cu_mask) == (
        uid,
        container,
        card,
        pipe,
        vdev,
        mask,
    )


def test_mock_backend_and_errors(tmp_path):
    path = tmp_path / "cards.yaml"
    path.write_text(
        yaml.safe_dump([{"serial": "A", "model": "Z100", "memory_mib": 16000, "pci_bus_id": "0000:0a:00.0"}])
    )
    (card,) = MockBackend(path).cards()
    assert card.compute_units == 60 and card.pci_bus_id == "0000:0A:00.0"
    path.write_text(yaml.safe_dump([{"serial": "A"}]))
    with pytest.raises(SmiError, match="card 0: memory_mib and pci_bus_id missing"):
        MockBackend(path).cards()


def test_mock_smi_parses_its_file_again_only_when_it_changed(tmp_path, monkeypatch):
    """The plugin asks for the cards every second for health: the mock parses its YAML only
    when the file changed (a test that marks a card unhealthy is seen at the next call)."""
    path = tmp_path / "cards.yaml"
    entry = {"serial": "A", "model": "Z100", "memory_mib": 16000, "pci_bus_id": "0000:0a:00.0"}
    path.write_text(yaml.safe_dump([entry]))
    parsed = []
    real_load = yaml.safe_load
    monkeypatch.setattr(yaml, "safe_load", lambda text: parsed.append(1) or real_load(text))
    backend = MockBackend(path)
    assert backend.cards() == backend.cards()
    assert len(parsed) == 1
    path.write_text(yaml.safe_dump([{**entry, "healthy": False}]))
    (card,) = backend.cards()
    assert card.healthy is False and len(parsed) == 2
    path.write_text("- not: [a card")
    with pytest.raises(SmiError, match="mock SMI file"):
        backend.cards()
    with pytest.raises(SmiError, match="mock SMI file"):  # a broken file stays an error, not the last good read
        backend.cards()


def test_discovery_maps_by_bus_id_and_refuses_bad_serials(tmp_path):
    cards = [
        Card(0, "S1", "K100_AI", 100, 120, "0000:3D:00.0"),
        Card(1, "", "K100_AI", 100, 120, "0000:3E:00.0"),
        Card(2, "DUP", "K100_AI", 100, 120, "0000:3F:00.0"),
        Card(3, "DUP", "K100_AI", 100, 120, "0000:40:00.0"),
        Card(4, "S5", "K100_AI", 100, 120, "0000:41:00.0"),
        Card(5, "N/A", "K100_AI", 100, 120, "0000:42:00.0"),
    ]
    lay_out(cards, tmp_path / "sys", tmp_path / "dev", other_gpus=2)
    nodes = drm_nodes_by_bus_id(tmp_path / "sys", tmp_path / "dev")
    assert nodes["0000:3D:00.0"].card.endswith("dri/card2")  # two other GPUs come first
    assert len(nodes) == 6
    served = discover(cards, tmp_path / "sys", tmp_path / "dev", DCU_NAMING)
    assert [c.id for c in served] == ["DCU-S1", "DCU-S5"]
    assert served[1].drm.render.endswith("dri/renderD134")


def test_format_bdf():
    assert format_bdf((0 << 32) | (0x3D << 8) | (0 << 3) | 0) == "0000:3D:00.0"
    assert format_bdf((1 << 32) | (0x9F << 8) | (2 << 3) | 1) == "0001:9F:02.1"


FAKE_RSMI = r"""
#include <stdint.h>
#include <string.h>
static const char *serials[] = {"TPXS320016070601", "TPXS320010040501"};
static const uint16_t ids[] = {0x6210, 0x7777};
int rsmi_init(uint64_t flags) { return 0; }
int rsmi_num_monitor_devices(uint32_t *n) { *n = 2; return 0; }
int rsmi_dev_pci_id_get(uint32_t i, uint64_t *bdf) { *bdf = ((uint64_t)(0x3d + i) << 8); return 0; }
int rsmi_dev_serial_number_get(uint32_t i, char *s, uint32_t len) { strncpy(s, serials[i], len); return 0; }
int rsmi_dev_id_get(uint32_t i, uint16_t *id) { *id = ids[i]; return 0; }
int rsmi_dev_memory_total_get(uint32_t i, int type, uint64_t *total) { *total = 65520ULL << 20; return 0; }
"""


def test_rsmi_backend_against_a_fake_library(tmp_path):
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        pytest.skip("rsmi test: no C compiler on this machine")
    (tmp_path / "fake.c").write_text(FAKE_RSMI)
    library = tmp_path / "librocm_smi64.so"
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(library), str(tmp_path / "fake.c")], check=True)
    backend = RsmiBackend(str(library))
    first, second = backend.cards()
    assert (first.serial, first.model, first.memory_mib, first.compute_units, first.pci_bus_id) == (
        "TPXS320016070601",
        "K100_AI",
        65520,
        120,
        "0000:3D:00.0",
    )
    assert second.model == "UNKNOWN" and second.compute_units == 60 and second.pci_bus_id == "0000:3E:00.0"
    assert backend.unknown_device_ids == ["7777"]


def test_rsmi_missing_library_is_a_clear_error():
    with pytest.raises(SmiError, match="cannot load"):
        RsmiBackend("/nonexistent/librocm_smi64.so")

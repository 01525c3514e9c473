"""The flags both kubelet plugins share, and what they build: the SMI backend and the served cards."""

import argparse

import pytest
import yaml

from hami_dcu.common.protocol.keys import DCU_NAMING, HCU_NAMING
from hami_dcu.deviceplugin import command as deviceplugin_command
from hami_dcu.dra import command as dra_command
from hami_dcu.node.flags import add_node_arguments, make_backend, served_cards
from hami_dcu.node.smi import MockBackend, SmiError

CARD = {"serial": "S1", "model": "K100_AI", "memory_mib": 65520, "pci_bus_id": "0000:3D:00.0"}


def parse(*argv, add=add_node_arguments):
    parser = argparse.ArgumentParser()
    add(parser)
    return parser.parse_args(list(argv))


def test_sample_mock_file_is_two_k100_ai_and_the_default_in_mock_mode():
    cards = make_backend(parse("--smi", "mock")).cards()
    assert [(c.model, c.memory_mib, c.compute_units) for c in cards] == [("K100_AI", 65520, 120)] * 2
    assert len({c.serial for c in cards}) == 2 and len({c.pci_bus_id for c in cards}) == 2


def test_rsmi_is_the_default_backend_and_a_missing_library_says_so():
    with pytest.raises(SmiError, match="cannot load"):
        make_backend(parse("--rsmi-library", "/nonexistent/librocm_smi64.so"))
    assert isinstance(make_backend(parse("--smi", "mock")), MockBackend)


def test_served_cards_lays_out_the_fake_tree_when_asked(tmp_path):
    mock = tmp_path / "cards.yaml"
    mock.write_text(yaml.safe_dump([CARD]))
    args = parse("--node-name", "n1", "--smi", "mock", "--mock-devices", str(mock), "--mock-fake-tree",
                 "--sys-root", str(tmp_path / "sys"), "--dev-root", str(tmp_path / "dev"))
    (card,) = served_cards(args, make_backend(args), DCU_NAMING)
    assert card.id == "DCU-S1" and card.card.pci_bus_id == "0000:3D:00.0"
    (hcu,) = served_cards(args, make_backend(args), HCU_NAMING)
    assert hcu.id == "HCU-S1"
    assert (tmp_path / "dev" / "kfd").exists()


def test_no_card_with_device_files_is_an_error_naming_the_node(tmp_path):
    mock = tmp_path / "cards.yaml"
    mock.write_text(yaml.safe_dump([CARD]))
    args = parse("--node-name", "n1", "--smi", "mock", "--mock-devices", str(mock),
                 "--sys-root", str(tmp_path / "sys"), "--dev-root", str(tmp_path / "dev"))
    with pytest.raises(SmiError, match=r"no DCU could be served on node n1 \(1 reported by SMI\)"):
        served_cards(args, make_backend(args), DCU_NAMING)


def test_both_plugins_take_the_node_flags_with_the_same_defaults():
    shared = vars(parse())
    for add in (deviceplugin_command.add_arguments, dra_command.add_arguments):
        parsed = vars(parse(add=add))
        assert {name: parsed[name] for name in shared} == shared

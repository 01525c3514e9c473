"""Each card's NUMA node comes from sysfs, whatever the SMI backend says (HAMi's plugin
always registered 0); -1 (no NUMA information) reads as 0."""

from hami_dcu.common.protocol.codec import NodeDevice, decode_node_devices, encode_node_devices
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.node.discovery import discover
from hami_dcu.node.faketree import lay_out
from hami_dcu.node.numa import numa_node_path, read_numa_node
from hami_dcu.node.smi import Card


def test_discovery_takes_the_numa_node_from_sysfs(tmp_path):
    sys_root, dev_root = tmp_path / "sys", tmp_path / "dev"
    cards = [Card(0, "S0", "K100_AI", 65520, 120, "0000:3D:00.0", numa=0),
             Card(1, "S1", "K100_AI", 65520, 120, "0000:9F:00.0", numa=1)]
    lay_out(cards, sys_root, dev_root)
    # What the rsmi backend reports: no NUMA node at all (0); the kernel knows better.
    reported = [Card(c.index, c.serial, c.model, c.memory_mib, c.compute_units, c.pci_bus_id) for c in cards]
    served = discover(reported, sys_root, dev_root, DCU_NAMING)
    assert [c.card.numa for c in served] == [0, 1]


def test_minus_one_reads_as_node_zero_and_a_missing_file_keeps_the_backends_value(tmp_path):
    sys_root = tmp_path / "sys"
    lay_out([Card(0, "S0", "K100_AI", 65520, 120, "0000:3D:00.0", numa=-1)], sys_root, tmp_path / "dev")
    assert numa_node_path(sys_root, "0000:3D:00.0").read_text() == "-1\n"
    assert read_numa_node(sys_root, "0000:3D:00.0") == 0
    assert read_numa_node(sys_root, "0000:AA:00.0") is None
    numa_node_path(sys_root, "0000:3D:00.0").write_text("garbage\n")
    assert read_numa_node(sys_root, "0000:3D:00.0") is None
    card = Card(0, "S0", "K100_AI", 65520, 120, "0000:3D:00.0", numa=2)
    served = discover([card], sys_root, tmp_path / "dev", DCU_NAMING)
    assert served[0].card.numa == 2


def test_the_registration_carries_the_numa_node():
    value = encode_node_devices([NodeDevice("DCU-S1", 4, 65520, 100, "DCU-K100_AI", numa=1, index=1)])
    assert value == "DCU-S1,4,65520,100,DCU-K100_AI,1,true,1,hami:"
    assert decode_node_devices(value)[0].numa == 1

"""Allocate records which kubelet ids each vDCU was granted for, beside its grant record; the
record outlives a restart and goes with the grant (reconcile, a failed Allocate)."""

import pytest
from dp_helpers import dev

from hami_dcu.deviceplugin.core import AllocateFailed
from hami_dcu.node.vdev import conf_share


def test_the_kubelet_ids_of_a_vdcu_are_recorded_and_survive_a_restart(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("a", [("c", [dev("S1", 1000, 15)])])
    core.allocate([["DCU-S2-fake-1"]])  # the kubelet's pick on another card: the grant follows the scheduler
    dcu_node.bind("whole", [("c", [dev("S2", 65520, 100)])])
    core.allocate([["DCU-S2-fake-3"]])  # a whole card has no vDCU, and no record
    ((dirname, record, _),) = core.vdevs.grants.records()
    assert dcu_node.core().vdevs.kubelet_ids.load() == {"DCU-S2-fake-1": dirname}
    assert record.card_index == 0


def test_the_ids_go_with_the_grant(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("a", [("c", [dev("S1", 1000, 15)])])
    core.allocate([["DCU-S1-fake-0"]])
    dcu_node.kube.delete_pod("default", "a")
    assert core.reconcile()
    assert core.vdevs.kubelet_ids.load() == {} and not list(dcu_node.paths.state_dir.glob("*.ids"))


def test_an_allocate_that_fails_leaves_no_ids(dcu_node):
    core = dcu_node.core()
    dcu_node.bind("p", [("c", [dev("S1", 1000, 25)])])
    dcu_node.paths.vdev_dir.parent.mkdir(parents=True, exist_ok=True)
    dcu_node.paths.vdev_dir.write_text("not a directory")
    with pytest.raises(AllocateFailed):
        core.allocate([["DCU-S1-fake-0"]])
    assert not list(dcu_node.paths.state_dir.glob("*.ids"))


def test_conf_share_reads_the_vdev_files_cu_count_and_memory():
    assert conf_share("PciBusId: 0000:3D:00.0\ncu_count: 18\nmem: 2000 MiB\nvdev_id: 3\n") == (18, 2000)
    assert conf_share("cu_count: 18\n") is None
    assert conf_share("cu_count: x\nmem: 2000 MiB\n") is None

"""Prepare/Unprepare on disk: vDCUs from the device plugin's allocator, vdev files, CDI specs,
records, idempotence and restarts."""

import json

import pytest
from dra_helpers import CARDS, DEV0, DEV1, NODE, claim, node_cards, paths, result

from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.dra.cdi import spec_file_name
from hami_dcu.dra.core import DriverCore, PrepareFailed
from hami_dcu.dra.records import RecordStore
from hami_dcu.node.discovery import discover
from hami_dcu.node.faketree import lay_out
from hami_dcu.node.vdev import parse_dirname


@pytest.fixture
def core(tmp_path):
    return DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))


def vdev_conf(core, record):
    spec = record.devices[0].vdev_spec(record.uid)
    return (core.paths.vdev_dir / spec.dirname / "vdev0.conf").read_text()


def test_a_share_gets_a_vdev_file_and_a_cdi_spec(core):
    record = core.prepare(claim("uid-a", result(cores="30", memory="8Gi")))
    [device] = record.devices
    assert device.vdev.cu_count == 30 and device.vdev.cu_mask == (1 << 30) - 1
    conf = vdev_conf(core, record)
    assert "PciBusId: 0000:3D:00.0\n" in conf and "cu_count: 30\n" in conf and "mem: 8192 MiB\n" in conf
    assert f"cu_mask: 0x{(1 << 30) - 1:016x}\n" in conf and "device_id: 0\n" in conf
    assert (core.paths.etc_vdev / f"vdev{device.vdev.vdev}.conf").is_file()
    spec = json.loads((core.paths.cdi_dir / spec_file_name("uid-a")).read_text())
    assert spec["kind"] == "dra.hygon.com/dcu"
    assert record.cdi_ids(device) == [f"dra.hygon.com/dcu={spec['devices'][0]['name']}"]
    edits = spec["devices"][0]["containerEdits"]
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/dri/card1", "/dev/dri/renderD129"]
    assert edits["deviceNodes"][0]["hostPath"] == str(core.paths.dev_root / "dri" / "card1")
    [mount] = edits["mounts"]
    assert mount["containerPath"] == "/etc/vdev/docker"
    assert mount["hostPath"] == str(core.paths.vdev_dir / device.vdev_spec("uid-a").dirname)
    assert "ro" in mount["options"]
    shared = spec["containerEdits"]
    assert [n["path"] for n in shared["deviceNodes"]] == ["/dev/kfd", "/dev/mkfd"]
    assert {m["containerPath"]: m["hostPath"] for m in shared["mounts"]} == {
        "/opt/hygondriver": str(core.paths.driver_dir), "/opt/hyhal": str(core.paths.hyhal_dir)}
    assert all("ro" in m["options"] for m in shared["mounts"])


def test_two_shares_on_one_card_never_overlap(core):
    a = core.prepare(claim("uid-a", result(cores="50", memory="1Gi")))
    b = core.prepare(claim("uid-b", result(cores="50", memory="1Gi")))
    ga, gb = a.devices[0].vdev, b.devices[0].vdev
    assert ga.cu_mask & gb.cu_mask == 0 and ga.pipe != gb.pipe and ga.vdev != gb.vdev
    with pytest.raises(PrepareFailed, match="30 compute units requested, 20 free"):
        core.prepare(claim("uid-c", result(cores="30", memory="1Gi")))
    assert "uid-c" not in core.prepared and not (core.paths.cdi_dir / spec_file_name("uid-c")).exists()


def test_a_whole_card_has_no_vdev(core):
    record = core.prepare(claim("uid-w", result(device=DEV1)))
    assert record.devices[0].vdev is None
    assert not core.paths.vdev_dir.exists() or not list(core.paths.vdev_dir.iterdir())
    spec = json.loads((core.paths.cdi_dir / spec_file_name("uid-w")).read_text())
    assert "mounts" not in spec["devices"][0]["containerEdits"]


def test_prepare_is_idempotent(core):
    first = core.prepare(claim("uid-a", result(cores="30", memory="1Gi")))
    again = core.prepare(claim("uid-a", result(cores="30", memory="1Gi")))
    assert again == first
    assert bin(core.state.cu_used[0]).count("1") == 30


def test_unprepare_frees_everything_and_is_idempotent(core):
    record = core.prepare(claim("uid-a", result(cores="120", memory="1Gi")))
    spec = record.devices[0].vdev_spec("uid-a")
    assert core.unprepare("uid-a") is True
    assert not (core.paths.vdev_dir / spec.dirname).exists()
    assert not (core.paths.etc_vdev / f"vdev{spec.vdev}.conf").exists()
    assert not (core.paths.cdi_dir / spec_file_name("uid-a")).exists()
    assert RecordStore(core.paths.state_dir / "claims").load_all() == []
    assert core.unprepare("uid-a") is False
    assert core.prepare(claim("uid-b", result(cores="120", memory="1Gi"))).devices[0].vdev.cu_count == 120


def test_two_shares_in_one_claim_are_refused_and_leave_nothing(core):
    with pytest.raises(PrepareFailed, match="2 shared devices in one claim"):
        core.prepare(claim("uid-a", result(cores="10", memory="1Gi"), result(device=DEV1, cores="10", memory="1Gi")))
    assert core.state.cu_used.get(0, 0) == 0 and not core.prepared


def test_a_claim_that_fails_on_one_device_leaves_nothing(core):
    core.prepare(claim("uid-full", result(cores="115", memory="1Gi")))
    with pytest.raises(PrepareFailed, match="10 compute units requested, 5 free"):
        core.prepare(claim("uid-a", result(device=DEV1, request="whole"), result(cores="10", memory="1Gi")))
    assert set(core.prepared) == {"uid-full"}
    assert not (core.paths.cdi_dir / spec_file_name("uid-a")).exists()
    assert [r.uid for r in RecordStore(core.paths.state_dir / "claims").load_all()] == ["uid-full"]
    assert bin(core.state.cu_used[0]).count("1") == 115


def test_unusable_uids_never_name_files(core):
    with pytest.raises(PrepareFailed, match="unusable UID"):
        core.prepare(claim("../escape", result()))
    with pytest.raises(PrepareFailed, match="unusable claim UID"):
        core.unprepare("a/b")


def test_a_restart_takes_grants_back_and_rewrites_lost_files(tmp_path):
    cards = node_cards(tmp_path)
    core = DriverCore(NODE, cards, paths(tmp_path))
    record = core.prepare(claim("uid-a", result(cores="40", memory="2Gi")))
    conf = vdev_conf(core, record)
    spec = record.devices[0].vdev_spec("uid-a")
    (core.paths.vdev_dir / spec.dirname / "vdev0.conf").unlink()
    (core.paths.cdi_dir / spec_file_name("uid-a")).unlink()

    restarted = DriverCore(NODE, cards, paths(tmp_path))
    assert restarted.rebuild() == 1
    assert restarted.prepared["uid-a"] == record
    assert vdev_conf(restarted, record) == conf
    assert (restarted.paths.cdi_dir / spec_file_name("uid-a")).is_file()
    other = restarted.prepare(claim("uid-b", result(cores="80", memory="1Gi")))
    assert other.devices[0].vdev.cu_mask & record.devices[0].vdev.cu_mask == 0
    with pytest.raises(PrepareFailed):
        restarted.prepare(claim("uid-c", result(cores="1", memory="1Gi")))
    assert restarted.unprepare("uid-a")
    assert restarted.prepare(claim("uid-c", result(cores="40", memory="1Gi"))).devices[0].vdev.cu_count == 40


def test_a_restart_follows_a_card_to_its_new_index(tmp_path):
    core = DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))
    record = core.prepare(claim("uid-a", result(device=DEV1, cores="60", memory="1Gi")))
    assert record.devices[0].vdev.card_index == 1
    # Card 0 is gone: SMI now reports the Z100 at index 0.
    moved = [CARDS[1].__class__(**{**CARDS[1].__dict__, "index": 0})]
    lay_out(moved, tmp_path / "sys", tmp_path / "dev")
    restarted = DriverCore(NODE, discover(moved, tmp_path / "sys", tmp_path / "dev", DCU_NAMING), paths(tmp_path))
    restarted.rebuild()
    assert restarted.prepared["uid-a"].devices[0].vdev.card_index == 0
    with pytest.raises(PrepareFailed, match="0 free of 60"):
        restarted.prepare(claim("uid-b", result(device=DEV1, cores="1", memory="1Gi")))


def test_an_unreadable_record_is_kept_and_ignored(tmp_path):
    core = DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))
    core.prepare(claim("uid-a", result(cores="10", memory="1Gi")))
    bad = core.paths.state_dir / "claims" / "uid-bad.json"
    bad.write_text("{not json")
    restarted = DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))
    assert restarted.rebuild() == 1 and bad.exists()


def test_vdev_dirs_parse_as_device_plugin_dirs(core):
    """One format for both modes: the claim UID where the pod UID goes, the request as container."""
    record = core.prepare(claim("uid-a", result(request="gpu", cores="7", memory="1Gi")))
    parsed = parse_dirname(record.devices[0].vdev_spec("uid-a").dirname)
    assert (parsed.pod_uid, parsed.container, parsed.card_index) == ("uid-a", "gpu", 0)
    assert parsed.cu_mask == record.devices[0].vdev.cu_mask
    assert record.devices[0].device == DEV0


# --- one card, whole or shared, never both (issue 21, item 6) --------------------------------


def test_a_share_on_a_card_another_claim_holds_whole_is_refused(core):
    core.prepare(claim("uid-whole", result(), name="trainer"))
    with pytest.raises(PrepareFailed, match="held whole by ResourceClaim ns/trainer"):
        core.prepare(claim("uid-share", result(cores="30", memory="1Gi"), name="tenant"))
    assert "uid-share" not in core.prepared and not (core.paths.cdi_dir / spec_file_name("uid-share")).exists()
    # The other card is free: a share there is fine.
    assert core.prepare(claim("uid-other", result(device=DEV1, cores="30", memory="1Gi"))).devices[0].vdev


def test_a_whole_card_on_a_card_with_shares_is_refused_until_they_go(core):
    core.prepare(claim("uid-share", result(cores="30", memory="1Gi"), name="tenant"))
    with pytest.raises(PrepareFailed, match="shared \\(ResourceClaim ns/tenant holds a vDCU on it\\)"):
        core.prepare(claim("uid-whole", result()))
    core.unprepare("uid-share")
    assert core.prepare(claim("uid-whole", result())).devices[0].vdev is None


def test_admin_access_holds_nothing(core):
    admin = {**result(), "adminAccess": True}
    core.prepare(claim("uid-monitor", admin))
    assert core.prepare(claim("uid-share", result(cores="30", memory="1Gi"))).devices[0].vdev
    assert core.prepare(claim("uid-monitor-2", admin))


def test_whole_holdings_survive_a_restart(tmp_path):
    first = DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))
    first.prepare(claim("uid-whole", result(), name="trainer"))
    again = DriverCore(NODE, node_cards(tmp_path), paths(tmp_path))
    again.rebuild()
    with pytest.raises(PrepareFailed, match="held whole"):
        again.prepare(claim("uid-share", result(cores="30", memory="1Gi")))

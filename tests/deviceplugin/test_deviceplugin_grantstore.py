"""The device plugin's grant records: HAMi's vdev directory name and configuration, read back
through one declared schema. A file that is not a grant of ours is refused naming the field
and left out; every other grant is still taken back."""

import logging

import pytest

from hami_dcu.deviceplugin.grantstore import ADOPTED, GrantRecordError, GrantStore, load_record
from hami_dcu.node.vdev import VdevDir, VdevSpec, render_conf

SPEC = VdevSpec(pod_uid="6d1b7c4e-pod", container="main", card_index=1, pipe=3, vdev=7, cu_mask=(1 << 70) - 1,
                cu_count=70, memory_mib=2000, pci_bus_id="0000:3d:00.0")
GRANT = VdevDir(pod_uid="6d1b7c4e-pod", container="main", card_index=1, pipe=3, vdev=7, cu_mask=(1 << 70) - 1)
LOW, HIGH = SPEC.mask_words


def test_a_record_holds_its_grant_and_its_cards_bus_id():
    assert load_record(SPEC.dirname, render_conf(SPEC, device_id=0)) == (GRANT, "0000:3D:00.0")
    assert load_record(SPEC.dirname, f"{ADOPTED}/somewhere/vdev0.conf\n") == (GRANT, None)
    assert load_record(SPEC.dirname, None) == (GRANT, None)


@pytest.mark.parametrize(("dirname", "problem"), [
    ("notes", "not a grant record (its name is not a vdev directory name)"),
    (f"uid_main_1_3_7_{LOW}", "not a grant record"),
    (f"_main_1_3_7_{LOW}_{HIGH}", "pod_uid: Shorter than minimum length 1."),
    (f"uid_main_-1_3_7_{LOW}_{HIGH}", "card_index: Must be greater than or equal to 0."),
    (f"uid_main_1_20_7_{LOW}_{HIGH}", "pipe: Must be greater than or equal to 0 and less than or equal to 19."),
    (f"uid_main_1_3_200_{LOW}_{HIGH}", "vdev: Must be greater than or equal to 0 and less than or equal to 199."),
    (f"uid_main_1_3_7_-1_{HIGH}", "cu_mask: Must be greater than or equal to 0"),
    (f"uid_main_1_3_7_{LOW}_1{HIGH}", "cu_mask: Must be greater than or equal to 0"),
])
def test_a_name_that_is_no_grant_of_ours_is_refused_naming_the_field(dirname, problem):
    with pytest.raises(GrantRecordError) as raised:
        load_record(dirname, render_conf(SPEC, device_id=0))
    assert problem in str(raised.value) and "\n" not in str(raised.value)


def test_the_store_takes_back_every_grant_it_can_and_says_which_it_cannot(tmp_path, caplog):
    store = GrantStore(tmp_path)
    store.save(SPEC)
    other = VdevSpec(**{**vars(SPEC), "pod_uid": "other-pod", "vdev": 8, "cu_mask": 1})
    store.save(other)
    (tmp_path / f"bad_main_1_99_9_{LOW}_{HIGH}.conf").write_text(render_conf(SPEC, device_id=0))
    unreadable = VdevSpec(**{**vars(SPEC), "pod_uid": "binary-pod", "vdev": 9, "cu_mask": 2})
    (tmp_path / f"{unreadable.dirname}.conf").write_bytes(b"\xff\xfe\x00")  # kept on the index its name says
    with caplog.at_level(logging.WARNING):
        records = store.records()
    assert [(name, bus) for name, _, bus in records] == [
        (SPEC.dirname, "0000:3D:00.0"), (unreadable.dirname, None), (other.dirname, "0000:3D:00.0")]
    assert store.conf_text(unreadable.dirname) is None and store.conf_text(SPEC.dirname) == render_conf(SPEC, 0)
    assert [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()] == [
        f"grant store {tmp_path}: ignoring bad_main_1_99_9_{LOW}_{HIGH}.conf: not a grant of this plugin: "
        "pipe: Must be greater than or equal to 0 and less than or equal to 19."]

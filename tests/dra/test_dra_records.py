"""The DRA driver's durable record, declared once as a schema: the format on disk is fixed
(a restart after an upgrade or a downgrade reads what the other version wrote), and a record
that does not match it is refused naming the field, and kept on disk while the others load."""

import json

import pytest

from hami_dcu.dra.records import (
    PreparedClaim,
    PreparedDevice,
    RecordError,
    RecordStore,
    VdevGrant,
    decode,
    encode,
)

SHARE = PreparedDevice(request="dcu", pool="node1", device="dcu-0", share_id="4f1c", pci_bus_id="0000:3D:00.0",
                       dri_card="/dev/dri/card0", dri_render="/dev/dri/renderD128",
                       vdev=VdevGrant(card_index=0, cu_mask=(1 << 70) - 1, pipe=1, vdev=2, cu_count=70,
                                      memory_mib=1024))
WHOLE = PreparedDevice(request="mon/watch", pool="node1", device="dcu-1", share_id=None, pci_bus_id="0000:9F:00.0",
                       dri_card="/dev/dri/card1", dri_render="/dev/dri/renderD129", vdev=None, admin=True)
RECORD = PreparedClaim(uid="uid-a", namespace="ns", name="c1", devices=(SHARE, WHOLE))
ON_DISK = {
    "version": 1, "uid": "uid-a", "namespace": "ns", "name": "c1",
    "devices": [
        {"request": "dcu", "pool": "node1", "device": "dcu-0", "shareID": "4f1c", "pciBusID": "0000:3D:00.0",
         "driCard": "/dev/dri/card0", "driRender": "/dev/dri/renderD128",
         "vdev": {"cardIndex": 0, "cuMask": "0x3fffffffffffffffff", "pipe": 1, "vdev": 2, "cuCount": 70,
                  "memoryMiB": 1024}},
        {"request": "mon/watch", "pool": "node1", "device": "dcu-1", "shareID": None, "pciBusID": "0000:9F:00.0",
         "driCard": "/dev/dri/card1", "driRender": "/dev/dri/renderD129", "vdev": None, "adminAccess": True},
    ],
}


def test_the_record_format_on_disk_is_fixed():
    assert encode(RECORD) == json.dumps(ON_DISK, indent=1, sort_keys=True) + "\n"
    assert decode(encode(RECORD)) == RECORD


def test_a_record_from_before_admin_access_and_share_ids_loads():
    older = json.loads(json.dumps(ON_DISK))
    for device in older["devices"]:
        device.pop("adminAccess", None)
        device.pop("shareID")
    loaded = decode(json.dumps(older))
    assert [d.admin for d in loaded.devices] == [False, False] and [d.share_id for d in loaded.devices] == [None, None]


def with_device(**fields) -> str:
    data = json.loads(json.dumps(ON_DISK))
    data["devices"][0].update(fields)
    return json.dumps(data)


def with_grant(**fields) -> str:
    data = json.loads(json.dumps(ON_DISK))
    data["devices"][0]["vdev"].update(fields)
    return json.dumps(data)


@pytest.mark.parametrize(("text", "problem"), [
    ("{not json", "body is not JSON: "),
    (b"\xff\xfe\x00\x01", "body is not JSON: "),
    ("[" * 10_000 + "]" * 10_000, "JSON nested deeper than 64 levels"),
    ("[]", "malformed record: Not a JSON object."),
    (json.dumps({**ON_DISK, "version": 2}),
     "malformed record: version: Record has format 2; this driver reads format 1."),
    (json.dumps({k: v for k, v in ON_DISK.items() if k != "version"}),
     "malformed record: version: Record has no format version; this driver reads format 1."),
    (json.dumps({**ON_DISK, "devices": None}), "malformed record: devices: Field may not be null."),
    (with_device(pciBusID=7), "malformed record: devices[0].pciBusID: Not a valid string."),
    (with_device(adminAccess="yes"), "malformed record: devices[0].adminAccess: Not a valid boolean."),
    (with_grant(cuMask="0xzz"), "malformed record: devices[0].vdev.cuMask: Not a CU mask"),
    (with_grant(cuMask=63), "malformed record: devices[0].vdev.cuMask: Not a CU mask"),
    (with_grant(cardIndex=-1), "malformed record: devices[0].vdev.cardIndex: Must be greater than or equal to 0."),
    (with_grant(pipe="1"), "malformed record: devices[0].vdev.pipe: Not a valid integer."),
])
def test_a_malformed_record_names_its_problem(text, problem):
    with pytest.raises(RecordError) as raised:
        decode(text)
    assert str(raised.value).startswith(problem) and "\n" not in str(raised.value)


def test_records_that_do_not_load_stay_on_disk_and_the_others_load(tmp_path, caplog):
    store = RecordStore(tmp_path)
    store.save(RECORD)
    other = PreparedClaim(uid="uid-b", namespace="ns", name="c2", devices=(SHARE,))
    store.save(other)
    (tmp_path / "uid-new.json").write_text(json.dumps({**ON_DISK, "uid": "uid-new", "version": 2}))
    (tmp_path / "uid-bad.json").write_text(with_grant(cuMask="0xzz").replace("uid-a", "uid-bad"))
    (tmp_path / "uid-bin.json").write_bytes(b"\x00\xff" * 100)  # not even text
    assert store.load_all() == [RECORD, other]
    assert all((tmp_path / f"uid-{name}.json").exists() for name in ("new", "bad", "bin"))
    logged = [r.getMessage() for r in caplog.records]
    assert any("uid-new.json" in m and "this driver reads format 1" in m for m in logged)
    assert any("uid-bad.json" in m and "devices[0].vdev.cuMask" in m for m in logged)

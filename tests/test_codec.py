"""The wire codecs against annotations as HAMi writes them, round trips and arbitrary input."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import (
    CodecError,
    ContainerDevice,
    LockValue,
    NodeDevice,
    decode_handshake,
    decode_lock,
    decode_node_devices,
    decode_pod_devices,
    encode_lock,
    encode_node_devices,
    encode_pod_devices,
    encode_reported,
    encode_requesting,
    encode_volcano_deleted,
    encode_volcano_requesting,
)

DCU = keys.DCU_NAMING  # the naming set these tests speak

REFERENCE_NODE = (
    "DCU-TPXS320016070601,4,65520,100,DCU-K100_AI,0,true,0,hami:"
    "DCU-TPXS320010040501,4,65520,100,DCU-K100_AI,0,true,1,hami:"
)


def test_node_devices_reference_example_round_trips_byte_for_byte():
    devices = decode_node_devices(REFERENCE_NODE)
    assert devices == [
        NodeDevice("DCU-TPXS320016070601", 4, 65520, 100, "DCU-K100_AI", 0, True, 0, "hami"),
        NodeDevice("DCU-TPXS320010040501", 4, 65520, 100, "DCU-K100_AI", 0, True, 1, "hami"),
    ]
    assert encode_node_devices(devices) == REFERENCE_NODE


def test_worked_example_node_annotation():
    devices = [
        NodeDevice("DCU-S1", 4, 65520, 100, "DCU-K100_AI", index=0),
        NodeDevice("DCU-S2", 4, 65520, 100, "DCU-K100_AI", index=1),
    ]
    assert encode_node_devices(devices) == (
        "DCU-S1,4,65520,100,DCU-K100_AI,0,true,0,hami:DCU-S2,4,65520,100,DCU-K100_AI,0,true,1,hami:"
    )


def test_legacy_seven_field_record_defaults_index_and_mode():
    (device,) = decode_node_devices("DCU-0,4,32768,100,DCU-Z100L,1,false:")
    assert device == NodeDevice("DCU-0", 4, 32768, 100, "DCU-Z100L", 1, False, 0, "hami-core")


def test_an_id_starting_with_a_bracket_is_still_the_string_form():
    (device,) = decode_node_devices("[X,4,1,100,T,0,true,0,hami:")
    assert device.id == "[X"


def test_json_array_accepted_with_omitted_zero_values():
    text = '[{"id":"DCU-A","count":4,"devmem":1024,"devcore":100,"type":"DCU-K100","mode":"hami","health":true}]'
    assert decode_node_devices(text) == [NodeDevice("DCU-A", 4, 1024, 100, "DCU-K100", 0, True, 0, "hami")]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("no-colon-here", "no device record"),
        ("DCU-A,4,1,100,T,0,true,0:", "8 fields"),
        ("DCU-A,four,1,100,T,0,true,0,hami:", "count 'four' is not an integer"),
        ("DCU-A,4,1,100,T,0,true,-1,hami:", "index -1 is negative"),
        ("DCU-A, 4,1,100,T,0,true,0,hami:", "count ' 4' is not an integer"),
        ("DCU-A,1_0,1,100,T,0,true,0,hami:", "is not an integer"),
        ("DCU-A,4,1,100,T,-2147483649,true,0,hami:", "int32"),
        ("DCU-A,4,1,100,T,0," + "9" * 5000 + ",0,hami:", "health"),
        ("DCU-A,4," + "9" * 5000 + ",100,T,0,true,0,hami:", "out of the int32 range"),
        ('[{"id":"A","count":' + "1" * 5000 + "}]", "too long"),
        ('[{"id":"A","index":-1}]', "index -1 is out of range"),
        ("DCU-A,4,1,100,T,0,maybe,0,hami:", "health 'maybe'"),
        ("DCU-A,4,99999999999,100,T,0,true,0,hami:", "int32"),
        (",4,1,100,T,0,true:", "empty device id"),
        ("[1,2]", "device without an id"),
        ('[{"id":]', "invalid JSON"),
        ("[{", "no device record"),
    ],
)
def test_node_decode_errors_name_annotation_and_part(value, fragment):
    with pytest.raises(CodecError) as info:
        decode_node_devices(value, DCU.node_register)
    assert fragment in str(info.value)
    assert str(info.value).startswith(DCU.node_register)
    with pytest.raises(CodecError) as unnamed:
        decode_node_devices(value)  # the caller did not say which annotation: the format is named
    assert str(unnamed.value).startswith("node device list: ")


def test_pod_devices_reference_examples():
    one = "DCU-TPXS320016070601,DCU,2000,60:;"
    assert decode_pod_devices(one) == [[ContainerDevice("DCU-TPXS320016070601", "DCU", 2000, 60)]]
    assert encode_pod_devices(decode_pod_devices(one)) == one
    gap = "A,DCU,2000,60:;;B,DCU,1000,30:;"
    decoded = decode_pod_devices(gap)
    assert decoded == [[ContainerDevice("A", "DCU", 2000, 60)], [], [ContainerDevice("B", "DCU", 1000, 30)]]
    assert encode_pod_devices(decoded) == gap


def test_erased_pod_value_is_one_empty_entry():
    assert decode_pod_devices(";") == [[]]
    assert encode_pod_devices([[]]) == ";"
    assert decode_pod_devices("") == []


def test_pod_value_without_final_terminator_reads_last_entry():
    assert decode_pod_devices("A,DCU,1,2:") == [[ContainerDevice("A", "DCU", 1, 2)]]


def test_numbers_read_as_go_parseint_reads_them():
    """HAMi decodes with strconv.ParseInt(s, 10, 32): a sign is allowed, and Hygon's own
    plugin writes the NUMA node it is given, -1 included."""
    (device,) = decode_node_devices("HCU-A,+4,-1,+100,HCU-K100_AI,-1,true,+0,hami:")
    assert (device.count, device.devmem, device.devcore, device.numa, device.index) == (4, -1, 100, -1, 0)
    assert decode_pod_devices("A,DCU,+2000,-0:;") == [[ContainerDevice("A", "DCU", 2000, 0)]]
    assert decode_node_devices("A,4,1,100,T,-2147483648,true:")[0].numa == -(2**31)


def test_a_pod_segment_without_a_comma_is_skipped_as_hami_does():
    assert decode_pod_devices("A,DCU,1,2:junk:B,DCU,3,4:;x;") == [
        [ContainerDevice("A", "DCU", 1, 2), ContainerDevice("B", "DCU", 3, 4)], []]


def test_v25_placeholder_record_is_no_device():
    assert decode_pod_devices("A,DCU,1,2:;,,0,0:;") == [[ContainerDevice("A", "DCU", 1, 2)], []]


def test_multi_card_container():
    value = "DCU-1,DCU,65520,100:DCU-2,DCU,65520,100:;"
    assert [d.uuid for d in decode_pod_devices(value)[0]] == ["DCU-1", "DCU-2"]


@pytest.mark.parametrize(
    ("value", "fragment"),
    [("A,DCU,2000:;", "3 fields"), ("A,DCU,x,60:;", "usedmem 'x'"), ("A,DCU,1, 6:;", "usedcores ' 6'")],
)
def test_pod_decode_errors(value, fragment):
    with pytest.raises(CodecError) as info:
        decode_pod_devices(value, DCU.pod_devices_to_allocate)
    assert fragment in str(info.value)
    assert DCU.pod_devices_to_allocate in str(info.value)


def test_encoders_refuse_separators_in_fields():
    with pytest.raises(CodecError):
        encode_pod_devices([[ContainerDevice("A:B", "DCU", 1, 1)]])
    with pytest.raises(CodecError):
        encode_node_devices([NodeDevice("DCU-A", 4, 1, 100, "DCU-K;100")])


def test_lock_reference_example_and_legacy_form():
    lock = decode_lock("2025-08-07T10:00:01+08:00,default,vdcu-pytorch-demo")
    assert lock.namespace == "default" and lock.name == "vdcu-pytorch-demo"
    assert lock.since == datetime(2025, 8, 7, 2, 0, 1, tzinfo=UTC)
    assert encode_lock(lock) == "2025-08-07T10:00:01+08:00,default,vdcu-pytorch-demo"
    legacy = decode_lock("2025-08-07T10:00:01Z")
    assert legacy.name is None and "legacy" in legacy.holder


@pytest.mark.parametrize("value", ["2025-08-07T10:00:01Z,,", "2025-08-07T10:00:01Z,ns,", "2025-08-07T10:00:01Z,,p"])
def test_a_lock_with_an_empty_namespace_or_name_parses_as_naming_nobody(value):
    # HAMi's parser takes it; nobody can look such a holder up, so only expiry frees it.
    lock = decode_lock(value)
    assert lock.since == datetime(2025, 8, 7, 10, 0, 1, tzinfo=UTC)
    assert lock.name is None and lock.namespace is None


def test_lock_utc_uses_z_like_go():
    moment = datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=UTC)
    assert encode_lock(LockValue(moment, "ns", "p")) == "2026-01-02T03:04:05Z,ns,p"


@pytest.mark.parametrize("value", ["", "yesterday,ns,p", "2025-08-07T10:00:01Z,ns", "2025-08-07T10:00:01,ns,p"])
def test_lock_decode_errors(value):
    with pytest.raises(CodecError) as info:
        decode_lock(value)
    assert keys.NODE_LOCK in str(info.value)


def test_handshake_forms():
    now = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
    reported = decode_handshake(encode_reported(now))
    assert reported.state == keys.HANDSHAKE_REPORTED and reported.at == now
    requesting = decode_handshake(encode_requesting(now))
    assert requesting.state == keys.HANDSHAKE_REQUESTING and requesting.at == now
    go = decode_handshake("Reported 2025-08-07 10:00:00.123456789 +0800 CST m=+30.001")
    assert go.at == datetime(2025, 8, 7, 10, 0, 0, tzinfo=timezone(timedelta(hours=8)))
    assert decode_handshake("Requesting_garbage").at is None
    assert decode_handshake("Deleted_2025-01-01 00:00:00").state == keys.HANDSHAKE_DELETED


def test_volcanos_handshake_layout_is_read_as_utc_as_the_fork_reads_it():
    requesting = decode_handshake("Requesting_2026.11.24 06:00:05")
    assert requesting.state == keys.HANDSHAKE_REQUESTING and requesting.by_volcano
    assert requesting.at == datetime(2026, 11, 24, 6, 0, 5, tzinfo=UTC)
    deleted = decode_handshake("Deleted_2026.11.24 06:01:10")
    assert deleted.state == keys.HANDSHAKE_DELETED and deleted.by_volcano
    hami = decode_handshake(encode_requesting(datetime(2026, 11, 24, 6, 0, 5, tzinfo=UTC)))
    assert not hami.by_volcano and hami.at == datetime(2026, 11, 24, 6, 0, 5, tzinfo=UTC)


def test_volcanos_stamps_are_written_from_the_local_clock_in_its_layout(monkeypatch):
    """The fork formats time.Now() (local) with `2006.01.02 15:04:05`."""
    import time

    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    try:
        moment = datetime(2026, 11, 24, 6, 0, 5, tzinfo=UTC)
        assert encode_volcano_requesting(moment) == "Requesting_2026.11.24 14:00:05"
        assert encode_volcano_deleted(moment) == "Deleted_2026.11.24 14:00:05"
    finally:
        monkeypatch.undo()
        time.tzset()


# --- properties ------------------------------------------------------------------------------

field = st.text(
    alphabet=st.characters(blacklist_characters=",:;", blacklist_categories=("Cs",)), min_size=1, max_size=12
)
int32 = st.integers(min_value=0, max_value=2**31 - 1)
node_devices = st.lists(
    st.builds(
        NodeDevice,
        id=field,
        count=int32,
        devmem=int32,
        devcore=int32,
        type=field,
        numa=int32,
        health=st.booleans(),
        index=int32,
        mode=field,
    ),
    max_size=6,
)
pod_devices = st.lists(
    st.lists(st.builds(ContainerDevice, uuid=field, type=field, usedmem=int32, usedcores=int32), max_size=3), max_size=5
)


@given(node_devices)
def test_node_round_trip(devices):
    assert decode_node_devices(encode_node_devices(devices) or ":") == devices


@given(pod_devices)
def test_pod_round_trip(devices):
    assert decode_pod_devices(encode_pod_devices(devices)) == devices


@given(
    st.datetimes(timezones=st.just(UTC)),
    st.from_regex(r"[a-z0-9-]{1,20}", fullmatch=True),
    st.from_regex(r"[a-z0-9.-]{1,30}", fullmatch=True),
)
def test_lock_round_trip(moment, namespace, name):
    lock = LockValue(moment.replace(microsecond=0), namespace, name)
    assert decode_lock(encode_lock(lock)) == lock


@given(st.text(max_size=200))
def test_arbitrary_text_raises_only_codec_error(text):
    for decode in (decode_node_devices, decode_pod_devices, decode_lock):
        try:
            decode(text)
        except CodecError:
            pass
    decode_handshake(text)

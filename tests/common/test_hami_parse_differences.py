"""Two deliberate differences from HAMi v2.10 in reading what HAMi writes or a pod asks for
(README, Where we differ), each with HAMi's answer in the docstring."""

import pytest

from hami_dcu.common.protocol.codec import ContainerDevice, decode_pod_devices, encode_pod_devices
from hami_dcu.common.protocol.keys import DCU_NAMING
from hami_dcu.common.protocol.requests import RequestError, parse_container_request

DCU = DCU_NAMING.resources


@pytest.mark.parametrize(("value", "entries"), [
    ("A,DCU,2000,60:;", [[ContainerDevice("A", "DCU", 2000, 60)]]),
    (";", [[]]),
    (";;", [[], []]),
    ("A,DCU,1,2:;;", [[ContainerDevice("A", "DCU", 1, 2)], []]),
    ("A,DCU,1,2:", [[ContainerDevice("A", "DCU", 1, 2)]]),  # no final ";": still the last entry
])
def test_the_text_after_the_last_semicolon_is_not_an_entry(value, entries):
    """HAMi v2.10 pkg/device/devices.go DecodePodDevices splits on ";" with
    strings.SplitSeq and keeps every piece, so "A,DCU,2000,60:;" is two entries, the second
    empty. Every entry ends with ";", so we drop that piece: decoding what was encoded gives
    the same list back and no container's index moves."""
    assert decode_pod_devices(value) == entries
    if value.endswith(";"):
        assert encode_pod_devices(entries) == value


def ctr(**limits: object) -> dict:
    return {"name": "trainer", "resources": {"limits": {"hygon.com/dcunum": "1", **limits}}}


@pytest.mark.parametrize(("container", "factor", "fragment"), [
    ({"name": "trainer", "resources": {"limits": {"hygon.com/dcunum": "2147483648"}}}, 1, "out of range"),
    ({"name": "trainer", "resources": {"limits": {"hygon.com/dcunum": "-1"}}}, 1, "must not be negative"),
    (ctr(**{"hygon.com/dcumem": "2147483648"}), 1, "out of range"),
    (ctr(**{"hygon.com/dcumem": "-2000"}), 1, "must not be negative"),
    (ctr(**{"hygon.com/dcucores": "2147483648"}), 1, "out of range"),
    (ctr(**{"hygon.com/dcucores": "-10"}), 1, "must not be negative"),
    (ctr(**{"hygon.com/dcumem": "2097152"}), 1024, "too large"),  # 2 Gi MiB: past int32 once scaled
])
def test_out_of_range_and_overflowing_requests_are_refused(container, factor, fragment):
    """HAMi v2.10 pkg/device/hygon/device.go GenerateResourceRequests returns an empty
    request (the container gets no DCU, silently) for a count <= 0 or past int32, a memory
    or cores value < 0 or past int32, and a memory past int32 once multiplied by the memory
    factor. We refuse them, naming the resource, so a pod never runs without the card it
    asked for."""
    with pytest.raises(RequestError, match=fragment) as raised:
        parse_container_request(container, DCU, memory_factor=factor)
    assert "container trainer" in str(raised.value)


def test_just_inside_int32_after_the_factor_is_read():
    assert parse_container_request(ctr(**{"hygon.com/dcumem": "2097151"}), DCU, memory_factor=1024).memory_mib == (
        2097151 * 1024)

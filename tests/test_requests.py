"""Per-container DCU request parsing by HAMi's rules and our stricter errors."""

import pytest

from hami_dcu.common.protocol.keys import DCU_NAMING, ResourceNames
from hami_dcu.common.protocol.requests import (
    DcuRequest,
    RequestError,
    asks_for_count,
    parse_container_request,
    parse_pod_requests,
    pod_asks_for_count,
)

DCU = DCU_NAMING.resources


def ctr(name="c", limits=None, requests=None):
    return {"name": name, "resources": {"limits": limits or {}, "requests": requests or {}}}


@pytest.mark.parametrize(
    ("container", "expected"),
    [
        (ctr(), None),
        (ctr(limits={"cpu": "1"}), None),
        (ctr(limits={"hygon.com/dcunum": "1"}), DcuRequest(1, 0, 100)),
        (ctr(limits={"hygon.com/dcunum": 2}), DcuRequest(2, 0, 100)),
        (
            ctr(limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000", "hygon.com/dcucores": "60"}),
            DcuRequest(1, 2000, 60),
        ),
        (ctr(limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "2000"}), DcuRequest(1, 2000, 100)),
        (ctr(limits={"hygon.com/dcunum": "1", "hygon.com/dcucores": "0"}), DcuRequest(1, 0, 0)),
        # a count of 0 asks for no DCU, as in HAMi (and as Kubernetes reads any zero limit)
        (ctr(limits={"hygon.com/dcunum": "0"}), None),
        (ctr(limits={"hygon.com/dcunum": 0}), None),
        (ctr(limits={"hygon.com/dcunum": "0"}, requests={"hygon.com/dcunum": "1"}), None),
        # requests are read when limits do not name the resource (HAMi < 2.6 ignored them)
        (ctr(requests={"hygon.com/dcunum": "1", "hygon.com/dcumem": "512"}), DcuRequest(1, 512, 100)),
        # limits win over requests
        (ctr(limits={"hygon.com/dcunum": "1"}, requests={"hygon.com/dcunum": "3"}), DcuRequest(1, 0, 100)),
    ],
)
def test_parse_table(container, expected):
    assert parse_container_request(container, DCU) == expected


@pytest.mark.parametrize(
    ("written", "canonical", "mib"),
    [("2000", "2k", 2000), ("3000", "3k", 3000), ("1024", "1Ki", 1024), ("3000", "3e3", 3000),
     ("65520", "65520", 65520)],
)
def test_quantities_as_the_api_server_canonicalises_them(written, canonical, mib):
    # A real kube-apiserver stores and admits "2000" as "2k": the webhook and the extender
    # see the canonical form, and must read the same number the user wrote.
    for value in (written, canonical):
        request = parse_container_request(ctr("c", limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": value}), DCU)
        assert request.memory_mib == mib


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({"hygon.com/dcunum": "0", "hygon.com/dcumem": "1000"}, "need hygon.com/dcunum"),
        ({"hygon.com/dcunum": "0", "hygon.com/dcucores": "0"}, "or drop them to ask for no DCU"),
        ({"hygon.com/dcunum": "-1"}, "must not be negative"),
        ({"hygon.com/dcunum": "1.5"}, "whole number"),
        # 2Gi MiB is a whole number, but far past any card: refused, never read as 2.
        ({"hygon.com/dcunum": "1", "hygon.com/dcumem": "2Gi"}, "out of range"),
        ({"hygon.com/dcunum": "1", "hygon.com/dcumem": "1500m"}, "whole number"),
        ({"hygon.com/dcunum": "1", "hygon.com/dcumem": "1e99999999"}, "out of range"),
        ({"hygon.com/dcunum": "1", "hygon.com/dcumem": "0"}, "at least 1 MiB"),
        ({"hygon.com/dcunum": "1", "hygon.com/dcucores": "101"}, "0-100"),
        ({"hygon.com/dcunum": "99999999999"}, "out of range"),
        ({"hygon.com/dcumem": "1000"}, "need hygon.com/dcunum"),
        ({"hygon.com/dcunum": True}, "whole number"),
    ],
)
def test_parse_errors_name_container_and_resource(limits, fragment):
    with pytest.raises(RequestError) as info:
        parse_container_request(ctr("trainer", limits=limits), DCU)
    assert fragment in str(info.value)
    assert "container trainer" in str(info.value)


def test_memory_factor_scales_memory():
    assert parse_container_request(
        ctr(limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "2"}), DCU, memory_factor=1024
    ) == DcuRequest(1, 2048, 100)


def test_custom_resource_names():
    names = ResourceNames("example.com/n", "example.com/m", "example.com/c")
    c = ctr(limits={"example.com/n": "1", "example.com/m": "10"})
    assert parse_container_request(c, names) == DcuRequest(1, 10, 100)
    assert parse_container_request(ctr(limits={"hygon.com/dcunum": "1"}), names) is None


def test_pod_requests_in_codec_order_init_first():
    pod = {
        "spec": {
            "initContainers": [ctr("init", limits={"hygon.com/dcunum": "1"})],
            "containers": [
                ctr("a", limits={"hygon.com/dcunum": "1", "hygon.com/dcumem": "100"}),
                ctr("b"),
                ctr("c", limits={"hygon.com/dcunum": "2"}),
            ],
        }
    }
    assert parse_pod_requests(pod, DCU) == [DcuRequest(1), DcuRequest(1, 100), None, DcuRequest(2)]
    assert pod_asks_for_count(pod, DCU.count)
    assert not pod_asks_for_count({"spec": {"containers": [ctr("x", limits={"cpu": "1"})]}}, DCU.count)


def test_shared_means_part_of_one_card():
    assert DcuRequest(1, 2000, 100).shared
    assert DcuRequest(1, 0, 50).shared
    assert not DcuRequest(1, 0, 100).shared


@pytest.mark.parametrize("raw", ["1" * 5000, "-" + "9" * 5000, 10**5000, -(10**5000), "1" * 30],
                         ids=["5000-digits", "negative-5000-digits", "5000-digit-int", "negative-5000-digit-int",
                              "30-digits"])
def test_huge_quantities_are_out_of_range_without_echoing_them(raw):
    # int() of a 5,000-digit string raises a bare ValueError (Python's 4,300-digit limit): a 500.
    with pytest.raises(RequestError) as info:
        parse_container_request(ctr("trainer", limits={"hygon.com/dcunum": raw}), DCU)
    message = str(info.value)
    assert "container trainer" in message and ("out of range" in message or "negative" in message)
    assert len(message) < 200  # the value is not echoed back in full


def test_a_long_non_number_is_not_echoed_in_full():
    with pytest.raises(RequestError) as info:
        parse_container_request(ctr("trainer", limits={"hygon.com/dcunum": "x" * 100_000}), DCU)
    assert "whole number" in str(info.value) and len(str(info.value)) < 200


def test_leading_zeros_still_read_as_the_number():
    # Only significant digits count towards the range: zero padding is not "out of range".
    limits = {"hygon.com/dcunum": "0002", "hygon.com/dcumem": "0" * 40 + "1000"}
    assert parse_container_request(ctr(limits=limits), DCU) == DcuRequest(2, 1000, 100)


@pytest.mark.parametrize(("limits", "requests", "asks"), [
    ({}, {}, False),
    ({DCU.count: "0"}, {}, False),
    ({}, {DCU.count: "0"}, False),
    ({DCU.count: 0}, {DCU.count: "0"}, False),
    ({DCU.count: "0", DCU.memory: "1000"}, {}, False),  # invalid as a request, but no count for the kubelet
    ({DCU.count: "1"}, {}, True),
    ({}, {DCU.count: "2"}, True),
    ({DCU.count: "1Ki"}, {}, True),
    ({DCU.count: "1.5"}, {}, True),  # unreadable: it may yet be a request the kubelet serves
])
def test_asks_for_count_means_more_than_zero_of_the_count_resource(limits, requests, asks):
    assert asks_for_count(ctr(limits=limits, requests=requests), DCU.count) is asks
    pod = {"spec": {"initContainers": [ctr("i", limits=limits, requests=requests)], "containers": [ctr()]}}
    assert pod_asks_for_count(pod, DCU.count) is asks

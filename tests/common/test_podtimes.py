"""Pod times for the latency histograms: bind time from hami.io/bind-time (Unix seconds as
HAMi writes it) else PodScheduled, creationTimestamp; anything unreadable is None, never an error."""

from datetime import UTC, datetime

import pytest

from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.codec import CodecError, decode_unix_seconds, encode_unix_seconds
from hami_dcu.common.protocol.podtimes import bound_at, created_at, scheduled_at, seconds_between

AT = datetime(2025, 8, 7, 2, 0, 1, tzinfo=UTC)


def test_unix_seconds_round_trip_and_refuse_what_go_refuses():
    assert encode_unix_seconds(AT) == "1754532001"
    assert decode_unix_seconds("1754532001") == AT
    for bad in ("", "+1754532001", "1_754_532_001", "-5", "1.5", "١٢٣", "9" * 20):
        with pytest.raises(CodecError):
            decode_unix_seconds(bad)


def test_bound_at_prefers_the_annotation_then_the_condition():
    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-08-07T02:00:05Z"}
    pod = {"metadata": {"annotations": {keys.POD_BIND_TIME: "1754532001"}}, "status": {"conditions": [scheduled]}}
    assert bound_at(pod) == AT
    pod["metadata"]["annotations"][keys.POD_BIND_TIME] = "soon"
    assert bound_at(pod) == scheduled_at(pod) == datetime(2025, 8, 7, 2, 0, 5, tzinfo=UTC)
    scheduled["status"] = "False"
    assert bound_at(pod) is None


@pytest.mark.parametrize("pod", [{}, {"metadata": None}, {"metadata": {"creationTimestamp": 5}},
                                 {"metadata": {"creationTimestamp": "2025-08-07T02:00:01"}},  # no zone
                                 {"metadata": {"annotations": "x"}, "status": {"conditions": "x"}}])
def test_unreadable_times_are_none(pod):
    assert created_at(pod) is None and bound_at(pod) is None


def test_seconds_between_never_goes_below_zero():
    assert seconds_between(None, AT) is None
    assert seconds_between(AT, AT.replace(second=3)) == 2
    assert seconds_between(AT.replace(second=3), AT) == 0

"""Bounded JSON decoding: depth, constants, and every failure a JsonError with a reason."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_dcu.common.protocol.safejson import JsonError, depth_exceeds, loads


def nest(depth: int) -> object:
    value: object = []
    for i in range(depth - 1):
        value = [value] if i % 2 else {"k": value}
    return value


@pytest.mark.parametrize("depth", [65, 1000, 100_000])
def test_deep_nesting_is_refused_with_a_reason(depth):
    raw = "[" * depth + "]" * depth
    with pytest.raises(JsonError, match="nested deeper than 64 levels"):
        loads(raw)


def test_depth_limit_is_exact():
    assert loads(json.dumps(nest(64))) == nest(64)
    with pytest.raises(JsonError, match="nested deeper"):
        loads(json.dumps(nest(65)))
    assert loads(json.dumps(nest(10)), max_depth=10) == nest(10)
    with pytest.raises(JsonError):
        loads(json.dumps(nest(11)), max_depth=10)


@pytest.mark.parametrize("raw", [b"NaN", b"[Infinity]", b'{"a": -Infinity}'])
def test_non_json_constants_are_refused(raw):
    with pytest.raises(JsonError, match="not a JSON value"):
        loads(raw)


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe\x00", b"1" * 5000])
def test_other_bad_input_is_a_json_error(raw):
    with pytest.raises(JsonError, match="body is not JSON"):
        loads(raw)


def test_scalars_and_wide_flat_values_pass():
    assert loads(b"3") == 3
    assert loads(json.dumps(["n"] * 10_000)) == ["n"] * 10_000
    assert not depth_exceeds("x", 0)


@given(st.recursive(st.none() | st.integers() | st.text(max_size=3),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=30))
def test_depth_check_agrees_with_a_recursive_count(value):
    def depth(v: object) -> int:
        if isinstance(v, dict):
            return 1 + max((depth(c) for c in v.values()), default=0)
        if isinstance(v, list):
            return 1 + max((depth(c) for c in v), default=0)
        return 0

    for limit in range(0, 8):
        assert depth_exceeds(value, limit) == (depth(value) > limit)


def test_brackets_inside_strings_are_not_nesting():
    value = {"a": ["[" * 1000, "{" * 1000], "b": [[["x"]]]}
    assert loads(json.dumps(value)) == value

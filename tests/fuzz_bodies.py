"""Hypothesis strategies for fuzzing an HTTP JSON endpoint: random bytes, random JSON,
a well-formed body with one field (at any depth) replaced, deep nesting, truncation, and
how the body travels (pieces, pauses, chunked framing)."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

json_scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=16)
# Quantities and names that broke parsers: huge digit strings, signs, suffixes, surrogates.
nasty_strings = st.sampled_from(["1" * 5000, "-1", "1e3", "2Gi", "0x10", " 1 ", "\ud800", "../x", "", "9" * 11])


@dataclass(frozen=True)
class Framing:
    parts: int
    chunked: bool
    pause: float


framings = st.builds(Framing, parts=st.integers(1, 4), chunked=st.booleans(), pause=st.sampled_from([0.0, 0.002]))


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside `value` (dict keys and list indexes), the root excluded."""
    found: list[tuple[Any, ...]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, child in items:
        found.append((*prefix, key))
        found += paths(child, (*prefix, key))
    return found


def replaced(base: dict[str, Any], path: tuple[Any, ...], new: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    target = out
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return out


def bodies(base: dict[str, Any]) -> st.SearchStrategy[bytes]:
    """Bodies near and far from `base`, a well-formed request."""
    encoded = json.dumps(base).encode()
    mutated = st.builds(lambda path, new: json.dumps(replaced(base, path, new)).encode(),
                        st.sampled_from(paths(base)), json_values | nasty_strings)
    deep = st.integers(60, 3000).map(lambda n: b"[" * n + b"]" * n)
    deep_inside = st.builds(lambda path, n: json.dumps(replaced(base, path, "@")).encode()
                            .replace(b'"@"', b"[" * n + b"]" * n), st.sampled_from(paths(base)), st.integers(60, 1500))
    truncated = st.integers(0, len(encoded) - 1).map(lambda n: encoded[:n])
    return st.one_of(mutated, mutated, deep, deep_inside, truncated, st.binary(max_size=300),
                     json_values.map(lambda v: json.dumps(v).encode()))

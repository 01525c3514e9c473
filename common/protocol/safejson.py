"""JSON from the network, decoded with bounds: nesting depth and strict constants.

Python's decoder recurses per level and raises RecursionError on deep input (a bare 500),
and code further on (diffs, re-encoding) recurses over what it got. Kubernetes objects nest
about 20 levels (managedFields mirror the spec), so anything past MAX_DEPTH is refused
before any of our code walks it. NaN and Infinity are not JSON (Go refuses them too).
"""

from __future__ import annotations

import json

from hami_dcu.common.protocol.errors import HamiDcuError

MAX_DEPTH = 64
_CONTAINERS = frozenset((dict, list))


class JsonError(HamiDcuError, ValueError):
    """The body is not JSON we accept; the message says why."""


def _no_constant(name: str) -> object:
    raise JsonError(f"body is not JSON: {name} is not a JSON value")


# One decoder for every call: json.loads with an option builds a new one each time.
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def loads(raw: bytes | str, max_depth: int = MAX_DEPTH) -> object:
    try:
        # what json.loads does with bytes (it detects UTF-16/32 too, as the JSON RFC allows)
        text = raw.decode(json.detect_encoding(raw), "surrogatepass") if isinstance(raw, bytes) else raw
        value = _DECODER.decode(text)
    except RecursionError as exc:
        raise JsonError(f"JSON nested deeper than {max_depth} levels") from exc
    except JsonError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonError(f"body is not JSON: {exc}") from exc
    # Depth cannot exceed the number of opening brackets (counted at C speed, strings
    # included): most bodies, a 5,000-name NodeNames list among them, need no walk at all.
    data = raw.encode() if isinstance(raw, str) else raw
    if data.count(b"[") + data.count(b"{") > max_depth and depth_exceeds(value, max_depth):
        raise JsonError(f"JSON nested deeper than {max_depth} levels")
    return value


def depth_exceeds(value: object, max_depth: int) -> bool:
    """True when objects/arrays nest more than `max_depth` levels. Iterative: the check must
    not itself recurse. Scalars are skipped without being pushed, so a flat list is cheap."""
    if not isinstance(value, (dict, list)):
        return False
    if max_depth < 1:
        return True
    stack: list[tuple[dict[str, object] | list[object], int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        if _CONTAINERS.isdisjoint(map(type, children)):
            continue  # all scalars (a long list of names): checked without a Python-level loop
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > max_depth:
                    return True
                stack.append((child, depth + 1))
    return False

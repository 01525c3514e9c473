"""Is the device plugin on a node alive? (pure), judged from HAMi's handshake annotation.

The plugin writes `hami.io/node-handshake-dcu: Reported <time>` every 30 s. HAMi's scheduler
answers by overwriting it with `Requesting_<time>` about every 15 s and declares the plugin
dead when no `Reported` comes back within 60 s.

Our choice: we read the plugin's own timestamp instead of writing `Requesting_`. That keeps
the annotation HAMi-compatible (a HAMi scheduler running beside us may still write
`Requesting_`, and we honour it) while saving one API write per node per pass, which at
5,000 nodes is ~330 writes/s. The rules, with a 60 s limit:

* `Reported <time>`: alive while `now - time <= 60 s`. When the time cannot be read (a
  plugin with an unexpected clock format) we fall back to when *we* last saw the value
  change, which the plugin does on every 30 s report.
* `Requesting_<time>` (written by a HAMi scheduler): alive while `now - time <= 60 s`, the
  grace HAMi gives the plugin to answer; a time HAMi cannot read counts as alive (HAMi's
  rule). Past the grace the node stays usable while its `status.allocatable` still shows
  DCUs (HAMi's guard: the kubelet still has the plugin).
* any other value (`Deleted...`, text we do not know): HAMi counts it healthy and re-stamps
  it `Requesting_<now>`; without writing, that is: alive for 60 s from when we saw the
  value appear, then as an expired `Requesting_` (alive while allocatable shows DCUs).
* absent: not usable (a plugin that never reported; HAMi would also wait 60 s for it).

Clock skew between plugin and scheduler nodes counts against the 60 s; node clocks in a
cluster are NTP-synchronised far tighter than that.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hami_dcu.common.protocol import keys, objects
from hami_dcu.common.protocol.codec import decode_handshake
from hami_dcu.common.protocol.kubequantity import parse_quantity

HANDSHAKE_TTL = timedelta(seconds=60)


@dataclass(frozen=True, slots=True)
class HandshakeSeen:
    value: str
    state: str
    at: datetime | None  # the time written in the value, when readable
    changed_at: datetime  # when this scheduler last saw the value change


def allocates_dcu(node: dict[str, Any], count_resource: str) -> bool:
    """The node's status.allocatable shows at least one DCU (the kubelet has the plugin)."""
    value = (objects.node_status(node).get("allocatable") or {}).get(count_resource)
    if not isinstance(value, str | int) or isinstance(value, bool) or len(str(value)) > 64:
        return False
    try:
        return parse_quantity(value) > 0
    except (ValueError, ArithmeticError):
        return False


def observe(value: str | None, previous: HandshakeSeen | None, now: datetime) -> HandshakeSeen | None:
    if not value:
        return None
    if previous is not None and previous.value == value:
        return previous
    parsed = decode_handshake(value)
    return HandshakeSeen(value=value, state=parsed.state, at=parsed.at, changed_at=now)


def handshake_problem(seen: HandshakeSeen | None, now: datetime, ttl: timedelta = HANDSHAKE_TTL,
                      allocatable: bool = False, *, key: str) -> str | None:
    """None when the plugin counts as alive, else why not. `allocatable`: the node's
    status.allocatable shows DCUs; `key`: the naming set's handshake annotation."""
    if seen is None:
        return f"no {key} annotation (device plugin never reported)"
    if _alive_forever(seen, allocatable):
        return None
    elapsed = now - _since(seen)
    if elapsed <= ttl:
        return None
    age = int(elapsed.total_seconds())
    if seen.state == keys.HANDSHAKE_REPORTED:
        return f"device plugin last reported {age}s ago (limit {int(ttl.total_seconds())}s)"
    if seen.state == keys.HANDSHAKE_REQUESTING:
        return f"device plugin did not answer a handshake request for {age}s and the node allocates no DCU"
    return f"handshake is {seen.value[:40]!r} for {age}s, not a plugin report, and the node allocates no DCU"


def fresh_until(seen: HandshakeSeen | None, ttl: timedelta = HANDSHAKE_TTL, allocatable: bool = False) -> float:
    """Epoch seconds until which the plugin counts as alive (-inf when it never does, +inf
    while nothing but a new value can change that): the per-request check in /filter is
    then one float comparison per node."""
    if seen is None:
        return float("-inf")
    if _alive_forever(seen, allocatable):
        return float("inf")
    return (_since(seen) + ttl).timestamp()


def _alive_forever(seen: HandshakeSeen, allocatable: bool) -> bool:
    if seen.state == keys.HANDSHAKE_REPORTED:
        return False  # the plugin's own clock decides
    if seen.state == keys.HANDSHAKE_REQUESTING and seen.at is None:
        return True  # HAMi cannot read the time either and counts the node healthy
    return allocatable  # an expired request, or a value we do not know (see the module docstring)


def _since(seen: HandshakeSeen) -> datetime:
    if seen.state in (keys.HANDSHAKE_REPORTED, keys.HANDSHAKE_REQUESTING):
        return seen.at or seen.changed_at
    return seen.changed_at

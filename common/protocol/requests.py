"""What a pod asks for, per container, in DCU terms, as HAMi reads it, with stricter errors.

Rules, per container and per resource: the value in `limits`, else in `requests`.
* `dcunum` (count): absent or 0 means the container asks for no DCU (as in HAMi);
  otherwise a whole number >= 1.
* `dcumem` (MiB): absent means the whole card's memory; if given it must be >= 1.
* `dcucores` (% of one card): absent means 100; it must be in 0..100.
* `dcumem`/`dcucores` without a card count (absent or 0) is an error here: HAMi silently
  ignores such a container, which leaves the user with a pod that runs without the DCU it
  asked for.

Values are Kubernetes quantities, read with the `kubernetes` client's parser: "2k", "2Ki"
and "1e3" are whole numbers (the API server hands "2000" to admission as "2k"); a fraction
("1.5", "500m") is refused, never rounded.

Pure functions, no I/O. Errors are `RequestError` with a message that names the container,
the resource and what to change.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from hami_dcu.common.protocol import objects
from hami_dcu.common.protocol.counting import start_order
from hami_dcu.common.protocol.errors import HamiDcuError
from hami_dcu.common.protocol.keys import ResourceNames
from hami_dcu.common.protocol.kubequantity import parse_quantity

INT32_MAX = 2**31 - 1
_INTEGER = re.compile(r"[0-9]+")
_MAX_DIGITS = len(str(INT32_MAX))  # more significant digits than this is out of range
_SHOWN_CHARS = 40
_QUANTITY_MAX_CHARS = 64  # far more than any quantity of these resources needs


class RequestError(HamiDcuError, ValueError):
    """A DCU request that cannot be honoured as written."""


@dataclass(frozen=True)
class DcuRequest:
    """One container's DCU request. `memory_mib == 0` means the whole memory of each card."""

    count: int
    memory_mib: int = 0
    cores: int = 100

    @property
    def whole_memory(self) -> bool:
        return self.memory_mib == 0

    @property
    def shared(self) -> bool:
        """A vDCU: part of one card's memory or compute."""
        return self.memory_mib > 0 or self.cores < 100


def names_dcu(container: dict[str, Any], names: ResourceNames) -> bool:
    """True when the container names any DCU resource in limits or requests, even with 0: what
    admission reads, to say what is wrong with a request. Whether a pod asks the kubelet for
    DCUs is `pod_asks_for_count`."""
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if any(name in values for name in names.all()):
            return True
    return False


def pod_containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """Containers in codec order: init containers (restartable sidecars included) first."""
    return list(objects.init_containers(pod)) + list(objects.containers(pod))


def sidecar_positions(pod: dict[str, Any]) -> frozenset[int]:
    """Codec positions (pod_containers order) of the native sidecars: init containers with
    `restartPolicy: Always`, which keep running beside the app containers."""
    return start_order(pod).sidecars


def asks_for_count(container: dict[str, Any], resource: str) -> bool:
    """True when the container asks for more than 0 of the count resource `resource`, read as
    every request is (limits, else requests): only then does the kubelet call Allocate for it.
    Naming the resource with 0 asks for nothing (issue 35: a Pending tenant pod with `dcunum: 0`
    was taken for one awaiting an Allocate that never comes). A count that cannot be read
    counts as asking: it may yet be a request the kubelet serves, so who waits stays unknown."""
    try:
        return bool(_quantity(container, resource, container.get("name") or "<unnamed>"))
    except RequestError:
        return True


def pod_asks_for_count(pod: dict[str, Any], resource: str) -> bool:
    """True when some container, init containers included, asks for more than 0 of `resource`."""
    return any(asks_for_count(c, resource) for c in pod_containers(pod))


def asks_for_dcu(container: dict[str, Any], names: ResourceNames) -> bool:
    """True when the container asks for a DCU, or names one in a way that cannot be honoured
    (so admission can say why). A lone `dcunum: 0` asks for nothing."""
    if not names_dcu(container, names):
        return False
    try:
        return parse_container_request(container, names) is not None
    except RequestError:
        return True


def parse_container_request(
    container: dict[str, Any],
    names: ResourceNames,
    memory_factor: int = 1,
) -> DcuRequest | None:
    """The container's DCU request, None when it asks for none. `names`: the naming set's
    resources."""
    cname = container.get("name") or "<unnamed>"
    count = _quantity(container, names.count, cname)
    memory = _quantity(container, names.memory, cname)
    cores = _quantity(container, names.cores, cname)
    if not count:
        if memory is not None or cores is not None:
            raise RequestError(
                f"container {cname}: {names.memory} / {names.cores} need {names.count} "
                f"(set {names.count}: 1 in its limits, or drop them to ask for no DCU)"
            )
        return None
    if memory is not None:
        if memory < 1:
            raise RequestError(
                f"container {cname}: {names.memory} must be at least 1 MiB, got {memory} "
                f"(leave it out to get the whole card's memory)"
            )
        if memory * memory_factor > INT32_MAX:
            raise RequestError(f"container {cname}: {names.memory} {memory} x factor {memory_factor} is too large")
        memory *= memory_factor
    if cores is not None and cores > 100:
        raise RequestError(f"container {cname}: {names.cores} is a percentage of one card (0-100), got {cores}")
    return DcuRequest(count=count, memory_mib=memory or 0, cores=100 if cores is None else cores)


def parse_pod_requests(
    pod: dict[str, Any],
    names: ResourceNames,
    memory_factor: int = 1,
) -> list[DcuRequest | None]:
    """One entry per container in codec order (init containers first), None for no DCU."""
    return [parse_container_request(c, names, memory_factor) for c in pod_containers(pod)]


def _quantity(container: dict[str, Any], resource: str, cname: str) -> int | None:
    resources = container.get("resources") or {}
    for section in ("limits", "requests"):
        values = resources.get(section) or {}
        if resource in values:
            return _integer(values[resource], resource, cname, section)
    return None


def _integer(raw: object, resource: str, cname: str, section: str) -> int:
    # Extended resources are whole numbers; Kubernetes sends them as strings ("2000") and
    # users sometimes write plain ints. Anything else (suffixes, fractions) is refused so a
    # "2Gi" never silently becomes 2 MiB.
    if isinstance(raw, bool) or not isinstance(raw, (str, int)):
        raise RequestError(f"container {cname}: {resource} in {section} must be a whole number, got {_shown(raw)}")
    if isinstance(raw, int):
        number = raw
    elif len(raw) <= _MAX_DIGITS and raw.isascii() and raw.isdigit():
        number = int(raw)  # the common case ("1", "15", "2000"), what the general path below gives
    else:
        text = raw.strip()
        negative = text.startswith("-")
        digits = text[1:] if negative else text
        if not _INTEGER.fullmatch(digits):
            # The API server canonicalises quantities before admission (a manifest's "2000"
            # reaches the webhook as "2k"), so any whole-number quantity is what the user wrote.
            whole = _whole_quantity(text)
            if whole is None:
                raise RequestError(
                    f"container {cname}: {resource} in {section} must be a whole number, got {_shown(raw)}"
                )
            digits, negative = str(min(abs(whole), INT32_MAX + 1)), whole < 0
        # Range is decided on the digit count before int(): int() of a long string is slow,
        # and Python refuses one past 4,300 digits with a bare ValueError.
        significant = digits.lstrip("0") or "0"
        if len(significant) > _MAX_DIGITS:
            number = -(INT32_MAX + 1) if negative else INT32_MAX + 1
        else:
            number = -int(significant) if negative else int(significant)
    if number < 0:
        raise RequestError(f"container {cname}: {resource} must not be negative, got {_shown(raw)}")
    if number > INT32_MAX:
        raise RequestError(f"container {cname}: {resource} {_shown(raw)} is out of range (max {INT32_MAX})")
    return number


@functools.lru_cache(maxsize=1024)  # the same few quantities ("2k", "1Ki") on every pod; parsing one costs ~5 us
def _whole_quantity(text: str) -> int | None:
    """A Kubernetes quantity ("2k", "1Ki", "3e3") as an integer, clamped just past int32;
    None when it is not a quantity or not a whole number ("1.5", "500m")."""
    if len(text) > _QUANTITY_MAX_CHARS:
        return None
    try:
        value = parse_quantity(text)
    except (ValueError, ArithmeticError):
        return None
    if not value.is_finite():
        return None
    # copy_abs() and comparisons never round: abs() of 1E+99999999 overflows the context.
    if value.copy_abs() > INT32_MAX:
        return -(INT32_MAX + 1) if value.is_signed() else INT32_MAX + 1
    if value != value.to_integral_value():
        return None
    return int(value)


def _shown(raw: object) -> str:
    """The value for an error message, cut short: a message must not carry a megabyte back."""
    if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) > INT32_MAX:
        return "(a number beyond int32)"  # str() of a huge int is itself refused by Python
    if isinstance(raw, str) and len(raw) > _SHOWN_CHARS:
        return repr(raw[:_SHOWN_CHARS]) + "..."
    text = repr(raw)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."

"""hami-dcu's errors: one root, one base per component, and the one rule that tells an
expected failure from a bug.

An *expected failure* is something the world did: a malformed request, a pod the checks
refuse, an API server that did not answer, a full disk. It is an instance of `HamiDcuError`
(or one of the few library errors `EXPECTED_LIBRARY_ERRORS` names) and is answered as such:
its own HTTP status or gRPC code, its message to the caller, no traceback. Anything else is a
bug in hami-dcu: the shells log it with its traceback, answer 500 / gRPC INTERNAL with a short
message, and count it (common/io/failures.py does all three). Pure: no I/O.

Each class keeps the builtin base it had (ValueError, RuntimeError) beside its component's
base, so an `except ValueError` written before this hierarchy still catches what it caught.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


class HamiDcuError(Exception):
    """The root of every failure hami-dcu expects. `http_status` and `grpc_code` (a
    `grpc.StatusCode` name, so this module needs no gRPC) say how a server answers it."""

    http_status: ClassVar[int] = 400
    grpc_code: ClassVar[str] = "FAILED_PRECONDITION"


class WebhookError(HamiDcuError):
    """The admission webhook's failures."""


class SchedulerError(HamiDcuError):
    """The scheduler extender's failures."""


class NodeError(HamiDcuError):
    """The node-side mechanisms both plugins stand on: the SMI, the allocator, the vdev files."""


class DevicePluginError(HamiDcuError):
    """The device plugin's failures."""


class DraError(HamiDcuError):
    """The DRA driver's failures."""


class CliError(HamiDcuError):
    """The command line's failures."""


# Library errors that are the world's doing, not ours. OSError: the node refused a file or a
# device (disk full, permission, a card gone); the Kubernetes client's errors are wrapped in
# common.io.kube.KubeError, a HamiDcuError, before any shell sees them.
# Each is answered with the HTTP status and gRPC code beside it.
EXPECTED_LIBRARY_ERRORS: dict[type[BaseException], tuple[int, str]] = {OSError: (503, "UNAVAILABLE")}

INTERNAL_HTTP_STATUS = 500
INTERNAL_GRPC_CODE = "INTERNAL"


@dataclass(frozen=True, slots=True)
class Failure:
    """How a server answers one failure."""

    expected: bool
    http_status: int
    grpc_code: str
    message: str


def is_expected(exc: BaseException) -> bool:
    """The rule: an expected failure, or (False) a bug."""
    return isinstance(exc, (HamiDcuError, *EXPECTED_LIBRARY_ERRORS))


def judge(exc: BaseException, component: str) -> Failure:
    """The answer to `exc` raised in `component`. A bug's message names only its type: the
    details are in the component's log, not for the caller."""
    if isinstance(exc, HamiDcuError):
        return Failure(True, exc.http_status, exc.grpc_code, _message(exc))
    for kind, (status, code) in EXPECTED_LIBRARY_ERRORS.items():
        if isinstance(exc, kind):
            return Failure(True, status, code, _message(exc))
    return Failure(False, INTERNAL_HTTP_STATUS, INTERNAL_GRPC_CODE,
                   f"internal error in the {component} ({type(exc).__name__}); its log has the details")


def _message(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__

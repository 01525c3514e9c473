"""The admission hook point: where a webhook dispatcher plugs in, as kube-apiserver calls its
admission chain.

Before a pod is written the server awaits `server.admission(attributes)` if one is set, with
what kube-apiserver hands its admission plugins (`AdmissionAttributes`):

- a pod CREATE (after defaulting): `object` is the pod, `old_object` None;
- a pod UPDATE, by PUT or any PATCH, of the pod or its `status`: `object` is the pod as it
  would be stored, `old_object` the stored one. The write commits only if the pod did not
  change meanwhile; otherwise it is worked out and admitted again (kube's GuaranteedUpdate);
- a Binding (CREATE of `pods/binding`): `object` is the Binding, whose annotations land on the
  pod without any pod UPDATE being admitted.

`user` is the caller's userInfo (username, groups, extra), from the bearer token it sent
(`LocalApiServer.credentials`). The hook returns the object to write (mutated or not), or
raises `AdmissionDenied(message, code)`, which the client receives as a v1 Status with that
code and message. kube-apiserver words a webhook denial as `admission webhook "<name>" denied
the request: <reason>`, and a failed call under failurePolicy Fail as a 500 `Internal error
occurred: failed calling webhook "<name>": ...`; the dispatcher composes those texts, this
server passes them through unchanged. Any other exception from the hook is answered 500.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from hami_dcu.cli.localcluster.apiserver.resources import JSON
from hami_dcu.common.protocol.errors import CliError

CREATE, UPDATE = "CREATE", "UPDATE"


@dataclass(frozen=True)
class AdmissionAttributes:
    operation: str  # CREATE or UPDATE
    resource: str  # the plural: "pods"
    subresource: str  # "" for the object itself, "binding", "status"
    namespace: str
    name: str
    object: JSON  # owned by the hook: mutate it or return another dict
    old_object: JSON | None = None
    namespace_object: JSON | None = None  # a copy of the Namespace: its labels feed namespaceSelector
    user: JSON = field(default_factory=dict)  # userInfo

    @property
    def kind(self) -> str:
        return "Binding" if self.subresource == "binding" else "Pod"


AdmissionHook = Callable[[AdmissionAttributes], Awaitable[JSON]]

_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
            422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
            504: "Timeout"}


class AdmissionDenied(CliError):
    """Raised by the admission hook: the write fails with this HTTP code and message."""

    def __init__(self, message: str, code: int = 400, reason: str | None = None) -> None:
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else _REASONS.get(code, "")
        super().__init__(message)

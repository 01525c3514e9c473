"""The admission hook point: where a MutatingWebhookConfiguration dispatcher plugs in.

Before a pod CREATE is stored (after defaulting, as in kube-apiserver), the server awaits
`server.admission(resource, namespace, obj, namespace_obj)` if one is set:

- `resource` is the plural ("pods"), `namespace` the request's namespace;
- `obj` is the defaulted object, owned by the call: mutate it or return another dict;
- `namespace_obj` is a copy of the Namespace (its labels feed `namespaceSelector`), or None.

It returns the object to store, or raises `AdmissionDenied(message, code)`, which the
client receives as a v1 Status with that code and message. kube-apiserver words a webhook
denial as `admission webhook "<name>" denied the request: <reason>`, and a failed call under
failurePolicy Fail as a 500 `Internal error occurred: failed calling webhook "<name>": ...`;
the dispatcher composes those texts, this server passes them through unchanged. Any other
exception from the hook is answered 500 InternalError.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from hami_dcu.e2e.apiserver.resources import JSON

# (resource, namespace, object, namespace object or None) -> the object to store
AdmissionHook = Callable[[str, str, JSON, JSON | None], Awaitable[JSON]]

_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
            422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
            504: "Timeout"}


class AdmissionDenied(Exception):
    """Raised by the admission hook: the create fails with this HTTP code and message."""

    def __init__(self, message: str, code: int = 400, reason: str | None = None) -> None:
        self.code = code
        self.message = message
        self.reason = reason if reason is not None else _REASONS.get(code, "")
        super().__init__(message)

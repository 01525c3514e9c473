"""Reading a whole HTTP request body under a size cap and a deadline, for every aiohttp
server of ours.

`request.content.read(n)` returns what has arrived so far, not n bytes: a body split across
several TLS records or chunks would be cut short. This reads until EOF and stops as soon as
the cap is passed, whatever the framing (Content-Length, chunked, Content-Encoding: the cap
counts decoded bytes, so a gzip bomb stops at the cap too), so the cap also holds for a
route mounted on an app with a larger `client_max_size`. A body that stops arriving (or
whose chunk framing aiohttp cannot parse: it then waits for ever) is cut off at the deadline
instead of holding a connection and a handler.
"""

from __future__ import annotations

import asyncio

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestPayloadError

from hami_dcu.common.protocol.errors import HamiDcuError

# kube-apiserver gives a webhook at most 30 s, kube-scheduler an extender 30 s by default.
BODY_DEADLINE = 30.0


class BodyError(HamiDcuError, ValueError):
    """The body cannot be read; `http_status` is the HTTP status that says why."""


class BodyTooLarge(BodyError):
    http_status = 413

    def __init__(self, limit: int) -> None:
        super().__init__(f"body larger than {limit} bytes")
        self.limit = limit


class BodyTimeout(BodyError):
    http_status = 408


async def read_body(request: web.Request, limit: int, deadline: float = BODY_DEADLINE) -> bytes:
    """The whole body, or a BodyError: too large (as soon as more than `limit` bytes are
    seen), not received within `deadline` seconds, or undecodable."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(limit)
    parts: list[bytes] = []
    size = 0
    try:
        # A small body has usually arrived with the headers: take it without arming a timer
        # (one per request, a measurable share of a webhook review).
        first = request.content.read_nowait()
        size = len(first)
        if size > limit:
            raise BodyTooLarge(limit)
        if request.content.is_eof():
            return first
        parts.append(first)
        async with asyncio.timeout(deadline):
            while True:
                chunk = await request.content.readany()
                if not chunk:  # readany returns b"" only at EOF
                    return b"".join(parts)
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(limit)
                parts.append(chunk)
    except TimeoutError as exc:
        raise BodyTimeout(f"body not received within {deadline:g} s ({size} bytes arrived)") from exc
    except (RequestPayloadError, HttpProcessingError) as exc:
        # Bad framing or a Content-Encoding that does not decode: the client's fault.
        raise BodyError(f"body unreadable: {_first_line(exc)}") from exc
    except ConnectionResetError as exc:
        raise BodyError("connection lost while reading the body") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

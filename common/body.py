"""Reading a whole HTTP request body under a size cap, for every aiohttp server of ours.

`request.content.read(n)` returns what has arrived so far, not n bytes: a body split across
several TLS records or chunks would be cut short. This reads until EOF and stops as soon as
the cap is passed, whatever the framing (Content-Length or chunked), so the cap also holds
for a route mounted on an app with a larger `client_max_size`.
"""

from __future__ import annotations

from aiohttp import web


class BodyTooLarge(ValueError):
    """The body is longer than the cap: answer 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"body larger than {limit} bytes")
        self.limit = limit


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, or BodyTooLarge as soon as more than `limit` bytes are seen."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(limit)
    parts: list[bytes] = []
    size = 0
    while True:
        chunk = await request.content.readany()
        if not chunk:  # readany returns b"" only at EOF
            return b"".join(parts)
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        parts.append(chunk)

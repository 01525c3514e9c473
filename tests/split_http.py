"""A raw HTTP/1.1 client that sends a request body in several writes, with pauses between
them, optionally with chunked transfer encoding: how a body arrives over a real network
(several TLS records, several TCP segments). urllib sends a body in one write, which hides
handlers that read only what has arrived so far."""

from __future__ import annotations

import json
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes

    def json(self) -> object:
        return json.loads(self.body)


def pieces(body: bytes, parts: int) -> list[bytes]:
    """`body` cut into `parts` pieces of nearly equal size (never an empty piece: in a
    chunked body an empty chunk is the end, so an empty body is no piece at all)."""
    if not body:
        return []
    parts = max(1, min(parts, len(body)))
    size, extra = divmod(len(body), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(body[start:end])
        start = end
    return out


def send_split(url: str, path: str, body: bytes, *, parts: int = 3, pause: float = 0.05,
               chunked: bool = False, cafile: str | None = None, timeout: float = 10.0,
               headers: dict[str, str] | None = None) -> Reply:
    """POST `body` to `url + path` in `parts` writes with `pause` seconds between them."""
    split = urlsplit(url)
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = (f"POST {path} HTTP/1.1\r\nHost: {split.netloc}\r\nContent-Type: application/json\r\n"
            f"{framing}\r\n{extra}Connection: close\r\n\r\n").encode()
    writes = [b"%x\r\n%s\r\n" % (len(p), p) if chunked else p for p in pieces(body, parts)]
    return send_raw(url, [head, *writes, *([b"0\r\n\r\n"] if chunked else [])], pause=pause, cafile=cafile,
                    timeout=timeout)


def send_raw(url: str, writes: list[bytes], *, pause: float = 0.05, cafile: str | None = None,
             timeout: float = 10.0) -> Reply:
    """Send `writes` as they are (request line and headers included), `pause` seconds apart,
    then read the reply until the server closes the connection."""
    split = urlsplit(url)
    assert split.hostname is not None and split.port is not None
    raw = socket.create_connection((split.hostname, split.port), timeout=timeout)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock: socket.socket = raw
    if split.scheme == "https":
        context = ssl.create_default_context(cafile=cafile)
        sock = context.wrap_socket(raw, server_hostname=split.hostname)
    with sock:
        try:
            for index, data in enumerate(writes):
                if index:
                    time.sleep(pause)
                sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered early (e.g. 413) and closed: its reply is still readable
        return _read_reply(sock)


def _read_reply(sock: socket.socket) -> Reply:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed before the reply headers: {data!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    length = int(headers["content-length"]) if "content-length" in headers else None
    # The body ends at Content-Length, else at EOF (Connection: close). Not waiting for EOF
    # when the length is known: a server may linger, reading what is left of our request.
    while length is None or len(rest) < length:
        try:
            chunk = sock.recv(65536)
        except (ssl.SSLError, ConnectionResetError):
            break
        if not chunk:
            break
        rest += chunk
    if headers.get("transfer-encoding", "").lower() == "chunked":
        rest = _dechunk(rest)
    elif "content-length" in headers:
        rest = rest[: int(headers["content-length"])]
    return Reply(status, rest)


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2:]
    return out

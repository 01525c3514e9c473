"""Bodies as a real network delivers them: in several TLS records with pauses between them,
and with chunked transfer encoding. The handler must read the whole body, whatever the
framing, and still refuse one over the size cap."""

import gzip
import json
import time
from collections.abc import Iterator

import pytest
from split_http import send_raw, send_split
from test_webhook_server import review

from hami_dcu.cli.localcluster.servers import AppThread
from hami_dcu.common.protocol import keys
from hami_dcu.webhook.decision import Settings
from hami_dcu.webhook.server import MAX_BODY, build_app

DCU = keys.DCU_NAMING  # the naming set these tests speak


def big_review() -> bytes:
    # ~146 KB, as in the report: many containers, each naming the DCU count.
    body = review()
    body["request"]["object"]["spec"]["containers"] = [
        {"name": f"c{i}", "image": "x" * 100, "resources": {"limits": {DCU.resources.count: "1"}}}
        for i in range(1000)]
    return json.dumps(body).encode()


@pytest.mark.parametrize("parts", [2, 3, 4])
@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_review_split_across_writes_is_read_whole(served_webhook, parts, chunked):
    reply = send_split(served_webhook.url, "/webhook", json.dumps(review()).encode(), parts=parts, chunked=chunked,
                       cafile=str(served_webhook.ca_file))
    assert reply.status == 200, reply.body
    answer = reply.json()
    assert answer["response"]["uid"] == "u-1" and answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_large_review_in_many_writes_is_read_whole(served_webhook, chunked):
    body = big_review()
    assert 100_000 < len(body) < MAX_BODY
    reply = send_split(served_webhook.url, "/webhook", body, parts=12, pause=0.02, chunked=chunked,
                       cafile=str(served_webhook.ca_file))
    assert reply.status == 200, reply.body
    assert reply.json()["response"]["uid"] == "u-1"


def test_chunked_body_over_the_cap_is_refused(served_webhook):
    # No Content-Length to check up front: the cap must hold while reading.
    reply = send_split(served_webhook.url, "/webhook", b" " * (MAX_BODY + 10), parts=8, pause=0.0, chunked=True,
                       cafile=str(served_webhook.ca_file))
    assert reply.status == 413


@pytest.fixture
def quick_webhook() -> Iterator[str]:
    """A webhook whose body deadline is short, so a stalled body is cut off quickly."""
    server = AppThread("webhook-quick", lambda: build_app(Settings(naming=DCU), body_deadline=0.5)).start()
    yield server.url
    server.stop()


def head(extra: str) -> bytes:
    return f"POST /webhook HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n".encode()


def test_undecodable_content_encoding_is_a_400(quick_webhook):
    reply = send_split(quick_webhook, "/webhook", b"not gzip at all", headers={"Content-Encoding": "gzip"})
    assert reply.status == 400 and "body" in reply.json()["error"]


def test_gzip_bomb_is_capped_after_decoding(quick_webhook):
    bomb = gzip.compress(b" " * (MAX_BODY + 1024))
    assert len(bomb) < 10_000
    reply = send_split(quick_webhook, "/webhook", bomb, headers={"Content-Encoding": "gzip"})
    assert reply.status == 413


def test_gzip_review_is_read_whole(quick_webhook):
    reply = send_split(quick_webhook, "/webhook", gzip.compress(json.dumps(review()).encode()), parts=3,
                       headers={"Content-Encoding": "gzip"})
    assert reply.status == 200 and reply.json()["response"]["allowed"] is True


@pytest.mark.parametrize("writes", [
    [head("Content-Length: 100\r\n"), b'{"a"'],  # a body that never completes
    [head("Transfer-Encoding: chunked\r\n"), b'5\r\n{"a":\r\n', b"zz\r\nxx\r\n0\r\n\r\n"],  # a broken chunk size
], ids=["stalled-body", "broken-chunk"])
def test_a_body_that_never_arrives_is_answered_408_at_the_deadline(quick_webhook, writes):
    started = time.monotonic()
    reply = send_raw(quick_webhook, writes, pause=0.05, timeout=5)
    assert reply.status == 408 and "within" in reply.json()["error"]
    assert time.monotonic() - started < 3
    assert send_split(quick_webhook, "/webhook", json.dumps(review()).encode()).status == 200

"""Bodies as a real network delivers them: in several TLS records with pauses between them,
and with chunked transfer encoding. The handler must read the whole body, whatever the
framing, and still refuse one over the size cap."""

import json

import pytest
from split_http import send_split
from test_webhook_server import review

from hami_dcu.common import keys
from hami_dcu.webhook.server import MAX_BODY


def big_review() -> bytes:
    # ~146 KB, as in the report: many containers, each naming the DCU count.
    body = review()
    body["request"]["object"]["spec"]["containers"] = [
        {"name": f"c{i}", "image": "x" * 100, "resources": {"limits": {keys.DEFAULT_COUNT_RESOURCE: "1"}}}
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

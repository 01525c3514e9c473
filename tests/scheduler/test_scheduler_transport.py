"""/filter and /bind with bodies as a real network delivers them: several writes with pauses,
and chunked transfer encoding. The handlers must read the whole body, whatever the framing."""

import asyncio
import json

import pytest
from scheduler_helpers import bind_args, create_nodes, dcu_pod, filter_args, until
from split_http import send_raw, send_split

from hami_dcu.common.protocol import keys
from hami_dcu.scheduler.app import build_app


def base_url(client) -> str:
    return f"http://{client.server.host}:{client.server.port}"


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_filter_and_bind_read_split_bodies_whole(kube, service, client, chunked):
    create_nodes(kube, ["n1", "n2"])
    pod = kube.create_pod("default", dcu_pod("p"))
    await until(lambda: all(service.cache.node(n) is not None for n in ("n1", "n2")))
    body = json.dumps(filter_args(pod, ["n1", "n2"])).encode()
    reply = await asyncio.to_thread(send_split, base_url(client), "/filter", body, parts=4, chunked=chunked)
    assert reply.status == 200
    answer = reply.json()
    assert answer["Error"] == "" and answer["NodeNames"] == ["n1"]
    body = json.dumps(bind_args(pod, "n1")).encode()
    reply = await asyncio.to_thread(send_split, base_url(client), "/bind", body, parts=3, chunked=chunked)
    assert reply.status == 200 and reply.json() == {"Error": ""}
    assert kube.get_pod("default", "p")["metadata"]["annotations"][keys.POD_NODE] == "n1"


async def test_chunked_body_over_the_cap_gets_an_error_and_changes_nothing(service, aiohttp_client):
    # No Content-Length to check up front: the cap must hold while reading.
    client = await aiohttp_client(build_app(service, manage_lifecycle=False, max_body=64 * 1024))
    pod = dcu_pod("p", uid="u-p")
    body = json.dumps(filter_args(pod, [f"node-{i:06d}" for i in range(10_000)])).encode()
    assert len(body) > 64 * 1024
    reply = await asyncio.to_thread(send_split, base_url(client), "/filter", body, parts=6, pause=0.0, chunked=True)
    assert reply.status == 200
    assert "larger than" in reply.json()["Error"]
    assert service.cache.placements.all() == []


async def test_undecodable_content_encoding_gets_an_error(service, client):
    reply = await asyncio.to_thread(send_split, base_url(client), "/filter", b"not gzip",
                                    headers={"Content-Encoding": "gzip"})
    assert reply.status == 200 and "body unreadable" in reply.json()["Error"]


@pytest.mark.parametrize("writes", [
    [b"POST /bind HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nConnection: close\r\n\r\n", b'{"a"'],
    [b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
     b'5\r\n{"a":\r\n', b"zz\r\n"],
], ids=["stalled-body", "broken-chunk"])
async def test_a_body_that_never_arrives_gets_an_error_at_the_deadline(service, aiohttp_client, writes):
    client = await aiohttp_client(build_app(service, manage_lifecycle=False, body_deadline=0.5))
    started = asyncio.get_running_loop().time()
    reply = await asyncio.to_thread(send_raw, base_url(client), writes, pause=0.05, timeout=5)
    assert reply.status == 200 and "not received within" in reply.json()["Error"]
    assert asyncio.get_running_loop().time() - started < 3
    assert service.cache.placements.all() == []

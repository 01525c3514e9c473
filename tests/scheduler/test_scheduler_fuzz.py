"""Fuzzing the extender's /filter and /bind over its real transport (its own server thread,
its own event loop, the informer against the local API server), bodies split across writes
and chunked: never a 5xx and never "internal error", the server stays up, nothing is bound,
and well-formed requests are still answered correctly afterwards. Bounded to a few seconds."""

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fuzz_bodies import bodies, framings
from hypothesis import HealthCheck, given, settings
from scheduler_helpers import bind_args, create_nodes, dcu_pod, dcu_settings, filter_args
from split_http import send_split

from hami_dcu.cli.localcluster.servers import AppThread
from hami_dcu.common.io.kube import AsyncKube, Kube
from hami_dcu.common.protocol import keys
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.service import SchedulerService

FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
GOOD_POD = dcu_pod("p", uid="u-good")
# A bind for a pod that does not exist: a fuzzed variant must never bind a real pod.
GHOST_BIND = {"PodName": "ghost", "PodNamespace": "default", "PodUID": "u-ghost", "Node": "n1"}


@dataclass
class Extender:
    url: str
    kube: Kube


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as response:
            return response.status == 200
    except urllib.error.HTTPError:
        return False


@pytest.fixture
def extender(kube, api_server) -> Iterator[Extender]:
    create_nodes(kube, ["n1"])
    kube.create_pod("default", dcu_pod("p"))

    async def make_app():
        akube = AsyncKube(Kube.from_kubeconfig(str(api_server.kubeconfig_path)))
        return build_app(SchedulerService(akube, dcu_settings()))

    server = AppThread("extender-fuzz", make_app).start()
    deadline = time.monotonic() + 10
    while not ready(server.url):
        assert time.monotonic() < deadline, "extender cache never synced"
        time.sleep(0.05)
    yield Extender(server.url, kube)
    server.stop()


def post(extender: Extender, path: str, body: bytes, framing=None) -> dict:
    parts, chunked, pause = (framing.parts, framing.chunked, framing.pause) if framing else (2, True, 0.0)
    reply = send_split(extender.url, path, body, parts=parts, chunked=chunked, pause=pause)
    assert reply.status == 200, reply.body  # the extender protocol: errors travel in the body
    answer = reply.json()
    assert isinstance(answer, dict) and isinstance(answer["Error"], str)
    assert "internal error" not in answer["Error"], answer["Error"]
    return answer


def assert_filter_still_answered(extender: Extender) -> None:
    answer = post(extender, "/filter", json.dumps(filter_args(GOOD_POD, ["n1"])).encode())
    assert answer["Error"] == "" and answer["NodeNames"] == ["n1"]


@FUZZ
@given(body=bodies(filter_args(GOOD_POD, ["n1", "n2"])), framing=framings)
def test_fuzzed_filter_never_5xx_nor_internal_error(extender, body, framing):
    answer = post(extender, "/filter", body, framing)
    if answer["Error"]:
        assert not answer.get("NodeNames")
    assert_filter_still_answered(extender)


@FUZZ
@given(body=bodies(GHOST_BIND), framing=framings)
def test_fuzzed_bind_never_5xx_nor_internal_error_and_binds_nothing(extender, body, framing):
    post(extender, "/bind", body, framing)
    pod = extender.kube.get_pod("default", "p")
    assert not pod["spec"].get("nodeName") and keys.POD_NODE not in (pod["metadata"].get("annotations") or {})
    assert_filter_still_answered(extender)


def test_well_formed_bind_after_fuzzing_still_binds(extender):
    pod = extender.kube.get_pod("default", "p")
    post(extender, "/bind", b"[" * 5000 + b"]" * 5000)
    assert post(extender, "/bind", json.dumps(bind_args(pod, "n1")).encode()) == {"Error": ""}
    assert extender.kube.get_pod("default", "p")["spec"]["nodeName"] == "n1"

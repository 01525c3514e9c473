"""Each component's requests name it: kube-apiserver takes a request's field manager from its
User-Agent up to the first '/', and audit logs record the User-Agent. With the client's default
("OpenAPI-Generator/...") every hami-dcu write looked alike in `managedFields` and in the audit
log; now they read hami-dcu-scheduler, hami-dcu-device-plugin, and so on."""

import asyncio
import threading

import pytest
import yaml
from aiohttp import web

from hami_dcu.common.io.kube import Kube, user_agent


@pytest.fixture
def recorder(tmp_path):
    """A stand-in API server on a thread that records each request's User-Agent; a kubeconfig for it."""
    seen: list[str] = []
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder = {}

    async def answer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("User-Agent", ""))
        return web.json_response({"kind": "APIVersions", "versions": ["v1"]})

    def serve() -> None:
        asyncio.set_event_loop(loop)
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", answer)
        runner = web.AppRunner(app, access_log=None)  # no log line from this thread after pytest closed its stream
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        holder["port"] = runner.addresses[0][1]
        holder["runner"] = runner
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{holder['port']}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    yield str(config), seen
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def test_a_component_names_itself_in_every_request(recorder):
    config, seen = recorder
    Kube.from_kubeconfig(config, agent=user_agent("device-plugin")).request("GET", "/api")
    (agent,) = seen
    manager, _, version = agent.partition("/")
    assert manager == "hami-dcu-device-plugin"
    assert version and " " not in version


def test_without_a_name_the_client_default_is_kept(recorder):
    config, seen = recorder
    Kube.from_kubeconfig(config).request("GET", "/api")
    assert seen[0].startswith("OpenAPI-Generator/")


@pytest.mark.parametrize("bad", ["", "Device Plugin", "a/b"])
def test_a_component_name_that_would_not_be_a_field_manager_is_refused(bad):
    with pytest.raises(ValueError):
        user_agent(bad)

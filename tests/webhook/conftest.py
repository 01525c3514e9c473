"""A webhook served over HTTPS with a certificate from the `certs` code path."""

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from hami_dcu.common.io.tls import ReloadingTLS
from hami_dcu.common.protocol import keys
from hami_dcu.webhook.certs import CertBundle, issue
from hami_dcu.webhook.decision import Settings
from hami_dcu.webhook.server import build_app


@dataclass
class ServedWebhook:
    url: str
    bundle: CertBundle
    ca_file: Path
    tls: ReloadingTLS
    loop: asyncio.AbstractEventLoop


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served_webhook(tmp_path) -> Iterator[ServedWebhook]:
    bundle = issue(["localhost"], ip_addresses=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(bundle.cert)
    (tmp_path / "tls.key").write_bytes(bundle.key)
    (tmp_path / "ca.crt").write_bytes(bundle.ca_cert)
    tls = ReloadingTLS(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    port = free_port()
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(build_app(Settings(naming=keys.DCU_NAMING)), access_log=None)
    started = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port, ssl_context=tls.context).start())
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert started.wait(10)
    yield ServedWebhook(f"https://127.0.0.1:{port}", bundle, tmp_path / "ca.crt", tls, loop)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)

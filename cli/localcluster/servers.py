"""Run an aiohttp application on loopback from a private event-loop thread.

The local cluster runs each component in its own thread with its own loop, so they only
meet over sockets, as they would in a cluster.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from aiohttp import web

T = TypeVar("T")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class AppThread:
    """`make_app` is called on the thread's loop (apps often create tasks or sessions)."""

    def __init__(self, name: str, make_app: Callable[[], Awaitable[web.Application] | web.Application],
                 port: int | None = None, ssl_context: ssl.SSLContext | None = None, host: str = "127.0.0.1") -> None:
        self.name = name
        self._make_app = make_app
        self.host = host
        self.port = port or free_port(host)
        self._ssl = ssl_context
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self._ssl else 'http'}://{self.host}:{self.port}"

    def start(self) -> AppThread:
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self.loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # handed to start()
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(30):
            raise RuntimeError(f"{self.name} did not start within 30 s")
        if failure:
            raise failure[0]
        return self

    async def _serve(self) -> None:
        app = self._make_app()
        if asyncio.iscoroutine(app) or isinstance(app, Awaitable):
            app = await app
        assert isinstance(app, web.Application)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.host, self.port, ssl_context=self._ssl).start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self.loop is None or self._thread is None or not self._thread.is_alive():
            return
        if self._runner is not None:
            try:
                self.call(self._runner.cleanup(), timeout=10)
            except Exception:  # stopping anyway
                pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

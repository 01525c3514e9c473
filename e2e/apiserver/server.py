"""`LocalApiServer`: the in-process API server on loopback, with a kubeconfig for it."""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from hami_dcu.e2e.apiserver.app import AdmissionHook, ApiApp
from hami_dcu.e2e.apiserver.faults import Faults
from hami_dcu.e2e.apiserver.store import Store

T = TypeVar("T")
TOKEN = "local-cluster-token"


class LocalApiServer:
    """Serves the REST subset on 127.0.0.1 from a private event loop thread, so blocking
    clients (the `kubernetes` client, tests) and asyncio code can both use it.

        with LocalApiServer() as server:
            Kube.from_kubeconfig(str(server.kubeconfig_path)).list_nodes()
    """

    def __init__(self, kubeconfig_path: str | Path | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.store = Store()
        self.faults = Faults()
        self._api = ApiApp(self.store, self.faults)
        self._host = host
        self._port = port
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if kubeconfig_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="hami-apiserver-")
            kubeconfig_path = Path(self._tmp.name) / "kubeconfig"
        self.kubeconfig_path = Path(kubeconfig_path)
        self.url = ""
        # Coroutine functions run on the server loop before it stops (close client sessions).
        self.shutdown_hooks: list[Callable[[], Awaitable[None]]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        for name in ("default", "kube-system"):
            self.store.create("namespaces", "", {"metadata": {"name": name,
                                                              "labels": {"kubernetes.io/metadata.name": name}}})

    @property
    def admission(self) -> AdmissionHook | None:
        return self._api.admission

    @admission.setter
    def admission(self, hook: AdmissionHook | None) -> None:
        """Called for every pod CREATE before it is stored (see app.AdmissionHook)."""
        self._api.admission = hook

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._loop is not None, "server not started"
        return self._loop

    def start(self) -> LocalApiServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start_site())
            except BaseException as exc:  # reported to the starting thread
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            # Let open watch handlers see their cancellation before the loop goes away.
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=run, name="local-apiserver", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            raise errors[0]
        self._write_kubeconfig()
        return self

    async def _start_site(self) -> None:
        self._runner = web.AppRunner(self._api.app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://{self._host}:{port}"

    async def _stop_site(self) -> None:
        for hook in self.shutdown_hooks:
            await hook()
        if self._runner is not None:
            await self._runner.cleanup()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the server's loop from another thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._stop_site(), self._loop).result(10)
            finally:
                self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if self._tmp is not None:
            self._tmp.cleanup()

    def compact(self) -> None:
        """Drop the watch history: watches from older resourceVersions then get 410."""
        self.store.compact()

    def __enter__(self) -> LocalApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "local",
            "clusters": [{"name": "local", "cluster": {"server": self.url}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "local"}}],
            "users": [{"name": "local", "user": {"token": TOKEN}}],
        }
        self.kubeconfig_path.parent.mkdir(parents=True, exist_ok=True)
        self.kubeconfig_path.write_text(yaml.safe_dump(config))

"""`LocalApiServer`: the in-process API server on loopback, with a kubeconfig for it."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from hami_dcu.e2e.apiserver.app import AdmissionHook, ApiApp
from hami_dcu.e2e.apiserver.faults import Faults
from hami_dcu.e2e.apiserver.store import Store
from hami_dcu.e2e.servers import AppThread

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
        self._thread: AppThread | None = None
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
        assert self._thread is not None and self._thread.loop is not None, "server not started"
        return self._thread.loop

    def start(self) -> LocalApiServer:
        app = self._api.app

        async def run_shutdown_hooks(_app: web.Application) -> None:
            for hook in self.shutdown_hooks:
                await hook()

        app.on_cleanup.append(run_shutdown_hooks)
        self._thread = AppThread("local-apiserver", lambda: app, port=self._port or None, host=self._host).start()
        self.url = self._thread.url
        self._write_kubeconfig()
        return self

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the server's loop from another thread."""
        assert self._thread is not None, "server not started"
        return self._thread.call(coro, timeout)

    def stop(self) -> None:
        if self._thread is not None:
            self._thread.stop()
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

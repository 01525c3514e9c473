"""`LocalApiServer`: the in-process API server on loopback, with a kubeconfig for it."""

from __future__ import annotations

import asyncio
import re
import secrets
import tempfile
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import yaml
from aiohttp import web

from hami_dcu.cli.localcluster.apiserver.app import ApiApp
from hami_dcu.cli.localcluster.apiserver.faults import Faults
from hami_dcu.cli.localcluster.apiserver.hooks import AdmissionHook
from hami_dcu.cli.localcluster.apiserver.store import Store
from hami_dcu.cli.localcluster.servers import AppThread

T = TypeVar("T")
TOKEN = "local-cluster-token"
INITIAL_NAMESPACES = ("default", "kube-system")


class LocalApiServer:
    """Serves the REST subset on 127.0.0.1 (plain HTTP, a free port unless `port` is given)
    from a private event-loop thread, so blocking clients (the `kubernetes` client, tests)
    and asyncio code can both use it.

        with LocalApiServer() as server:                  # or: async with LocalApiServer() as server:
            Kube.from_kubeconfig(str(server.kubeconfig_path)).list_nodes()
            server.store.get("namespaces", "", "default")  # in-process, no HTTP

    The kubeconfig goes to `kubeconfig_path`, or into a temporary directory removed on stop.
    The bearer token it carries is not checked: it is the cluster's administrator.
    `credentials(username, extra)` writes a kubeconfig whose token authenticates as someone
    else, as admission sees them (a component's ServiceAccount, a tenant).
    """

    def __init__(self, kubeconfig_path: str | Path | None = None, host: str = "127.0.0.1", port: int = 0,
                 history: int = 10000, graceful_pod_deletion: bool = False) -> None:
        self.store = Store(history=history)
        self.faults = Faults()
        self._api = ApiApp(self.store, self.faults)
        # As kube-apiserver: a bound pod with a grace period is only marked for deletion, and
        # its kubelet removes it. Off for clusters without kubelets (pods would never go).
        self._api.graceful_pod_deletion = graceful_pod_deletion
        self._host = host
        self._port = port
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if kubeconfig_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="hami-apiserver-")
            kubeconfig_path = Path(self._tmp.name) / "kubeconfig"
        self.kubeconfig_path = Path(kubeconfig_path)
        self.token = TOKEN
        self.url = ""
        # Coroutine functions run on the server loop before it stops (close client sessions).
        self.shutdown_hooks: list[Callable[[], Awaitable[None]]] = []
        self._thread: AppThread | None = None
        for name in INITIAL_NAMESPACES:
            self.store.create("namespaces", "", {
                "metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})

    # --- hooks -----------------------------------------------------------------------------

    @property
    def admission(self) -> AdmissionHook | None:
        """Awaited for every pod CREATE, UPDATE and Binding before it is written (see hooks.py);
        None = admit all."""
        return self._api.admission

    @admission.setter
    def admission(self, hook: AdmissionHook | None) -> None:
        self._api.admission = hook

    @property
    def bookmark_interval(self) -> float | None:
        """Seconds between BOOKMARK events on watches with allowWatchBookmarks; None = none."""
        return self._api.bookmark_interval

    @bookmark_interval.setter
    def bookmark_interval(self, seconds: float | None) -> None:
        self._api.bookmark_interval = seconds

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        assert self._thread is not None and self._thread.loop is not None, "server not started"
        return self._thread.loop

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalApiServer:
        """Serve from a daemon thread and write the kubeconfig; returns self."""
        app = self._api.app

        async def run_shutdown_hooks(_app: web.Application) -> None:
            for hook in self.shutdown_hooks:
                await hook()

        app.on_cleanup.append(run_shutdown_hooks)
        self._thread = AppThread("local-apiserver", lambda: app, port=self._port or None, host=self._host).start()
        self.url = self._thread.url
        self._write_kubeconfig()
        return self

    def stop(self) -> None:
        """Close open watches, run the shutdown hooks, stop the thread; idempotent."""
        if self._thread is not None:
            self._thread.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def start_async(self) -> LocalApiServer:
        """start() for asyncio code: the blocking part runs in a worker thread."""
        return await asyncio.to_thread(self.start)

    async def stop_async(self) -> None:
        await asyncio.to_thread(self.stop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run a coroutine on the server's loop from another thread and return its result."""
        assert self._thread is not None, "server not started"
        return self._thread.call(coro, timeout)

    def compact(self) -> None:
        """Drop the watch history: watches from older resourceVersions then get 410."""
        self.store.compact()

    def __enter__(self) -> LocalApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> LocalApiServer:
        return await self.start_async()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_async()

    def credentials(self, username: str, extra: dict[str, list[str]] | None = None,
                    groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig (beside the cluster's own) whose bearer token is `username`, with the
        userInfo extra a bound ServiceAccount token carries (e.g. the node its pod runs on)."""
        assert self.url, "server not started"
        token = f"{TOKEN}-{secrets.token_hex(8)}"
        self._api.users[token] = {"username": username, "groups": [*groups, "system:authenticated"],
                                  "extra": dict(extra or {})}
        path = self.kubeconfig_path.parent / f"kubeconfig-{re.sub(r'[^A-Za-z0-9.-]+', '-', username)}-{token[-6:]}"
        self._write_kubeconfig(path, token)
        return path

    def _write_kubeconfig(self, path: Path | None = None, token: str | None = None) -> None:
        path = path or self.kubeconfig_path
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "local",
            "clusters": [{"name": "local", "cluster": {"server": self.url}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "local", "namespace": "default"}}],
            "users": [{"name": "local", "user": {"token": token or self.token}}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))

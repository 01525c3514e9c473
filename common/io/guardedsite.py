"""An aiohttp site that enforces common/io/connlimits.py: our own accept loop (so a connection is
counted from the moment it is accepted, its TLS handshake included, which asyncio's server
hides from the protocol), a deadline per phase of a connection, and a middleware that tells
the book when a request is being served.

    runner = web.AppRunner(app, **runner_options(limits))   # after guard_app(app)
    await runner.setup()
    await GuardedSite(runner, host, port, limits, ssl_context=ctx).start()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.web_runner import BaseRunner, BaseSite

from hami_dcu.common.io import gcpolicy
from hami_dcu.common.io.connlimits import DEFAULT_LIMITS, ConnectionBook, ConnectionLimits, Moves, Slot

log = logging.getLogger(__name__)
GUARDS = web.AppKey("connection_guards", dict)  # transport -> GuardedConnection, for the middleware
# Why this side closed a connection (the `reason` of hami_dcu_http_connections_closed_total):
# every close of ours that a client could see as "connection reset by peer" is one of these,
# so a client's reset that none of them counts did not come from this process.
CLOSED_HEADER_TIMEOUT = "header_timeout"  # no complete request headers in time
CLOSED_IDLE = "idle_timeout"  # kept alive and idle past the idle deadline
CLOSED_PUSHED_OUT = "pushed_out"  # a newer connection took its place while it waited for a request
CLOSED_REFUSED = "refused"  # parked, never served: waited too long for a place, or too many parked
CLOSED_TLS_HANDSHAKE = "tls_handshake"  # the handshake failed or timed out
CLOSE_REASONS = (CLOSED_HEADER_TIMEOUT, CLOSED_IDLE, CLOSED_PUSHED_OUT, CLOSED_REFUSED, CLOSED_TLS_HANDSHAKE)
# A refused or timed-out client is named at most this often (a flood must not flood the log).
WARN_EVERY = 10.0
ACCEPT_BATCH = 256  # connections taken off the kernel's queue per readiness event
# Dropped connections' memory is collected at most this often (common/io/gcpolicy.release_garbage).
COLLECT_EVERY = 1.0


class GuardedConnection(asyncio.Protocol):
    """Stands between the transport and aiohttp's protocol: forwards everything, and closes
    the connection when the phase it is in outlasts its deadline."""

    def __init__(self, site: GuardedSite, slot: Slot, inner: asyncio.Protocol) -> None:
        self.site = site
        self.slot = slot
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.handshake: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._waiting_since_data = False  # kept alive and idle: the next byte starts a header deadline
        self._forwarded = False  # aiohttp's protocol saw connection_made (so it may see connection_lost)

    # --- the phases -----------------------------------------------------------------------

    def _arm(self, seconds: float, phase: str, reason: str = CLOSED_HEADER_TIMEOUT) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expire, phase, reason)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self, phase: str, reason: str) -> None:
        self._timer = None
        self.site.note_dropped(self.slot.client, f"no complete request {phase}", reason)
        self.abort()

    def request_started(self) -> None:
        self._disarm()
        self.site.book.started(self.slot)

    def request_finished(self) -> None:
        self.site.book.finished(self.slot, time.monotonic())
        if self.transport is not None and not self.transport.is_closing():
            self._waiting_since_data = True
            self._arm(self.site.limits.idle_timeout, f"within {self.site.limits.idle_timeout:g} s of idling",
                      CLOSED_IDLE)

    def abort(self) -> None:
        """Close now (pushed out, or a deadline passed): no goodbye owed to such a client.
        Its place is given away when the transport reports the connection lost."""
        self._disarm()
        if self.transport is not None:
            self.transport.abort()
        elif self.handshake is not None:
            self.handshake.cancel()  # connect_accepted_socket closes the socket

    # --- asyncio.Protocol -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.slot.closed:  # pushed out while its handshake finished
            transport.abort()
            return
        self.site.by_transport[transport] = self
        self._arm(self.site.limits.header_timeout, f"headers within {self.site.limits.header_timeout:g} s")
        self._forwarded = True
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self._waiting_since_data:
            self._waiting_since_data = False
            self._arm(self.site.limits.header_timeout, f"headers within {self.site.limits.header_timeout:g} s")
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self.site.forget(self)
        if self._forwarded:
            self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def guard_app(app: web.Application) -> None:
    """Let the site see each request start and end (before the runner freezes `app`)."""
    if GUARDS in app:
        return
    guards: dict[asyncio.BaseTransport, GuardedConnection] = {}
    app[GUARDS] = guards

    @web.middleware
    async def mark_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
        connection = guards.get(request.transport) if request.transport is not None else None
        if connection is None:
            return await handler(request)
        connection.request_started()
        try:
            return await handler(request)
        finally:
            connection.request_finished()

    app.middlewares.insert(0, mark_requests)


class GuardedSite(BaseSite):
    """A TCP site under `limits`. The app must have been passed to `guard_app`."""

    def __init__(self, runner: BaseRunner, host: str, port: int, limits: ConnectionLimits = DEFAULT_LIMITS, *,
                 ssl_context: ssl.SSLContext | None = None, backlog: int = 512,
                 on_close: Callable[[str], None] | None = None) -> None:
        super().__init__(runner, ssl_context=ssl_context, backlog=backlog)
        app = getattr(runner, "app", None)
        if app is None or GUARDS not in app:
            raise ValueError("GuardedSite serves an app passed to guard_app() first")
        self._host = host
        self._port = port
        self.limits = limits
        self.book: ConnectionBook[socket.socket] = ConnectionBook(limits)
        self.by_transport: dict[asyncio.BaseTransport, GuardedConnection] = app[GUARDS]
        self.connections: dict[Slot, GuardedConnection] = {}
        self._listener: socket.socket | None = None
        self._last_warning = 0.0
        self.bound_port = port
        self.refused = 0  # sockets closed without being served: parked too long, or too many parked
        self.dropped = 0  # connections closed for a deadline or pushed out by a newer one
        self._on_close = on_close  # told the reason (CLOSE_REASONS) of every close of ours
        self._collection: asyncio.TimerHandle | None = None
        self._tick: asyncio.TimerHandle | None = None

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self.bound_port}"

    async def start(self) -> None:
        await super().start()
        family, kind, proto, _, address = socket.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        listener = socket.socket(family, kind, proto)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(address)
            listener.listen(self._backlog)
            listener.setblocking(False)
        except OSError as exc:
            listener.close()
            # Worded as asyncio words it (cli/errors.py reads the address out of it).
            raise OSError(exc.errno, f"error while attempting to bind on address {address!r}: "
                                     f"{(exc.strerror or str(exc)).lower()}") from None
        self._listener = listener
        self.bound_port = listener.getsockname()[1]
        asyncio.get_running_loop().add_reader(listener.fileno(), self._on_readable)

    async def stop(self) -> None:
        for timer in (self._collection, self._tick):
            if timer is not None:
                timer.cancel()
        if self._listener is not None:
            asyncio.get_running_loop().remove_reader(self._listener.fileno())
            self._listener.close()
            self._listener = None
        for sock in self.book.drain():
            sock.close()
        self._runner._unreg_site(self)

    def _on_readable(self) -> None:
        """Take every waiting connection off the kernel's queue at once (up to ACCEPT_BATCH): a
        real client's connection must not wait behind a flood's for one accept per turn of
        the loop; once parked here, the book serves it first."""
        assert self._listener is not None
        now = time.monotonic()
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:  # out of file descriptors, most likely: pause a moment
                self._pause_accepting(exc)
                break
            sock.setblocking(False)
            self._apply(self.book.arrive(str(address[0]), sock, now))

    def _pause_accepting(self, exc: OSError) -> None:
        log.warning("%s: cannot accept a connection: %s", self.name, exc)
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        loop.remove_reader(self._listener.fileno())
        listener = self._listener

        def resume() -> None:
            if self._listener is listener:
                loop.add_reader(listener.fileno(), self._on_readable)

        loop.call_later(0.1, resume)

    def _apply(self, moves: Moves[socket.socket]) -> None:
        for sock in moves.close:
            sock.close()
            self.refused += 1
            self._count(CLOSED_REFUSED)
            self._warn(f"{self.name}: closed a parked connection: it waited {self.limits.header_timeout:g} s "
                       f"for one of {self.limits.max_connections} places ({self.limits.max_per_client} per client), "
                       "or too many were parked")
        for victim in moves.evict:
            connection = self.connections.get(victim)
            if connection is not None:
                connection.abort()
            self.note_dropped(victim.client, "pushed out by a newer connection while waiting for a request",
                              CLOSED_PUSHED_OUT)
        for sock, slot in moves.start:
            self._start(sock, slot)
        self._schedule_tick()

    def _schedule_tick(self) -> None:
        when = self.book.next_tick(time.monotonic())
        if self._tick is not None:
            self._tick.cancel()
            self._tick = None
        if when is not None:
            loop = asyncio.get_running_loop()
            self._tick = loop.call_later(max(0.0, when - time.monotonic()) + 0.001, self._on_tick)

    def _on_tick(self) -> None:
        self._tick = None
        self._apply(self.book.tick(time.monotonic()))

    def _start(self, sock: socket.socket, slot: Slot) -> None:
        server = self._runner.server
        assert server is not None
        connection = GuardedConnection(self, slot, server())
        self.connections[slot] = connection
        handshake = asyncio.ensure_future(asyncio.get_running_loop().connect_accepted_socket(
            lambda: connection, sock, ssl=self._ssl_context,
            ssl_handshake_timeout=self.limits.tls_handshake_timeout if self._ssl_context else None))
        connection.handshake = handshake
        handshake.add_done_callback(lambda task: self._handshake_done(task, connection))

    def _handshake_done(self, task: asyncio.Future[Any], connection: GuardedConnection) -> None:
        connection.handshake = None
        if task.cancelled() or task.exception() is not None:
            # Never connected: a handshake that failed, timed out or was pushed out.
            if not task.cancelled():
                self.note_dropped(connection.slot.client, f"TLS handshake failed: {task.exception()}",
                                  CLOSED_TLS_HANDSHAKE)
            self.forget(connection)

    def forget(self, connection: GuardedConnection) -> None:
        """The connection is gone: out of every map, its place to the next parked socket."""
        self.connections.pop(connection.slot, None)
        if connection.transport is not None:
            self.by_transport.pop(connection.transport, None)
        self._apply(self.book.release(connection.slot, time.monotonic()))

    def note_dropped(self, client: str, why: str, reason: str) -> None:
        self.dropped += 1
        self._count(reason)
        self._warn(f"{self.name}: closed a connection from {client}: {why}")
        # Only TLS connections leave garbage worth a full collection (their 256 KiB buffers in
        # reference cycles). A plain listener (the extender's loopback, whose connections
        # kube-scheduler opens and drops all through a burst) would pay a full collection a
        # second for nothing: 5 % of the extender's CPU in a 1,000-node burst.
        if self._collection is None and self._ssl_context is not None:
            self._collection = asyncio.get_running_loop().call_later(COLLECT_EVERY, self._collect)

    def _count(self, reason: str) -> None:
        if self._on_close is not None:
            self._on_close(reason)

    def _collect(self) -> None:
        self._collection = None
        gcpolicy.release_garbage()

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= WARN_EVERY:
            self._last_warning = now
            log.warning("%s (further such lines are held back for %g s)", message, WARN_EVERY)


def runner_options(limits: ConnectionLimits) -> dict[str, Any]:
    """aiohttp's own settings under a GuardedSite. Its keep-alive timeout must outlast our
    idle deadline (connlimits.IDLE_TIMEOUT, above the 90 s after which Go's clients close
    theirs, so that the client ends an idle connection and no request races a close of
    ours): aiohttp's default has changed across releases (75 s in older ones), so it is set."""
    return {"access_log": None, "keepalive_timeout": limits.idle_timeout + 30.0}


async def serve_guarded(app: web.Application, host: str, port: int, limits: ConnectionLimits = DEFAULT_LIMITS,
                        ssl_context: ssl.SSLContext | None = None,
                        on_close: Callable[[str], None] | None = None) -> tuple[web.AppRunner, GuardedSite]:
    """Start serving `app` on host:port under `limits`; cleaning up the runner stops it.
    `on_close` is told why (CLOSE_REASONS) each time this side closes a connection."""
    guard_app(app)
    runner = web.AppRunner(app, **runner_options(limits))
    await runner.setup()
    site = GuardedSite(runner, host, port, limits, ssl_context=ssl_context, on_close=on_close)
    try:
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, site


class ThreadedServer:
    """`app` served under `limits` by an event loop of its own in a daemon thread: for a
    process whose main work is not asyncio (the device plugin's gRPC server)."""

    def __init__(self, app: web.Application, host: str, port: int, limits: ConnectionLimits = DEFAULT_LIMITS) -> None:
        self.loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        started: concurrent.futures.Future[int] = concurrent.futures.Future()

        async def start() -> int:
            self._runner, site = await serve_guarded(app, host, port, limits)
            return site.bound_port

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            try:
                started.set_result(self.loop.run_until_complete(start()))
            except BaseException as exc:  # a port in use: said in the caller's thread
                started.set_exception(exc)
                return
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, name=f"http {host}:{port}", daemon=True)
        self.thread.start()
        self.server_port = started.result()

    def shutdown(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def server_close(self) -> None:
        """Nothing left to do after shutdown (the name a socketserver caller expects)."""

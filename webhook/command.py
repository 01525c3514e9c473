"""`hami-dcu webhook`: serve the admission webhook over TLS."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Callable, Sequence

from aiohttp import web
from prometheus_client import CollectorRegistry

from hami_dcu.common.io import gcpolicy
from hami_dcu.common.io.cannotstart import CannotStart
from hami_dcu.common.io.certmetrics import CertificateExpiry
from hami_dcu.common.io.connlimits import ConnectionLimits, add_connection_arguments, connection_limits_from
from hami_dcu.common.io.connmetrics import ClosedConnections
from hami_dcu.common.io.guardedsite import serve_guarded
from hami_dcu.common.io.tls import ReloadingTLS, add_client_auth_arguments
from hami_dcu.common.io.writer_flags import add_identity_arguments, identities_from
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.writers import Identities
from hami_dcu.webhook.callers import ApiServerAddresses, ClientAuth
from hami_dcu.webhook.decision import Settings
from hami_dcu.webhook.server import build_app

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bind", default="0.0.0.0:9443", help="address:port to serve on (default %(default)s)")
    parser.add_argument("--tls-cert", required=True, help="serving certificate (PEM); reloaded when it changes")
    parser.add_argument("--tls-key", required=True, help="serving key (PEM); reloaded when it changes")
    add_client_auth_arguments(parser)
    add_settings_arguments(parser)
    add_connection_arguments(parser)


def client_auth_from(args: argparse.Namespace) -> ClientAuth | None:
    """The webhook's client authentication, None without --client-ca. Raises ValueError."""
    names = frozenset(args.client_name or ())
    if args.client_ca is None:
        if names:
            raise ValueError("--client-name needs --client-ca")
        return None
    return ClientAuth(names)


def api_server_from(args: argparse.Namespace) -> ApiServerAddresses | None:
    """The API server's addresses (--api-server-cidr), None when none is given. Raises ValueError."""
    cidrs = [c for value in args.api_server_cidr or () for c in value.split(",") if c.strip()]
    return ApiServerAddresses.parse(cidrs) if cidrs else None


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared with `hami-dcu scheduler --serve-webhook`."""
    parser.add_argument("--scheduler-name", default=keys.DEFAULT_SCHEDULER_NAME,
                        help="schedulerName given to DCU pods (default %(default)s)")
    parser.add_argument("--overwrite-scheduler", action="append", default=None, metavar="NAME",
                        help="schedulerName values that may be replaced (repeatable; default: default-scheduler)")
    parser.add_argument("--volcano-scheduler-name", default="",
                        help="Volcano mode (off when empty): pods with this schedulerName keep it (Volcano's Hygon "
                             "deviceshare places them); the deny rules still apply and hcumem must be MiB")
    parser.add_argument("--resource-count", help="count resource name (default: the naming set's)")
    parser.add_argument("--resource-memory", help="memory (MiB) resource name (default: the naming set's)")
    parser.add_argument("--resource-cores", help="cores (%%) resource name (default: the naming set's)")
    add_identity_arguments(parser)


def settings_from(args: argparse.Namespace) -> Settings:
    """`hami-dcu webhook`'s flags as the webhook's settings."""
    return webhook_settings(
        naming=keys.naming_by_name(args.naming), scheduler_name=args.scheduler_name,
        identities=identities_from(args), volcano_scheduler=args.volcano_scheduler_name,
        overwrite_scheduler=args.overwrite_scheduler, resource_count=args.resource_count,
        resource_memory=args.resource_memory, resource_cores=args.resource_cores)


def webhook_settings(*, naming: keys.Naming, scheduler_name: str, identities: Identities, volcano_scheduler: str,
                     overwrite_scheduler: Sequence[str] | None = None, resource_count: str | None = None,
                     resource_memory: str | None = None, resource_cores: str | None = None) -> Settings:
    """The webhook's settings from the values its flags give (None: the flag's default), for
    `hami-dcu webhook` and for the extender's process serving the webhook with its own values."""
    return Settings(
        scheduler_name=scheduler_name,
        overwritable_schedulers=tuple(overwrite_scheduler or [keys.KUBE_DEFAULT_SCHEDULER]),
        naming=naming,
        resource_names=keys.ResourceNames(resource_count or naming.resources.count,
                                          resource_memory or naming.resources.memory,
                                          resource_cores or naming.resources.cores),
        identities=identities,
        volcano_scheduler=volcano_scheduler,
    )


def split_bind(bind: str) -> tuple[str, int]:
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit(f"--bind {bind!r}: expected ADDRESS:PORT")
    return host, int(port)


def run(args: argparse.Namespace) -> int:
    host, port = split_bind(args.bind)
    try:
        client_auth = client_auth_from(args)
        api_server = api_server_from(args)
    except ValueError as exc:
        raise CannotStart(str(exc)) from exc
    try:
        tls = ReloadingTLS(args.tls_cert, args.tls_key, args.client_ca)
    except (OSError, ValueError) as exc:
        # What startup_problems did not catch (a file replaced since): still one line.
        raise CannotStart(f"cannot load TLS certificate {args.tls_cert} / key {args.tls_key}"
                          f"{f' / client CA {args.client_ca}' if args.client_ca else ''}: {exc}") from exc
    limits = connection_limits_from(args)
    registry = CollectorRegistry()
    registry.register(CertificateExpiry({"serving": args.tls_cert}))  # renewal that stopped shows on /metrics
    app = build_app(settings_from(args), registry, body_deadline=limits.body_timeout, client_auth=client_auth,
                    api_server=api_server)
    # What is loaded now lives as long as the process: out of the collector's sight, so no
    # full collection ever walks it in the middle of reviews (common/io/gcpolicy.py).
    gcpolicy.tune()
    gcpolicy.settle("startup")

    async def start_reloader(app: web.Application) -> None:
        app["tls_reloader"] = asyncio.create_task(tls.watch())

    app.on_startup.append(start_reloader)
    closed = ClosedConnections(registry).recorder("webhook")
    asyncio.run(_serve(app, host, port, tls, limits, closed))
    return 0


async def _serve(app: web.Application, host: str, port: int, tls: ReloadingTLS, limits: ConnectionLimits,
                 on_close: Callable[[str], None]) -> None:
    """Serve until SIGTERM or SIGINT (exit 0, as a stopped server should)."""
    runner, _site = await serve_guarded(app, host, port, limits, tls.context, on_close)
    # Said once the port is bound: a port in use must not be preceded by a line saying it is served.
    log.info("webhook serving on https://%s:%d/webhook (headers within %g s, at most %d connections, %d per client)",
             host, port, limits.header_timeout, limits.max_connections, limits.max_per_client)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    try:
        await stopped.wait()
    finally:
        await runner.cleanup()

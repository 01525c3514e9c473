"""`hami-dcu scheduler`: the kube-scheduler extender server (DESIGN.md, public interface)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import ssl
import sys
from datetime import timedelta

from aiohttp import web

from hami_dcu.common import keys
from hami_dcu.common.kube import AsyncKube, Kube, KubeConfigError
from hami_dcu.common.tls import ReloadingTLS
from hami_dcu.scheduler import policy
from hami_dcu.scheduler.app import build_app
from hami_dcu.scheduler.bind import BindSettings
from hami_dcu.scheduler.filtering import FilterSettings
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bind", default="0.0.0.0:8443", help="host:port to serve on")
    parser.add_argument("--tls-cert", help="serving certificate (PEM); plain HTTP without it")
    parser.add_argument("--tls-key", help="serving key (PEM)")
    parser.add_argument("--scheduler-name", default=keys.DEFAULT_SCHEDULER_NAME)
    parser.add_argument("--node-policy", choices=policy.POLICIES, default=policy.DEFAULT_NODE_POLICY)
    parser.add_argument("--device-policy", choices=policy.POLICIES, default=policy.DEFAULT_CARD_POLICY)
    parser.add_argument("--lock-timeout", type=float, default=300, help="seconds after which a node lock expires")
    parser.add_argument("--lock-wait", type=float, default=20,
                        help="seconds /bind waits for a locked node (keep below the extender httpTimeout)")
    parser.add_argument("--resync", type=float, default=300, help="seconds between full relists")
    parser.add_argument("--serve-webhook", action="store_true", help="also serve POST /webhook on this port")


def settings_from(args: argparse.Namespace) -> ServiceSettings:
    return ServiceSettings(
        filter=FilterSettings(node_policy=args.node_policy, card_policy=args.device_policy),
        bind=BindSettings(lock_timeout=timedelta(seconds=args.lock_timeout), lock_wait=args.lock_wait),
        resync=args.resync,
    )


def _tls(args: argparse.Namespace) -> ReloadingTLS | None:
    """TLS that follows the certificate files (the Secret behind them is rotated by `certs`)."""
    if not args.tls_cert and not args.tls_key:
        return None
    if not (args.tls_cert and args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    return ReloadingTLS(args.tls_cert, args.tls_key)


def _mount_webhook(app: web.Application, args: argparse.Namespace, service: SchedulerService) -> None:
    """Serve the webhook's POST /webhook on this port too (one Service, as HAMi does).
    Imported only here, so the scheduler runs even in a build without the webhook."""
    try:
        from hami_dcu.webhook.command import settings_from as webhook_settings
        from hami_dcu.webhook.server import add_webhook_routes
    except ImportError as exc:
        raise ValueError(f"--serve-webhook: the webhook is not available in this build ({exc})") from exc
    defaults = argparse.Namespace(
        scheduler_name=args.scheduler_name, overwrite_scheduler=None, resource_count=keys.DEFAULT_COUNT_RESOURCE,
        resource_memory=keys.DEFAULT_MEMORY_RESOURCE, resource_cores=keys.DEFAULT_CORES_RESOURCE)
    add_webhook_routes(app, webhook_settings(defaults), service.metrics.registry)


async def serve(args: argparse.Namespace) -> None:
    host, _, port = args.bind.rpartition(":")
    kube = AsyncKube(Kube.from_kubeconfig(args.kubeconfig))
    service = SchedulerService(kube, settings_from(args))
    app = build_app(service)
    if args.serve_webhook:
        _mount_webhook(app, args, service)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    tls = _tls(args)
    site = web.TCPSite(runner, host or "0.0.0.0", int(port), ssl_context=tls.context if tls else None)
    await site.start()
    reloader = asyncio.ensure_future(tls.watch()) if tls else None
    log.info("scheduler extender %s serving on %s (%s), node policy %s, device policy %s", args.scheduler_name,
             args.bind, "TLS" if args.tls_cert else "plain HTTP", args.node_policy, args.device_policy)
    try:
        await asyncio.Event().wait()
    finally:
        if reloader is not None:
            reloader.cancel()
        await runner.cleanup()
        kube.close()


def run(args: argparse.Namespace) -> int:
    try:
        asyncio.run(serve(args))
    except (KubeConfigError, ValueError, OSError, ssl.SSLError) as exc:
        print(f"hami-dcu scheduler: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0

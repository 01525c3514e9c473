"""`hami-dcu scheduler`: the kube-scheduler extender server (docs/architecture.md, Components).

Three listeners, one per audience:
* `--bind` (default loopback): /filter and /bind, for kube-scheduler, its neighbour container
  in the chart's pod; nothing else in the cluster can reach them there (issue 11, finding 6);
* `--webhook-bind`: POST /webhook for the API server (TLS), with /healthz and /readyz for
  the kubelet's probes; the chart's Service points here and nowhere else;
* `--metrics-bind`: GET /metrics for Prometheus, with the probes (plain HTTP).
Without `--metrics-bind`, /metrics is served on `--bind`; `--serve-webhook` (HAMi's layout)
serves /webhook on `--bind` too.

`--bind` has connection caps of its own (`--scheduler-max-connections`): its one client is
kube-scheduler, and each pod whose bind waits for its node (HAMi's node lock) holds one of its
connections until the bind ends. Under the caps every other port has (48 from one client), a
burst stalled there: kube-scheduler's next /filter waited for a free connection, so pods were
placed only as fast as 48 binds at a time finished (23 pods/s at 1,000 kwok nodes). Some such
cap is wanted (SCHEDULER_MAX_CONNECTIONS says why); 48 from the slow-client defence was not it. On a loopback address
`--plain-bind` serves it without TLS: only the pod's own containers reach it, and TLS would
give each waiting bind a 256 KiB buffer.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import ssl
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import cast

from aiohttp import web

from hami_dcu.common.io import gcpolicy
from hami_dcu.common.io.connlimits import (
    DEFAULT_LIMITS,
    ConnectionLimits,
    add_connection_arguments,
    connection_limits_from,
)
from hami_dcu.common.io.flagtypes import positive_int, positive_seconds
from hami_dcu.common.io.guardedsite import serve_guarded
from hami_dcu.common.io.kube import AsyncKube, Kube, KubeConfigError, user_agent
from hami_dcu.common.io.tls import ReloadingTLS, add_client_auth_arguments
from hami_dcu.common.io.writer_flags import add_identity_arguments, identities_from
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.preferences import CARD_WORDS
from hami_dcu.scheduler import policy
from hami_dcu.scheduler.app import build_app, build_side_app
from hami_dcu.scheduler.bind import BindSettings
from hami_dcu.scheduler.cardpreemptor import PreemptorSettings
from hami_dcu.scheduler.filtering import BIND_QUEUE, FilterSettings
from hami_dcu.scheduler.quotas import admission_view
from hami_dcu.scheduler.service import SchedulerService, ServiceSettings
from hami_dcu.scheduler.volcanoapp import build_volcano_app

log = logging.getLogger(__name__)
# kube-scheduler holds one connection per bind in flight, so this is how many binds may wait for
# their nodes at once; beyond it, kube-scheduler's next /filter waits (parked) for one to end.
# That wait is the burst's back-pressure: the pods stay in kube-scheduler's queue instead of
# queueing binds behind nodes that cannot serve them within --lock-wait. Measured with the
# scale bench: 48 (the common cap) placed 22.8 pods/s at 1,000 kwok nodes; no cap placed
# 28.9 there, but at 5,000 nodes and 10,000 pods binds piled up behind the first nodes, timed
# out, were placed there again and failed 30,000 times.
SCHEDULER_MAX_CONNECTIONS = 128


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bind", default="127.0.0.1:8443",
                        help="host:port for /filter and /bind, kube-scheduler's only (default %(default)s)")
    parser.add_argument("--webhook-bind", default="",
                        help="host:port for POST /webhook and the probes, over TLS (default: no such listener)")
    parser.add_argument("--metrics-bind", default="",
                        help="host:port for GET /metrics, plain HTTP (default: /metrics on --bind)")
    parser.add_argument("--tls-cert", help="serving certificate (PEM); plain HTTP without it")
    parser.add_argument("--plain-bind", action="store_true",
                        help="serve --bind (a loopback address only) over plain HTTP even with --tls-cert: "
                             "kube-scheduler beside it in the pod is its one client")
    parser.add_argument("--scheduler-max-connections", type=positive_int, default=SCHEDULER_MAX_CONNECTIONS,
                        help="open connections on --bind, all of them kube-scheduler's: one per pod whose bind "
                             "is under way, waiting for its node included (default %(default)s)")
    parser.add_argument("--tls-key", help="serving key (PEM)")
    add_client_auth_arguments(parser)
    parser.add_argument("--scheduler-name", default=keys.DEFAULT_SCHEDULER_NAME,
                        help="the kube-scheduler profile this extender serves (pods' spec.schedulerName)")
    parser.add_argument("--node-policy", choices=policy.POLICIES, default=policy.DEFAULT_NODE_POLICY,
                        help="binpack fills busy nodes first, spread the emptiest; a pod's "
                        "hami.io/node-scheduler-policy annotation overrides it")
    parser.add_argument("--device-policy", type=_card_policy, default=policy.DEFAULT_CARD_POLICY,
                        help="card policy: a word or a comma chain of binpack, spread, numa, mutex, topology-aware "
                             "(default %(default)s)")
    parser.add_argument("--lock-timeout", type=float, default=300, help="seconds after which a node lock expires")
    parser.add_argument("--lock-wait", type=float, default=20,
                        help="seconds /bind waits for a locked node (keep below the extender httpTimeout)")
    parser.add_argument("--node-bind-queue", type=_bind_queue, default=BIND_QUEUE, metavar="auto|N",
                        help="binds in flight on one node from which /filter prefers another fitting node, so that "
                             "a burst does not queue more binds on a node than its Allocates serve within --lock-wait; "
                             "auto (the default): as many as the node's own lock handoffs serve within half of "
                             "--lock-wait; N: a fixed number (it spreads a burst even where the node would keep up, "
                             "at the cost of binpack's packing); 0: never")
    parser.add_argument("--card-preemption", action=argparse.BooleanOptionalAction, default=True,
                        help="device-plugin mode: evict lower-priority pods holding card memory or cores a "
                             "higher-priority pod needs, when kube-scheduler's own preemption (which sees DCU slots "
                             "only) finds no victims; through the Eviction API, so PodDisruptionBudgets hold "
                             "(default on)")
    parser.add_argument("--resync", type=positive_seconds, default=300, help="seconds between full relists")
    parser.add_argument("--serve-webhook", action="store_true", help="also serve POST /webhook on --bind")
    parser.add_argument("--mode", choices=("devicePlugin", "dra"), default="devicePlugin",
                        help="what the webhook does with DCU pods: route them to this extender (devicePlugin) or "
                             "rewrite them into DRA claims, still routed to --scheduler-name, whose /prioritize "
                             "then packs them by the ResourceSlices and ResourceClaims it watches (dra) "
                             "(default %(default)s)")
    parser.add_argument("--dra-extended-resource", action="store_true",
                        help="DRA mode: the DeviceClass dra.hygon.com names the naming set's count resource as its "
                             "extendedResourceName (Kubernetes 1.37+), so the webhook leaves a pod asking whole "
                             "cards by the count alone as written, for kube-scheduler to allocate; shares are "
                             "still rewritten into claims")
    parser.add_argument("--volcano-scheduler-name", default="",
                        help="Volcano mode (off when empty): the extender refuses to place or bind pods with this "
                             "schedulerName (Volcano places them); the webhook served here lets them keep it, the "
                             "deny rules still apply")
    parser.add_argument("--volcano-bind", default="",
                        help="host:port for upstream Volcano's extender plugin verbs, POST /volcano/<verb>, plain "
                             "HTTP (Volcano's plugin has no CA to trust; keep the port to Volcano's scheduler with a "
                             "NetworkPolicy); needs --volcano-scheduler-name (default: not served)")
    add_identity_arguments(parser)
    add_connection_arguments(parser)


def _card_policy(value: str) -> str:
    parsed = policy.parse_card_policy(value)
    if parsed is None:
        raise argparse.ArgumentTypeError(f"{value!r}: expected a word or a comma chain of {', '.join(CARD_WORDS)}")
    return str(parsed)


def _bind_queue(value: str) -> int | None:
    """--node-bind-queue: `auto` (None: by each node's pace) or a whole number, 0 for never."""
    if value == "auto":
        return None
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: expected auto or a whole number") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: expected auto, 0 (never) or a number of binds")
    return number


def settings_from(args: argparse.Namespace) -> ServiceSettings:
    return ServiceSettings(
        filter=FilterSettings(node_policy=args.node_policy, card_policy=args.device_policy,
                              naming=keys.naming_by_name(args.naming),
                              volcano_scheduler=args.volcano_scheduler_name, bind_queue=args.node_bind_queue),
        bind=BindSettings(lock_timeout=timedelta(seconds=args.lock_timeout), lock_wait=args.lock_wait),
        resync=args.resync,
        mode=args.mode,
        card_preemption=PreemptorSettings(enabled=args.card_preemption and args.mode != "dra"),
    )


def _tls(args: argparse.Namespace) -> ReloadingTLS | None:
    """TLS that follows the certificate files (the Secret behind them is rotated by `certs`)."""
    if not args.tls_cert and not args.tls_key:
        return None
    if not (args.tls_cert and args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    # With --client-ca every TLS listener asks for a client certificate, optionally: /webhook
    # refuses a caller without one, /filter and the probes never ask.
    return ReloadingTLS(args.tls_cert, args.tls_key, args.client_ca)


def _mount_webhook(app: web.Application, args: argparse.Namespace, service: SchedulerService,
                   limits: ConnectionLimits = DEFAULT_LIMITS) -> None:
    """Serve the webhook's POST /webhook on `app`. Imported only here, so the scheduler runs
    even in a build without the webhook."""
    try:
        from hami_dcu.webhook.command import api_server_from, client_auth_from, webhook_settings
        from hami_dcu.webhook.server import add_webhook_routes
    except ImportError as exc:
        raise ValueError(f"--serve-webhook: the webhook is not available in this build ({exc})") from exc
    # The webhook speaks the extender's naming set, its resource names included; its other flags
    # keep their defaults.
    settings = webhook_settings(naming=service.settings.filter.naming, scheduler_name=args.scheduler_name,
                                identities=identities_from(args), volcano_scheduler=args.volcano_scheduler_name)
    # In this process the webhook sees the extender's quota book and cache: it checks quotas at
    # admission. In Volcano mode, where Volcano's pods meet no /filter, admitted pods count from
    # their admission (scheduler/quotas.py).
    view = admission_view(service.quotas, service.cache, waiting=bool(settings.volcano_scheduler))
    settings = replace(settings, quota=view, reservations=view.reservations)
    dra = None
    if args.mode == "dra":
        from hami_dcu.webhook.draclaims import DraClaims, KnownCards

        if service.kube is None:  # the webhook lists the published card sizes through it
            raise ValueError("--mode dra: the webhook needs the API server, and this extender has no client")
        known = service.dra_informer.template if service.dra_informer is not None else None
        seen = service.dra_informer.reservation_seen if service.dra_informer is not None else None
        settings = replace(settings, mode="dra", extended_resource=args.dra_extended_resource)
        cards: KnownCards | None = None
        if service.dra_informer is not None:
            from hami_dcu.webhook.draquota import published_cards

            # The card sizes from the slice watch: a slice is kept as its few devices' sizes.
            service.dra_informer.slice_digest = lambda published: published_cards([published])
            cards = cast("KnownCards", service.dra_informer.slice_digests)  # its digests are PublishedCards
        dra = DraClaims(service.kube, known_template=known, reservation_seen=seen, known_cards=cards)
        if service.informer is not None:
            from hami_dcu.webhook.deferredtemplates import DeferredTemplates

            # The templates a review left for later (no caller proven), made once the pod is stored.
            service.informer.on_pod = DeferredTemplates(dra).seen
    add_webhook_routes(app, settings, service.metrics.registry, body_deadline=limits.body_timeout, dra=dra,
                       client_auth=client_auth_from(args), api_server=api_server_from(args))


def _address(flag: str, value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"{flag} {value!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


async def _listen(app: web.Application, flag: str, address: str, tls: ReloadingTLS | None,
                  limits: ConnectionLimits, on_close: Callable[[str], None]) -> web.AppRunner:
    host, port = _address(flag, address)
    runner, _site = await serve_guarded(app, host, port, limits, tls.context if tls else None, on_close)
    return runner


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_listener(args: argparse.Namespace, limits: ConnectionLimits) -> ConnectionLimits:
    """The caps of `--bind`: every connection is kube-scheduler's, so its own cap is the port's."""
    if args.plain_bind:
        host, _port = _address("--bind", args.bind)
        if not _is_loopback(host):
            raise ValueError(f"--plain-bind: --bind {args.bind} is not a loopback address; /filter and /bind go "
                             "unencrypted only where no other machine can reach them")
        if args.serve_webhook:
            raise ValueError("--plain-bind with --serve-webhook: the API server calls webhooks over TLS only")
    return replace(limits, max_connections=args.scheduler_max_connections,
                   max_per_client=args.scheduler_max_connections)


def _check_listeners(args: argparse.Namespace, tls: ReloadingTLS | None) -> None:
    """Listener flags that cannot work together, and bad addresses, fail before anything starts."""
    if args.webhook_bind and tls is None:
        raise ValueError("--webhook-bind needs --tls-cert and --tls-key (the API server calls webhooks over TLS)")
    if args.client_ca and (tls is None or not (args.webhook_bind or args.serve_webhook)):
        raise ValueError("--client-ca is the webhook's: it needs --webhook-bind (or --serve-webhook) and "
                         "--tls-cert/--tls-key")
    if args.volcano_bind and not args.volcano_scheduler_name:
        raise ValueError("--volcano-bind needs --volcano-scheduler-name: the device plugin serves the pods it places "
                         "without a node lock only under Volcano's schedulerName")
    for flag, value in (("--bind", args.bind), ("--webhook-bind", args.webhook_bind),
                        ("--metrics-bind", args.metrics_bind), ("--volcano-bind", args.volcano_bind)):
        if value:
            _address(flag, value)


async def _listen_beside(args: argparse.Namespace, service: SchedulerService, tls: ReloadingTLS | None,
                         limits: ConnectionLimits, runners: list[web.AppRunner]) -> None:
    """The webhook's and the metrics' own ports, when asked for (each runner joins `runners`
    as soon as it listens, so a later failure still closes it)."""
    closed = service.metrics.closed_connections
    if args.webhook_bind:
        webhook_app = build_side_app(service)
        _mount_webhook(webhook_app, args, service, limits)
        runners.append(await _listen(webhook_app, "--webhook-bind", args.webhook_bind, tls, limits,
                                     closed.recorder("webhook")))
    if args.metrics_bind:
        # The probes too: the kubelet reaches this port whether or not the webhook is on.
        runners.append(await _listen(build_side_app(service, metrics=True), "--metrics-bind",
                                     args.metrics_bind, None, limits, closed.recorder("metrics")))
    if args.volcano_bind:
        runners.append(await _listen(build_volcano_app(service), "--volcano-bind", args.volcano_bind, None, limits,
                                     closed.recorder("volcano")))


async def serve(args: argparse.Namespace) -> None:
    tls = _tls(args)
    _check_listeners(args, tls)
    limits = connection_limits_from(args)
    scheduler_limits = bind_listener(args, limits)
    kube = AsyncKube(Kube.from_kubeconfig(args.kubeconfig, agent=user_agent("scheduler")))
    gcpolicy.tune()
    service = SchedulerService(kube, settings_from(args))
    if service.informer is not None:  # the cache's objects live long: out of the collector's sight
        service.informer.on_listed = gcpolicy.settle
    if tls is not None:
        service.metrics.watch_certificate(args.tls_cert)  # hami_dcu_certificate_expiry_timestamp_seconds
    app = build_app(service, metrics=not args.metrics_bind, body_deadline=limits.body_timeout)
    if args.serve_webhook:
        _mount_webhook(app, args, service, limits)
    runners = [await _listen(app, "--bind", args.bind, None if args.plain_bind else tls, scheduler_limits,
                             service.metrics.closed_connections.recorder("extender"))]
    reloader = asyncio.ensure_future(tls.watch()) if tls else None
    try:
        await _listen_beside(args, service, tls, limits, runners)
        log.info("scheduler extender %s: /filter and /bind on %s (%s)%s%s%s, node policy %s, device policy %s",
                 args.scheduler_name, args.bind, "TLS" if tls and not args.plain_bind else "plain HTTP",
                 f", /webhook on {args.webhook_bind}" if args.webhook_bind else "",
                 f", /metrics on {args.metrics_bind}" if args.metrics_bind else "",
                 f", Volcano's verbs on {args.volcano_bind}" if args.volcano_bind else "",
                 args.node_policy, args.device_policy)
        await asyncio.Event().wait()
    finally:
        if reloader is not None:
            reloader.cancel()
        for runner in reversed(runners):
            await runner.cleanup()
        kube.close()


def run(args: argparse.Namespace) -> int:
    try:
        asyncio.run(serve(args))
    except (KubeConfigError, ValueError, ssl.SSLError) as exc:
        print(f"hami-dcu scheduler: {exc}", file=sys.stderr)
        return 2
    # OSError (a port in use, an unreadable file) is worded by the CLI (cli/errors.py), alike for every command.
    except KeyboardInterrupt:
        return 0
    return 0

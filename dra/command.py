"""`hami-dcu dra-driver`: discover the cards, publish the node's ResourceSlice, serve the
kubelet's DRA calls, keep the slice current on health changes, free vanished claims."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from pathlib import Path

from hami_dcu.common.io.cannotstart import CannotStart
from hami_dcu.common.io.connlimits import connection_limits_from
from hami_dcu.common.io.failures import Component
from hami_dcu.common.io.flagtypes import absolute_path, positive_seconds
from hami_dcu.common.io.kube import Kube, KubeError, user_agent
from hami_dcu.common.io.metricsserver import serve
from hami_dcu.common.protocol import keys
from hami_dcu.dra.core import DraPaths, DriverCore
from hami_dcu.dra.ledger import QuotaLedger
from hami_dcu.dra.server import POD_UID, KubeletPluginServer
from hami_dcu.dra.service import CLAIM_RECHECK, DriverService
from hami_dcu.dra.slices import NO_SCHEDULE, TAINT_EFFECTS
from hami_dcu.dra.usageview import driver_view
from hami_dcu.node import usagemetrics
from hami_dcu.node.flags import add_node_arguments, make_backend, served_cards
from hami_dcu.node.health import SmiHealth
from hami_dcu.node.smi import SmiError

log = logging.getLogger(__name__)
RETRY_AFTER_FAILURE = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_node_arguments(parser)
    parser.add_argument("--registry-dir", type=absolute_path, default="/var/lib/kubelet/plugins_registry",
                        help="the kubelet's plugin registration directory (a relative path is taken from the "
                             "working directory)")
    parser.add_argument("--kubelet-plugins-dir", type=absolute_path, default="/var/lib/kubelet/plugins",
                        help="the kubelet's plugins directory (the DRA socket goes in <dir>/dra.hygon.com/; a "
                             "relative path is taken from the working directory)")
    parser.add_argument("--cdi-dir", default="/var/run/cdi", help="where the container runtime reads CDI specs")
    parser.add_argument("--state-dir", default="/var/lib/hami-dcu/dra",
                        help="the driver's own records of prepared claims, mounted into no container")
    parser.add_argument("--register-interval", type=float, default=30.0,
                        help="seconds between slice checks and claim reconciles")
    parser.add_argument("--claim-recheck", type=positive_seconds, default=CLAIM_RECHECK,
                        help="seconds a prepared claim seen allocated goes unread by the reconcile (it frees "
                             "claims deleted while the driver was away; a Prepare short of room checks at once)")
    parser.add_argument("--health-interval", type=positive_seconds, default=1.0,
                        help="seconds between card health checks")
    parser.add_argument("--unhealthy-taint-effect", choices=TAINT_EFFECTS, default=NO_SCHEDULE,
                        help="the effect of the device taint on an unhealthy card: NoSchedule (new claims avoid it, "
                             "pods already on it keep running) or NoExecute (pods on it that do not tolerate the "
                             "taint are evicted too)")
    parser.add_argument("--pod-uid", type=pod_uid, default=os.environ.get("POD_UID") or None,
                        help="this pod's UID (default: $POD_UID, the downward API's metadata.uid): the sockets "
                             "are named after it, so the DaemonSet's next pod registers beside this one during a "
                             "rolling update (kubelet 1.33+); unset: the fixed socket names, one driver per node")
    parser.add_argument("--ready-file", type=absolute_path, default=None,
                        help="a file that exists while the kubelet has this driver registered, for the pod's "
                             "readiness probe (a rolling update removes the old pod once the new one is called)")
    parser.add_argument("--quota-ledger", type=ledger_name, default=None, metavar="NAMESPACE/NAME",
                        help="the ConfigMap where the drivers count what they prepared in namespaces with a DCU "
                             "quota, checked again at Prepare (the chart makes it); unset: the webhook's check only")


def pod_uid(value: str) -> str:
    if not POD_UID.fullmatch(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a pod UID (letters, digits and '-')")
    return value


def ledger_name(value: str) -> tuple[str, str]:
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{value!r} is not NAMESPACE/NAME")
    return namespace, name


class DriverLoop:
    """Health every `health_interval` (publish at once on a change); slice and reconcile every
    `interval`, 5 s after a failure."""

    def __init__(self, service: DriverService, interval: float, health_interval: float) -> None:
        self.service = service
        self.interval = interval
        self.health_interval = health_interval
        self.stopping = threading.Event()

    def once(self) -> bool:
        try:
            self.service.publish()
            self.service.reconcile()
            return True
        except (KubeError, OSError) as exc:
            log.warning("node %s: publish or reconcile failed, retrying in %.0fs: %s", self.service.node,
                        RETRY_AFTER_FAILURE, exc)
            return False

    def run(self) -> None:
        due = 0.0
        while not self.stopping.is_set():
            changed = self.service.refresh_health()
            now = time.monotonic()
            if changed or now >= due:
                due = now + (self.interval if self.once() else RETRY_AFTER_FAILURE)
            self.stopping.wait(self.health_interval)


def build(args: argparse.Namespace, kube: Kube) -> tuple[DriverService, KubeletPluginServer]:
    naming = keys.naming_by_name(args.naming)
    backend = make_backend(args)
    served = served_cards(args, backend, naming)
    paths = DraPaths(vdev_dir=Path(args.vdev_dir), etc_vdev=Path(args.etc_vdev), cdi_dir=Path(args.cdi_dir),
                     state_dir=Path(args.state_dir), dev_root=Path(args.dev_root), driver_dir=Path(args.driver_dir),
                     hyhal_dir=Path(args.hyhal_dir))
    core = DriverCore(args.node_name, served, paths)
    core.rebuild()
    ledger = None
    if args.quota_ledger is not None:
        namespace, name = args.quota_ledger
        ledger = QuotaLedger(kube, namespace, name, node=args.node_name, resources=naming.resources)
    service = DriverService(kube, core, args.slots_per_card, SmiHealth(backend, served, args.dev_root).problems,
                            naming=naming, claim_recheck=args.claim_recheck, ledger=ledger,
                            taint_effect=args.unhealthy_taint_effect)
    server = KubeletPluginServer(service.prepare, service.unprepare, Path(args.registry_dir),
                                 Path(args.kubelet_plugins_dir), metrics_registry=service.metrics.registry,
                                 pod_uid=args.pod_uid,
                                 ready_file=Path(args.ready_file) if args.ready_file else None)
    return service, server


def run(args: argparse.Namespace) -> int:
    if not args.node_name:
        raise CannotStart("no node name: pass --node-name or set NODE_NAME (the downward API's spec.nodeName)")
    kube = Kube.from_kubeconfig(args.kubeconfig, agent=user_agent("dra-driver"))
    try:
        service, server = build(args, kube)
    except SmiError as exc:
        raise CannotStart(f"node {args.node_name}: {exc}") from exc
    log.info("node %s: DRA driver serving %d cards: %s", args.node_name, len(service.core.cards),
             ", ".join(sorted(service.core.cards)))
    if args.metrics_bind:
        usagemetrics.register(service.metrics.registry, Component.DRA_DRIVER, lambda: driver_view(service.core), args)
        try:
            serve(service.metrics, args.metrics_bind, connection_limits_from(args))
        except (OSError, ValueError) as exc:
            log.error("DRA driver cannot serve metrics on %s: %s", args.metrics_bind, exc)
            return 1
    loop = DriverLoop(service, args.register_interval, args.health_interval)
    # Installed before serving: a SIGTERM right after start must not kill us mid-way.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: loop.stopping.set())
    # Health first, so the first slice taints cards that are already unhealthy.
    service.refresh_health()
    server.start()
    try:
        loop.run()
    except KeyboardInterrupt:
        pass
    finally:
        loop.stopping.set()
        server.stop()
    return 0

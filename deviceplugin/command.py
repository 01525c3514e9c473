"""`hami-dcu device-plugin`: discover the cards, serve the kubelet, publish the node, reconcile."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path

from hami_dcu.common.io.cannotstart import CannotStart
from hami_dcu.common.io.connlimits import connection_limits_from
from hami_dcu.common.io.failures import Component
from hami_dcu.common.io.flagtypes import absolute_path
from hami_dcu.common.io.kube import Kube, KubeError, user_agent
from hami_dcu.common.io.metricsserver import serve
from hami_dcu.common.protocol import keys
from hami_dcu.deviceplugin.core import Paths
from hami_dcu.deviceplugin.metrics import PluginMetrics
from hami_dcu.deviceplugin.namingwatch import check_node_naming
from hami_dcu.deviceplugin.nodecache import NodeCache
from hami_dcu.deviceplugin.nodewatch import NodeWatch
from hami_dcu.deviceplugin.server import DevicePluginServer
from hami_dcu.deviceplugin.service import PluginService
from hami_dcu.deviceplugin.usageview import plugin_view
from hami_dcu.node import usagemetrics
from hami_dcu.node.flags import add_node_arguments, make_backend, served_cards
from hami_dcu.node.health import SmiHealth
from hami_dcu.node.podresources import PodResourcesClient
from hami_dcu.node.smi import FALLBACK_MODEL, SmiError

log = logging.getLogger(__name__)
RETRY_AFTER_FAILURE = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_node_arguments(parser)
    parser.add_argument("--plugin-dir", type=absolute_path, default="/var/lib/kubelet/device-plugins",
                        help="kubelet device plugin dir (a relative path is taken from the working directory)")
    parser.add_argument("--state-dir", default="/var/lib/hami-dcu/state",
                        help="host dir for the plugin's own record of its grants, mounted into no container")
    parser.add_argument("--register-interval", type=float, default=30.0,
                        help="seconds between node registrations and reconciles (default %(default)s)")
    parser.add_argument("--resource-count", help="kubelet resource name (default: the naming set's count resource)")
    parser.add_argument("--lock-timeout", type=int, default=300, help="node lock expiry, seconds")
    parser.add_argument("--volcano-scheduler-name", default="",
                        help="Volcano mode (off when empty): serve pods this scheduler placed without a node lock, "
                             "and advertise the naming set's memory (MiB) and cores as node resources (Hygon's "
                             "Volcano fork reads only --naming hcu; upstream Volcano through the extender either)")


class NodeLoop:
    """Registration and reconcile every interval; 5 s after a failure."""

    def __init__(self, service: PluginService, server: DevicePluginServer, interval: float) -> None:
        self.service = service
        self.server = server
        self.interval = interval
        self.stopping = threading.Event()

    def once(self) -> bool:
        try:
            self.service.register_node(self.server.health_snapshot())
            self.service.reconcile()
            return True
        except (KubeError, OSError) as exc:
            log.warning("node %s: registration or reconcile failed, retrying in %.0fs: %s", self.service.node,
                        RETRY_AFTER_FAILURE, exc)
            return False

    def publish_now(self) -> None:
        """Republish the node registration at once (health changed); the cycle retries on failure."""
        try:
            self.service.register_node(self.server.health_snapshot())
        except KubeError as exc:
            log.warning("node %s: registration after a health change failed: %s", self.service.node, exc)

    def run(self) -> None:
        while not self.stopping.is_set():
            ok = self.once()
            self.stopping.wait(self.interval if ok else RETRY_AFTER_FAILURE)


def build(args: argparse.Namespace, kube: Kube, cache: NodeCache | None = None
          ) -> tuple[PluginService, DevicePluginServer, NodeLoop]:
    naming = keys.naming_by_name(args.naming)
    backend = make_backend(args)
    served = served_cards(args, backend, naming)
    paths = Paths(vdev_dir=Path(args.vdev_dir), etc_vdev=Path(args.etc_vdev), state_dir=Path(args.state_dir),
                  dev_root=Path(args.dev_root),
                  driver_dir=Path(args.driver_dir), hyhal_dir=Path(args.hyhal_dir))
    resource = args.resource_count or naming.resources.count
    service = PluginService(kube, args.node_name, served, paths, args.slots_per_card, args.lock_timeout,
                            metrics=PluginMetrics(), naming=naming, resource=resource,
                            volcano_scheduler=args.volcano_scheduler_name, cache=cache,
                            # Which pod a Volcano gang's Allocate serves is the kubelet's answer on this
                            # socket (deviceplugin/admissions.py); "" leaves the kubelet's default.
                            pod_resources=PodResourcesClient(args.pod_resources_socket).answer
                            if args.pod_resources_socket else None)
    server = DevicePluginServer(service, args.plugin_dir, resource,
                                health=SmiHealth(backend, served, args.dev_root))
    loop = NodeLoop(service, server, args.register_interval)
    server.on_health_change = loop.publish_now
    return service, server, loop


def report_unknown_models(service: PluginService) -> None:
    """An unknown model is served with a fallback type; say so on the node, where operators look."""
    core = service.core
    unknown = [c for c in core.cards.values() if c.card.model == FALLBACK_MODEL]
    if not unknown:
        return
    message = (f"{len(unknown)} DCU(s) with an unknown PCI device id, served as {core.naming.model_prefix}"
               f"{FALLBACK_MODEL} with {unknown[0].card.compute_units} compute units: "
               + ", ".join(f"{c.id} ({c.card.pci_bus_id})" for c in unknown))
    log.warning("node %s: %s", core.node, message)
    try:
        service.kube.create_event({"kind": "Node", "metadata": {"name": core.node}}, "UnknownDCUModel", message,
                                  "Warning", component="hami-dcu-device-plugin")
    except KubeError as exc:
        log.warning("node %s: could not record the unknown-model event: %s", core.node, exc)


def run(args: argparse.Namespace) -> int:
    if not args.node_name:
        raise CannotStart("no node name: pass --node-name or set NODE_NAME (the downward API's spec.nodeName)")
    kube = Kube.from_kubeconfig(args.kubeconfig, agent=user_agent("device-plugin"))
    cache = NodeCache(args.node_name)
    try:
        service, server, loop = build(args, kube, cache)
    except SmiError as exc:
        raise CannotStart(f"node {args.node_name}: {exc}") from exc
    cards = service.core.cards
    log.info("node %s: serving %d cards: %s", args.node_name, len(cards), ", ".join(sorted(cards)))
    if args.metrics_bind:
        usagemetrics.register(service.metrics.registry, Component.DEVICE_PLUGIN, lambda: plugin_view(service), args)
        try:
            serve(service.metrics, args.metrics_bind, connection_limits_from(args))
        except (OSError, ValueError) as exc:
            log.error("device plugin cannot serve metrics on %s: %s", args.metrics_bind, exc)
            return 1
    # The kubelet's pod deletion sends SIGTERM: stop serving and remove our socket cleanly.
    # Installed before serving: a SIGTERM right after registration must not kill us mid-way.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: loop.stopping.set())
    report_unknown_models(service)
    check_node_naming(kube, args.node_name, service.core.naming)
    server.refresh_health()
    # The node and its pods as watches show them: per pod, Allocate reads nothing the cache
    # shows whole (deviceplugin/cachereads.py); out of sync, it reads as before. Started once
    # every start-up check has passed (a failure is the one line the command prints), before
    # the kubelet learns of the plugin (no Allocate comes earlier).
    watch = NodeWatch(kube, args.node_name, cache).start()
    server.start()
    try:
        loop.run()
    except KeyboardInterrupt:
        pass
    finally:
        loop.stopping.set()
        watch.stop()
        server.stop()
    return 0

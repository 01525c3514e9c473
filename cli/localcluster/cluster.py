"""`LocalCluster`: the whole system on one machine, speaking the real protocols.

    with LocalCluster({"node0": default_cards("node0")}, naming=keys.DCU_NAMING) as cluster:
        cluster.kube.create_pod(cluster.namespace, manifest)

Started, in order: the local API server; the webhook over HTTPS with a certificate from
the `certs` code path (Secret + caBundle in a MutatingWebhookConfiguration that points at
a Service, which the local admission dispatcher resolves to the webhook's port); the
scheduler extender and the kube-scheduler stand-in driving it; and per node a kubelet
stand-in plus a device plugin (mock SMI, its own fake /sys and /dev, its own vdev dirs).
Components meet only over sockets: HTTP(S) to the API server, AdmissionReview, extender
JSON, device plugin gRPC. Each component authenticates as its own identity (the extender's
ServiceAccount, each plugin's ServiceAccount bound to its node), and the webhook reviews pod
UPDATEs and Bindings with the one-writer rule, as the chart registers it where no admission
policy runs: the local API server sends every pod write through admission.
"""

from __future__ import annotations

import argparse
import base64
import errno
import logging
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hami_dcu.cli.localcluster.admission import WebhookDispatcher
from hami_dcu.cli.localcluster.apiserver import LocalApiServer
from hami_dcu.cli.localcluster.kubelet import LocalKubelet
from hami_dcu.cli.localcluster.pods import MockCard, default_cards
from hami_dcu.cli.localcluster.scheduler_loop import SchedulerLoop
from hami_dcu.cli.localcluster.servers import AppThread, free_port
from hami_dcu.common.io.kube import AsyncKube, Kube
from hami_dcu.common.io.tls import ReloadingTLS
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.writers import NODE_NAME_EXTRA, Identities
from hami_dcu.deviceplugin.command import NodeLoop
from hami_dcu.deviceplugin.core import Paths
from hami_dcu.deviceplugin.server import DevicePluginServer
from hami_dcu.deviceplugin.service import PluginService
from hami_dcu.node.discovery import discover
from hami_dcu.node.faketree import lay_out
from hami_dcu.node.smi import MockBackend
from hami_dcu.scheduler import command as scheduler_command
from hami_dcu.scheduler.app import build_app as build_scheduler_app
from hami_dcu.scheduler.service import SchedulerService
from hami_dcu.webhook import certs
from hami_dcu.webhook import command as webhook_command
from hami_dcu.webhook.server import build_app as build_webhook_app

log = logging.getLogger(__name__)

SYSTEM_NAMESPACE = "kube-system"
# The usernames the chart's ServiceAccounts have (release hami-dcu in kube-system).
EXTENDER_IDENTITY = f"system:serviceaccount:{SYSTEM_NAMESPACE}:hami-dcu-scheduler"
PLUGIN_IDENTITY = f"system:serviceaccount:{SYSTEM_NAMESPACE}:hami-dcu-device-plugin"
IDENTITIES = Identities(scheduler=frozenset({EXTENDER_IDENTITY}), device_plugin=frozenset({PLUGIN_IDENTITY}))
WEBHOOK_SERVICE = "hami-dcu-webhook"
WEBHOOK_SECRET = "hami-dcu-webhook-tls"
WEBHOOK_CONFIG = "hami-dcu-webhook"


@dataclass
class LocalNode:
    name: str
    cards: list[MockCard]
    root: Path
    plugin_dir: Path
    kubelet: LocalKubelet
    plugin: PluginService | None = None
    server: DevicePluginServer | None = None
    loop: NodeLoop | None = None
    loop_thread: threading.Thread | None = None

    @property
    def paths(self) -> Paths:
        return Paths(
            vdev_dir=self.root / "usr/local/vgpu/dcu",
            etc_vdev=self.root / "etc/vdev",
            state_dir=self.root / "var/lib/hami-dcu/state",
            dev_root=self.root / "dev",
            driver_dir=self.root / "opt/dtk",
            hyhal_dir=self.root / "opt/hyhal",
        )


class LocalCluster:
    def __init__(
        self,
        nodes: dict[str, list[MockCard]] | None = None,
        namespace: str = "e2e",
        node_policy: str = "binpack",
        device_policy: str = "spread",
        register_interval: float = 1.0,
        workdir: str | Path | None = None,
        *,
        naming: keys.Naming,  # required: a default would let a forgotten argument speak the dcu set
    ) -> None:
        self.node_specs = nodes if nodes is not None else {n: default_cards(n) for n in ("node0", "node1")}
        self.naming = naming  # what every component of this cluster speaks
        self.namespace = namespace
        self.node_policy = node_policy
        self.device_policy = device_policy
        self.register_interval = register_interval
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="hami-lc-", dir="/tmp"))
        self.api: LocalApiServer | None = None
        self.kube: Kube = None  # type: ignore[assignment]  # set by start()
        self.webhook: AppThread | None = None
        self.scheduler: AppThread | None = None
        self.scheduler_port = free_port()
        self.scheduler_loop: SchedulerLoop | None = None
        self.nodes: dict[str, LocalNode] = {}

    @property
    def cards(self) -> dict[str, list[MockCard]]:
        return {name: node.cards for name, node in self.nodes.items()}

    # --- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LocalCluster:
        self.api = LocalApiServer(kubeconfig_path=self.workdir / "kubeconfig", graceful_pod_deletion=True).start()
        self.kube = Kube.from_kubeconfig(str(self.api.kubeconfig_path))
        self.kube.request("POST", "/api/v1/namespaces", body={"metadata": {"name": self.namespace}})
        self._start_webhook()
        self._start_scheduler()
        self.scheduler_loop = SchedulerLoop(
            self.kube, f"http://127.0.0.1:{self.scheduler_port}", initial_backoff=0.3, max_backoff=2.0,
            http_timeout=5.0,  # kube-scheduler's default extender timeout: what a bind must beat
        ).start()
        for name, cards in self.node_specs.items():
            self._start_node(name, cards)
        return self

    def stop(self) -> None:
        for node in self.nodes.values():
            self._stop_plugin(node)
            node.kubelet.stop()
            shutil.rmtree(node.plugin_dir, ignore_errors=True)
        if self.scheduler_loop is not None:
            self.scheduler_loop.stop()
        for server in (self.scheduler, self.webhook):
            if server is not None:
                server.stop()
        if self.api is not None:
            self.api.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --- webhook -------------------------------------------------------------------------

    def _start_webhook(self) -> None:
        assert self.api is not None
        port = free_port()
        self.kube.request("POST", certs.WEBHOOK_CONFIG_PATH, body=webhook_configuration())
        # The same job `hami-dcu certs` runs in a cluster: Secret, then caBundle.
        certs.ensure(self.kube, SYSTEM_NAMESPACE, WEBHOOK_SERVICE, WEBHOOK_SECRET, WEBHOOK_CONFIG)
        secret = self.kube.request("GET", f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/secrets/{WEBHOOK_SECRET}")
        tls_dir = self.workdir / "webhook-tls"
        # The serving pair only (never ca.key), the key 0400: as a Secret volume with defaultMode 0400.
        certs.write_pem_files(tls_dir, {name: base64.b64decode(secret["data"][name])
                                        for name in ("tls.crt", "tls.key")})
        tls = ReloadingTLS(str(tls_dir / "tls.crt"), str(tls_dir / "tls.key"))
        settings = webhook_command.settings_from(_flags(
            "webhook", "--tls-cert", str(tls_dir / "tls.crt"), "--tls-key", str(tls_dir / "tls.key"),
            "--naming", self.naming.name, *_identity_flags()))
        self.webhook = AppThread("webhook", lambda: build_webhook_app(settings), port=port,
                                 ssl_context=tls.context).start()
        WebhookDispatcher(self.api, resolve_service=lambda ns, name, _port: f"https://127.0.0.1:{port}").install()

    # --- scheduler -----------------------------------------------------------------------

    def _start_scheduler(self) -> None:
        # The scheduler loop gives up on a bind after kube-scheduler's default 5 s, so a bind
        # waits for a node at most 4 s (the chart keeps lockWait below httpTimeout too).
        settings = scheduler_command.settings_from(_flags(
            "scheduler", "--node-policy", self.node_policy, "--device-policy", self.device_policy,
            "--naming", self.naming.name, "--lock-timeout", "300", "--lock-wait", "4", "--resync", "30",
            *_identity_flags()))
        kubeconfig = str(self.api.credentials(EXTENDER_IDENTITY)) if self.api else None

        async def make_app() -> Any:
            service = SchedulerService(AsyncKube(Kube.from_kubeconfig(kubeconfig)), settings)
            return build_scheduler_app(service)

        self.scheduler = AppThread("scheduler", make_app, port=self.scheduler_port).start()

    def restart_scheduler(self) -> None:
        """A new extender process: same port when it is free, empty cache rebuilt from the API.

        The old port is an ephemeral one (free_port), so another process's outgoing connection
        may hold it by now; then the extender moves to a new port and the scheduler loop follows,
        as kube-scheduler would follow a changed extender URL in its configuration."""
        if self.scheduler is not None:
            self.scheduler.stop()
        try:
            self._start_scheduler()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            log.info("extender port %d taken meanwhile (%s): moving to a new port", self.scheduler_port, exc)
            self.scheduler_port = free_port()
            self._start_scheduler()
            if self.scheduler_loop is not None:
                self.scheduler_loop.extender_url = f"http://127.0.0.1:{self.scheduler_port}"

    # --- nodes ---------------------------------------------------------------------------

    def _start_node(self, name: str, cards: list[MockCard]) -> None:
        root = self.workdir / "nodes" / name
        plugin_dir = Path(tempfile.mkdtemp(prefix=f"{name[:8]}-", dir="/tmp"))
        mock_file = root / "mock-devices.yaml"
        root.mkdir(parents=True, exist_ok=True)
        mock_file.write_text(yaml.safe_dump([c.as_mock_entry() for c in cards]))
        lay_out(MockBackend(mock_file).cards(), root / "sys", root / "dev")
        kubelet = LocalKubelet(self.kube, name, plugin_dir, self.naming.resources.count).start()
        node = LocalNode(name, cards, root, plugin_dir, kubelet)
        self.nodes[name] = node
        self._start_plugin(node)

    def _start_plugin(self, node: LocalNode) -> None:
        mock_file = node.root / "mock-devices.yaml"
        backend = MockBackend(mock_file)
        served = discover(backend.cards(), node.root / "sys", node.root / "dev", self.naming)
        # The plugin's token is bound to its node, as the kubelet binds a projected token to the pod.
        kube = (Kube.from_kubeconfig(str(self.api.credentials(PLUGIN_IDENTITY, {NODE_NAME_EXTRA: [node.name]})))
                if self.api else self.kube)
        node.plugin = PluginService(kube, node.name, served, node.paths, naming=self.naming)
        node.server = DevicePluginServer(
            node.plugin,
            node.plugin_dir,
            self.naming.resources.count,
            poll_interval=0.2,
            health=lambda: {f"{self.naming.id_prefix}{c.serial}": c.healthy for c in backend.cards()},
        )
        node.server.refresh_health()
        node.server.start()
        node.loop = NodeLoop(node.plugin, node.server, self.register_interval)
        node.loop.once()
        node.loop_thread = threading.Thread(target=node.loop.run, name=f"plugin-{node.name}", daemon=True)
        node.loop_thread.start()

    def _stop_plugin(self, node: LocalNode) -> None:
        if node.loop is not None:
            node.loop.stopping.set()
        if node.server is not None:
            node.server.stop()
        if node.loop_thread is not None:
            node.loop_thread.join(5)

    def restart_device_plugin(self, node: str) -> None:
        """A new plugin process on the node: state rebuilt from the vdev directories."""
        local = self.nodes[node]
        self._stop_plugin(local)
        self._start_plugin(local)

    def vdev_files(self, node: str) -> dict[str, str]:
        vdev_dir = self.nodes[node].paths.vdev_dir
        if not vdev_dir.exists():
            return {}
        return {d.name: (d / "vdev0.conf").read_text() for d in vdev_dir.iterdir() if (d / "vdev0.conf").exists()}


def _flags(*argv: str) -> argparse.Namespace:
    """A component's flags parsed by `hami-dcu`'s own parser: the local cluster composes each
    component from flags through the same settings_from as the process the chart runs, so a
    flag's default or a setting's meaning cannot differ between the demo and a cluster."""
    from hami_dcu.cli.main import build_parser  # the parser names this package's demo: import when used

    parser, _ = build_parser()
    return parser.parse_args(list(argv))


def _identity_flags() -> list[str]:
    return [flag for user in sorted(IDENTITIES.scheduler) for flag in ("--scheduler-identity", user)] + [
        flag for user in sorted(IDENTITIES.device_plugin) for flag in ("--device-plugin-identity", user)]


def webhook_configuration(failure_policy: str = "Fail", review_updates: bool = True) -> dict[str, Any]:
    """What the chart registers: CREATE pods, kube-system and opted-out namespaces excluded; and
    where no admission policy runs (as here: no CEL), pod UPDATEs and Bindings for the one-writer
    rule."""
    client_config = {"service": {"namespace": SYSTEM_NAMESPACE, "name": WEBHOOK_SERVICE, "path": "/webhook",
                                 "port": 443}}
    excluded = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": [SYSTEM_NAMESPACE]}
    writers = {
        "name": "writers.dcu.hami.io",
        "clientConfig": client_config,
        "rules": [{"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"],
                   "scope": "*"},
                  {"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/binding"],
                   "scope": "*"}],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
        "namespaceSelector": {"matchExpressions": [excluded]},
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIG},
        "webhooks": [
            {
                "name": "dcu.hami.io",
                "clientConfig": {
                    "service": {"namespace": SYSTEM_NAMESPACE, "name": WEBHOOK_SERVICE, "path": "/webhook", "port": 443}
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "*",
                    }
                ],
                "failurePolicy": failure_policy,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 10,
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": keys.WEBHOOK_LABEL, "operator": "NotIn", "values": [keys.WEBHOOK_IGNORE]},
                        excluded,
                    ]
                },
                # No objectSelector: a pod's opt-out label exempts it only when it names no DCU.
            },
            *([writers] if review_updates else []),
        ],
    }


__all__ = ["LocalCluster", "LocalNode", "webhook_configuration"]

"""An upstream control plane on this machine: etcd, kube-apiserver, kube-controller-manager and
the cluster's default kube-scheduler, each a process built from Go modules (build.sh).

The apiserver runs with what a kubeadm cluster has that matters here: TLS, client-certificate
and service-account authentication, the Node and RBAC authorizers, NodeRestriction and the
default admission chain (so MutatingAdmissionWebhook calls our webhook, ServiceAccount
admission mounts tokens), and `--enable-aggregator-routing` so webhook Services are dialled at
their endpoints' pod IPs (there is no kube-proxy). The controller manager gives Deployments,
DaemonSets, Jobs, garbage collection, default ServiceAccounts, EndpointSlices and node
lifecycle, each controller with its own ServiceAccount credentials.
"""

from __future__ import annotations

import logging
import socket
import ssl
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from e2e.realcluster.pki import KeyPair, Pki, kubeconfig
from e2e.realcluster.processes import Process, wait_for

log = logging.getLogger(__name__)

SERVICE_CIDR = "10.96.0.0/16"
ADMIN_USER = "hami-e2e-admin"


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class ControlPlane:
    def __init__(self, binaries: Path, workdir: Path, address: str,
                 controller_manager_args: Sequence[str] = (), apiserver_args: Sequence[str] = ()) -> None:
        self.binaries = binaries
        self.controller_manager_args = list(controller_manager_args)  # appended to its defaults
        self.apiserver_args = list(apiserver_args)  # appended to its defaults (an admission config, say)
        self.workdir = workdir
        self.address = address  # where the apiserver listens: the pod network's gateway
        self.pki = Pki(workdir / "pki")
        self.port = free_port(address)
        self.url = f"https://{address}:{self.port}"
        self.admin = self.pki.client("admin", ADMIN_USER, ("system:masters",))
        self.admin_kubeconfig = self._kubeconfig("admin", self.admin)
        self.etcd: Process | None = None
        self.apiserver: Process | None = None
        self.controller_manager: Process | None = None
        self.scheduler: Process | None = None

    def _kubeconfig(self, stem: str, client: KeyPair) -> Path:
        path = self.workdir / f"{stem}.kubeconfig"
        path.write_text(kubeconfig(self.url, self.pki.ca, client=client))
        return path

    def node_kubeconfig(self, node: str) -> Path:
        """A kubelet's identity: the Node authorizer and NodeRestriction judge it by this name."""
        return self._kubeconfig(f"node-{node}", self.pki.client(f"node-{node}", f"system:node:{node}",
                                                                ("system:nodes",)))

    @property
    def processes(self) -> list[Process]:
        return [p for p in (self.etcd, self.apiserver, self.controller_manager, self.scheduler) if p]

    def _bin(self, name: str) -> str:
        return str(self.binaries / name)

    def start(self) -> ControlPlane:
        self.start_api()
        self._start_controller_manager()
        self.scheduler = self.start_scheduler("kube-scheduler")
        return self

    def start_api(self) -> ControlPlane:
        """etcd and kube-apiserver only: what a benchmark of API round trips needs."""
        self._start_etcd()
        self._start_apiserver()
        return self

    def _start_etcd(self) -> None:
        client, peer = free_port("127.0.0.1"), free_port("127.0.0.1")
        self.etcd_url = f"http://127.0.0.1:{client}"
        self.etcd = Process("etcd", [
            self._bin("etcd"), "--name=e2e", f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}", f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=e2e=http://127.0.0.1:{peer}",
            # A throw-away cluster: durability buys nothing and fsync costs seconds on CI disks.
            "--unsafe-no-fsync", "--log-level=warn",
        ], self.workdir / "logs/etcd.log").start()
        wait_for("etcd", lambda: urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2).status == 200,
                 60, [self.etcd])

    def _start_apiserver(self) -> None:
        serving = self.pki.server("apiserver", ["kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                                "kubernetes.default.svc.cluster.local", "localhost"],
                                  [self.address, "127.0.0.1", "10.96.0.1"])
        sa = self.pki.service_account
        # The front-proxy identity, as kubeadm sets it up: kube-scheduler's and the controller
        # manager's authentication read its CA from extension-apiserver-authentication.
        front_proxy = self.pki.client("front-proxy-client", "front-proxy-client")
        self.apiserver = Process("kube-apiserver", [
            self._bin("kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.address}", f"--advertise-address={self.address}", f"--secure-port={self.port}",
            f"--tls-cert-file={serving.cert}", f"--tls-private-key-file={serving.key}",
            f"--client-ca-file={self.pki.ca}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={sa.cert}", f"--service-account-signing-key-file={sa.key}",
            "--allow-privileged=true",
            # No kube-proxy: webhook Services are dialled at their endpoints, as aggregated APIs can be.
            "--enable-aggregator-routing=true",
            f"--requestheader-client-ca-file={self.pki.ca}", "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={front_proxy.cert}", f"--proxy-client-key-file={front_proxy.key}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            "--profiling=false",
            # On loopback (a benchmark with no pods) the `kubernetes` Service cannot point at it.
            *(["--endpoint-reconciler-type=none"] if self.address.startswith("127.") else []),
            *self.apiserver_args,
        ], self.workdir / "logs/kube-apiserver.log").start()
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.admin.cert), str(self.admin.key))

        def ready() -> bool:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=3, context=context) as response:
                return response.status == 200

        wait_for("kube-apiserver /readyz", ready, 120, [self.etcd, self.apiserver])  # type: ignore[list-item]

    def _start_controller_manager(self) -> None:
        config = self._kubeconfig("kcm", self.pki.client("kcm", "system:kube-controller-manager"))
        self.controller_manager = Process("kube-controller-manager", [
            self._bin("kube-controller-manager"),
            f"--kubeconfig={config}", f"--authentication-kubeconfig={config}", f"--authorization-kubeconfig={config}",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.pki.service_account.key}",
            f"--root-ca-file={self.pki.ca}",
            "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port('127.0.0.1')}",
            # Pods go away as fast as the stand-in kubelets finish them.
            "--terminated-pod-gc-threshold=100",
            *self.controller_manager_args,
        ], self.workdir / "logs/kube-controller-manager.log").start()

    def start_scheduler(self, name: str, config: Path | None = None, kubeconfig_path: Path | None = None,
                        leader_elect: bool = False) -> Process:
        """A kube-scheduler process: the cluster's default one, or another with its own config."""
        if kubeconfig_path is None:
            kubeconfig_path = self._kubeconfig("scheduler", self.pki.client("scheduler", "system:kube-scheduler"))
        argv = [self._bin("kube-scheduler"), f"--kubeconfig={kubeconfig_path}",
                f"--authentication-kubeconfig={kubeconfig_path}", f"--authorization-kubeconfig={kubeconfig_path}",
                f"--leader-elect={str(leader_elect).lower()}", "--bind-address=127.0.0.1",
                f"--secure-port={free_port('127.0.0.1')}"]
        if config is not None:
            argv.append(f"--config={config}")
        return Process(name, argv, self.workdir / f"logs/{name}.log").start()

    def check_alive(self) -> None:
        for process in self.processes:
            process.check_alive()

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop(grace=5)

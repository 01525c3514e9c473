"""A pod network for the real-cluster suite: one Linux bridge, one network namespace per pod.

kube-apiserver refuses loopback addresses in Endpoints and there is no kube-proxy, so the
webhook Service is reached the way `--enable-aggregator-routing` does it: the apiserver dials
the endpoint's pod IP. Every pod gets its own namespace (its own loopback, as in a real pod:
the bundled kube-scheduler reaches the extender at 127.0.0.1, two scheduler replicas both
listen on their ports) with a veth into the bridge; the control plane listens on the bridge's
address, which is also the nodes' InternalIP.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import threading
import uuid
from pathlib import Path


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def _forward_rule(bridge: str) -> list[str]:
    return ["FORWARD", "-i", bridge, "-o", bridge, "-m", "comment", "--comment", "hami-dcu e2e pod network",
            "-j", "ACCEPT"]


def _accept_bridge_traffic(bridge: str) -> None:
    """Let pod-to-pod traffic on the bridge through the host's FORWARD chain.

    A running dockerd sets the FORWARD policy to DROP and turns on bridge netfilter
    (net.bridge.bridge-nf-call-iptables=1), so frames between two ports of any bridge are
    filtered there and our pods stop reaching each other. One ACCEPT rule for traffic that
    enters and leaves this bridge holds whichever starts first: dockerd inserts its own jumps
    above it and they only concern its bridges.
    """
    if shutil.which("iptables") is None:
        return  # no iptables: nothing filters bridged traffic either
    subprocess.run(["iptables", "-w", "-I", *_forward_rule(bridge)], check=True, capture_output=True)


def _drop_bridge_rule(bridge: str) -> None:
    if shutil.which("iptables") is not None:
        subprocess.run(["iptables", "-w", "-D", *_forward_rule(bridge)], check=False, capture_output=True)


def _bridge_mac(tag: str) -> str:
    """A locally administered unicast MAC for the bridge tagged `tag` (6 hex digits)."""
    return "02:48:" + ":".join(f"{tag}0000"[i:i + 2] for i in range(0, 8, 2))


def _free_cidr() -> str:
    """A /16 in 10.128-254 that no route of this machine covers (several clusters may coexist)."""
    routes = _ip("-4", "route", "show", "table", "all").stdout
    taken = [ipaddress.ip_network(r.split()[0], strict=False) for r in routes.splitlines()
             if r and r.split()[0][0].isdigit()]
    for second in range(200, 255):
        candidate = ipaddress.ip_network(f"10.{second}.0.0/16")
        if not any(candidate.overlaps(t) for t in taken):
            return str(candidate)
    raise RuntimeError("no free 10.x.0.0/16 for a pod network")


class PodNetwork:
    def __init__(self, cidr: str | None = None) -> None:
        self.net = ipaddress.ip_network(cidr or _free_cidr())
        hosts = self.net.hosts()
        self.gateway = str(next(hosts))
        self._free = hosts
        self._tag = uuid.uuid4().hex[:6]
        self.bridge = f"hbr{self._tag}"
        self._lock = threading.Lock()
        self._namespaces: set[str] = set()

    def start(self) -> PodNetwork:
        _sweep_abandoned()
        OWNERS.mkdir(parents=True, exist_ok=True)
        (OWNERS / self._tag).write_text(str(os.getpid()))
        _ip("link", "add", self.bridge, "type", "bridge")
        # A bridge without an address of its own takes the lowest MAC of its ports, so adding
        # or removing a pod could change the gateway's MAC (the API server's address). Pods
        # then kept sending to the old one from their neighbour cache and every open
        # connection to the API server went silent for seconds (a device plugin's Allocate ran
        # past the kubelet's deadline when the scheduler's pod was replaced). Set, it stays.
        _ip("link", "set", self.bridge, "address", _bridge_mac(self._tag))
        _ip("addr", "add", f"{self.gateway}/{self.net.prefixlen}", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        _accept_bridge_traffic(self.bridge)
        return self

    def add_pod(self) -> tuple[str, str]:
        """A new network namespace with an address on the bridge: (namespace, pod IP)."""
        with self._lock:
            address = str(next(self._free))
            suffix = uuid.uuid4().hex[:8]
        namespace, host_end, pod_end = f"hp{self._tag}{suffix}", f"hv{suffix}", f"hp{suffix}"
        _ip("netns", "add", namespace)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", pod_end)
        _ip("link", "set", host_end, "master", self.bridge, "up")
        _ip("link", "set", pod_end, "netns", namespace)
        in_ns = ("-n", namespace)
        _ip(*in_ns, "link", "set", "lo", "up")
        _ip(*in_ns, "link", "set", pod_end, "name", "eth0")
        _ip(*in_ns, "addr", "add", f"{address}/{self.net.prefixlen}", "dev", "eth0")
        _ip(*in_ns, "link", "set", "eth0", "up")
        _ip(*in_ns, "route", "add", "default", "via", self.gateway)
        with self._lock:
            self._namespaces.add(namespace)
        return namespace, address

    def remove_pod(self, namespace: str) -> None:
        # Deleting the namespace deletes its veth end, and with it the host end.
        _ip("netns", "del", namespace, check=False)
        with self._lock:
            self._namespaces.discard(namespace)

    def stop(self) -> None:
        for namespace in list(self._namespaces):
            self.remove_pod(namespace)
        _ip("link", "del", self.bridge, check=False)
        _drop_bridge_rule(self.bridge)
        (OWNERS / self._tag).unlink(missing_ok=True)


# Which process owns which pod network: a run that was killed leaves its bridge and
# namespaces behind, and the next run removes those whose owner is gone.
OWNERS = Path("/run/hami-dcu-e2e")


def _sweep_abandoned() -> None:
    if not OWNERS.is_dir():
        return
    namespaces = _ip("netns", "list", check=False).stdout.split()
    for owner in OWNERS.iterdir():
        try:
            os.kill(int(owner.read_text()), 0)
            continue  # alive
        except (ProcessLookupError, ValueError):
            pass
        except PermissionError:
            continue
        tag = owner.name
        for namespace in namespaces:
            if namespace.startswith(f"hp{tag}"):
                _ip("netns", "del", namespace, check=False)
        _ip("link", "del", f"hbr{tag}", check=False)
        _drop_bridge_rule(f"hbr{tag}")
        owner.unlink(missing_ok=True)


def network_unavailable() -> str | None:
    """Why pod networking cannot be set up here (not root, no iproute2), or None."""
    import os
    import shutil

    if shutil.which("ip") is None:
        return "real cluster: the `ip` command (iproute2) is missing"
    if shutil.which("unshare") is None:
        return "real cluster: the `unshare` command (util-linux) is missing"
    if os.geteuid() != 0:
        return "real cluster: pod network namespaces need root"
    return None

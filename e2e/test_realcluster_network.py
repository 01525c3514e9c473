"""The real-cluster pod network keeps working under the firewall a running dockerd leaves.

dockerd sets the FORWARD policy to DROP and turns on bridge netfilter; the kind suite needs
dockerd, so both suites must pass on one machine in either order. This test applies the same
two settings itself (and restores them), so it needs no Docker.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.realcluster.network import PodNetwork, network_unavailable

pytestmark = pytest.mark.realcluster

BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def _forward_policy() -> str:
    listing = subprocess.run(["iptables", "-w", "-S", "FORWARD"], check=True, capture_output=True, text=True).stdout
    return listing.splitlines()[0].split()[-1]  # "-P FORWARD ACCEPT"


@pytest.fixture
def docker_like_firewall() -> Iterator[None]:
    reason = network_unavailable()
    if reason:
        pytest.skip(reason)
    if shutil.which("iptables") is None or not BRIDGE_NF.exists():
        pytest.skip("real cluster network: no iptables or no bridge netfilter on this kernel")
    policy, bridge_nf = _forward_policy(), BRIDGE_NF.read_text().strip()
    subprocess.run(["iptables", "-w", "-P", "FORWARD", "DROP"], check=True)
    BRIDGE_NF.write_text("1")
    try:
        yield
    finally:
        subprocess.run(["iptables", "-w", "-P", "FORWARD", policy], check=True)
        BRIDGE_NF.write_text(bridge_nf)


def _can_reach(from_namespace: str, address: str) -> bool:
    probe = ["ip", "netns", "exec", from_namespace, "ping", "-c", "1", "-W", "2", address]
    return subprocess.run(probe, capture_output=True).returncode == 0


def test_pods_reach_each_other_with_forward_drop_and_bridge_netfilter(docker_like_firewall: None) -> None:
    if shutil.which("ping") is None:
        pytest.skip("real cluster network: no ping")
    network = PodNetwork().start()
    try:
        first, _ = network.add_pod()
        _, second_ip = network.add_pod()
        assert _can_reach(first, second_ip), "pod-to-pod traffic dropped in FORWARD"
    finally:
        network.stop()
    rules = subprocess.run(["iptables", "-w", "-S", "FORWARD"], check=True, capture_output=True, text=True).stdout
    assert network.bridge not in rules, "the bridge's ACCEPT rule outlived its network"

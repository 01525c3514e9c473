"""The NUMA node of a card, as the kernel reports it: `<sys>/bus/pci/devices/<bus id>/numa_node`.

The SMI library does not say which NUMA node a card sits on, and HAMi's DCU plugin always
registered 0, so a `numa` card policy had nothing to work with. The kernel writes -1 when the
platform has no NUMA information (one node); that reads as node 0.
"""

from __future__ import annotations

from pathlib import Path

_MAX_CHARS = 16  # "-1\n", "3\n": anything longer is not a node number


def numa_node_path(sys_root: str | Path, pci_bus_id: str) -> Path:
    return Path(sys_root) / "bus" / "pci" / "devices" / pci_bus_id.lower() / "numa_node"


def read_numa_node(sys_root: str | Path, pci_bus_id: str) -> int | None:
    """The card's NUMA node (>= 0), or None when sysfs does not say (file missing or unreadable)."""
    try:
        text = numa_node_path(sys_root, pci_bus_id).read_text()[:_MAX_CHARS].strip()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        node = int(text)
    except ValueError:
        return None
    return max(node, 0)

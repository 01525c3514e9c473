"""The command-line flags both kubelet plugins take, and what they build from them: the SMI
backend and the cards this node serves. One definition, so `device-plugin` and `dra-driver`
cannot drift apart on where cards, device files and host directories are."""

from __future__ import annotations

import argparse
import logging
import os

from hami_dcu.common.io.connlimits import add_connection_arguments
from hami_dcu.common.io.flagtypes import optional_absolute_path
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.keys import Naming
from hami_dcu.node import layout
from hami_dcu.node.discovery import DcuCard, discover
from hami_dcu.node.faketree import lay_out
from hami_dcu.node.podresources import DEFAULT_SOCKET
from hami_dcu.node.smi import SAMPLE_MOCK_DEVICES, MockBackend, RsmiBackend, SmiBackend, SmiError

log = logging.getLogger(__name__)


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """The node's flags: which node, where its cards come from, the host paths a vDCU uses,
    slots per card, and the metrics port (with its connection limits) and the usage metrics'
    sources."""
    parser.add_argument("--node-name", default=os.environ.get("NODE_NAME"),
                        help="this node's name (default: $NODE_NAME, from the downward API)")
    parser.add_argument("--smi", choices=["rsmi", "mock"], default="rsmi",
                        help="where cards come from: ROCm SMI, or a mock YAML file (default %(default)s)")
    parser.add_argument("--mock-devices",
                        help="YAML list of mock cards (with --smi mock; default: the packaged 2 x K100_AI sample)")
    parser.add_argument("--mock-fake-tree", action="store_true",
                        help="with --smi mock: lay out fake /sys and /dev trees for the mock cards under "
                             "--sys-root/--dev-root (device files are /dev/null-like character devices)")
    parser.add_argument("--rsmi-library", default="librocm_smi64.so", help="ROCm SMI shared library")
    parser.add_argument("--vdev-dir", default="/usr/local/vgpu/dcu", help="host dir for the per-vDCU dirs")
    parser.add_argument("--etc-vdev", default="/etc/vdev", help="host dir for vdev<N>.conf (read by the exporter)")
    parser.add_argument("--dev-root", default="/dev", help="root of device files (fake tree in tests)")
    parser.add_argument("--sys-root", default="/sys", help="root of sysfs (fake tree in tests)")
    parser.add_argument("--driver-dir", default=os.environ.get("HYGONPATH", "/opt/dtk"),
                        help=f"DTK driver dir, mounted read-only at {layout.DRIVER_CONTAINER_DIR} "
                             "(default: $HYGONPATH or /opt/dtk)")
    parser.add_argument("--hyhal-dir", default="/opt/hyhal", help=f"hyhal dir, mounted read-only at {layout.HYHAL_DIR}")
    parser.add_argument("--slots-per-card", type=int, default=keys.DEFAULT_SLOTS_PER_CARD,
                        help="vDCU slots per card: at most this many shares of one card at once (default %(default)s)")
    parser.add_argument("--metrics-bind", default="",
                        help="serve Prometheus /metrics on HOST:PORT, per-pod usage included (default: off)")
    parser.add_argument("--pod-resources-socket", type=optional_absolute_path, default=DEFAULT_SOCKET,
                        help="the kubelet's pod resources socket: which container each vDCU and card serves, for "
                             "the usage metrics (empty: usage without namespace/pod/container; default %(default)s)")
    parser.add_argument("--hydmi-library", default="libhydmi.so",
                        help="Hygon's DMI library, for each vDCU's usage (with --metrics-bind and --smi rsmi)")
    add_connection_arguments(parser)


def make_backend(args: argparse.Namespace) -> SmiBackend:
    """The SMI backend the flags name: ROCm SMI, or the mock cards (the packaged sample by default)."""
    if args.smi == "mock":
        if not args.mock_devices:
            log.info("--smi mock without --mock-devices: using the sample %s", SAMPLE_MOCK_DEVICES)
        return MockBackend(args.mock_devices or SAMPLE_MOCK_DEVICES)
    return RsmiBackend(args.rsmi_library)


def served_cards(args: argparse.Namespace, backend: SmiBackend, naming: Naming) -> list[DcuCard]:
    """The cards this node serves, with ids in `naming`: those SMI reports whose device files
    are found by PCI bus id (a fake tree is laid out first when the flags ask for one). None
    at all is an SmiError: a plugin with no card has nothing to do."""
    cards = backend.cards()
    if args.smi == "mock" and args.mock_fake_tree:
        lay_out(cards, args.sys_root, args.dev_root, char_devices=os.geteuid() == 0)
    served = discover(cards, args.sys_root, args.dev_root, naming)
    if not served:
        raise SmiError(f"no DCU could be served on node {args.node_name} ({len(cards)} reported by SMI)")
    return served

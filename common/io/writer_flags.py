"""The command-line flags that name hami-dcu's own identities (common/protocol/writers.py), shared by
`hami-dcu webhook` and `hami-dcu scheduler` (which can serve the webhook)."""

from __future__ import annotations

import argparse

from hami_dcu.common.protocol.writers import Identities


def add_identity_arguments(parser: argparse.ArgumentParser) -> None:
    """Who may write allocation state (common/protocol/writers.py): without them, nobody may."""
    parser.add_argument("--scheduler-identity", action="append", default=None, metavar="USER",
                        help="username of hami-dcu's scheduler extender, e.g. "
                             "system:serviceaccount:kube-system:hami-dcu-scheduler (repeatable)")
    parser.add_argument("--device-plugin-identity", action="append", default=None, metavar="USER",
                        help="username of hami-dcu's device plugins (repeatable)")
    parser.add_argument("--volcano-identity", action="append", default=None, metavar="USER",
                        help="Volcano mode: username of Volcano's scheduler, which writes the allocation of the pods "
                             "it places, e.g. system:serviceaccount:volcano-system:volcano-scheduler (repeatable)")
    parser.add_argument("--node-lock-user", action="append", default=None, metavar="USER",
                        help="a further username allowed to write the node lock of a DCU node, e.g. HAMi's "
                             "scheduler where its devices and DCUs share a node (repeatable)")
    parser.add_argument("--node-lock-group", action="append", default=None, metavar="GROUP",
                        help="a further group allowed to write the node lock of a DCU node (repeatable)")


def identities_from(args: argparse.Namespace) -> Identities:
    """The identities of flags parsed by a parser add_identity_arguments filled."""
    return Identities(scheduler=frozenset(args.scheduler_identity or ()),
                      device_plugin=frozenset(args.device_plugin_identity or ()),
                      volcano=frozenset(args.volcano_identity or ()),
                      node_lock_users=frozenset(args.node_lock_user or ()),
                      node_lock_groups=frozenset(args.node_lock_group or ()))

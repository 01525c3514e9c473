"""The `hami-dcu` command: one subcommand per component, wiring only.

Each component owns its flags and its run function in `hami_dcu.<component>.command`
(`add_arguments(parser)` and `run(args) -> int`); this module only dispatches. A component
whose module is not there yet says so and exits 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from hami_dcu.common.logs import setup_logging

# gRPC's C core logs connection teardown at INFO on stderr; our own logs say what matters.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


@dataclass(frozen=True)
class Subcommand:
    name: str
    module: str
    summary: str


SUBCOMMANDS = (
    Subcommand("webhook", "hami_dcu.webhook.command",
               "mutating admission webhook: routes DCU pods to hami-scheduler, refuses what cannot work"),
    Subcommand("scheduler", "hami_dcu.scheduler.command",
               "kube-scheduler extender: /filter picks node and cards, /bind locks the node and binds"),
    Subcommand("device-plugin", "hami_dcu.deviceplugin.command",
               "kubelet device plugin: advertises vDCU slots, writes vdev files in Allocate"),
    Subcommand("certs", "hami_dcu.webhook.certs_command",
               "create or renew the webhook CA and serving certificate, inject the caBundle"),
    Subcommand("demo", "hami_dcu.e2e.demo",
               "run the local demo cluster with mock DCUs, schedule example pods, print the result"),
)


def _load(sub: Subcommand) -> ModuleType | None:
    try:
        return importlib.import_module(sub.module)
    except ModuleNotFoundError as exc:
        if exc.name and sub.module.startswith(exc.name):
            return None
        raise


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, ModuleType | None]]:
    parser = argparse.ArgumentParser(
        prog="hami-dcu",
        description="Fractional sharing of Hygon DCUs on Kubernetes (HAMi-compatible).",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules: dict[str, ModuleType | None] = {}
    for sub in SUBCOMMANDS:
        module = _load(sub)
        modules[sub.name] = module
        summary = sub.summary if module else f"{sub.summary} [not available yet]"
        sp = subparsers.add_parser(sub.name, help=summary, description=summary)
        sp.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else in-cluster config)")
        sp.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
        if module is not None:
            module.add_arguments(sp)
    return parser, modules


def main(argv: Sequence[str] | None = None) -> int:
    parser, modules = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    module = modules[args.command]
    if module is None:
        print(f"hami-dcu {args.command}: not available in this build yet", file=sys.stderr)
        return 2
    setup_logging(args.log_level)
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())

"""The `hami-dcu` command: one subcommand per component, wiring only.

Each component owns its flags and its run function in `hami_dcu.<component>.command`
(`add_arguments(parser)` and `run(args) -> int`); this module only dispatches. A component
whose module is not there yet says so and exits 2. Flag values that can be checked before
starting are (cli/startup.py); what goes wrong after is one line on stderr with an exit code
that means the same for every subcommand (cli/errors.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from hami_dcu.cli.errors import EXIT_USAGE, run_reporting, say
from hami_dcu.cli.startup import startup_problems
from hami_dcu.common.io.logs import setup_logging
from hami_dcu.common.io.version import installed_version
from hami_dcu.common.protocol import keys
from hami_dcu.common.protocol.errors import CliError

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
    Subcommand("dra-driver", "hami_dcu.dra.command",
               "kubelet DRA plugin (mode: dra): publishes a ResourceSlice, prepares vDCUs and CDI specs for claims"),
    Subcommand("token", "hami_dcu.scheduler.token_command",
               "keep the extender's ServiceAccount token fresh for it, in the scheduler pod"),
    Subcommand("certs", "hami_dcu.webhook.certs_command",
               "create or renew the webhook CA and serving certificate, inject the caBundle"),
    Subcommand("demo", "hami_dcu.cli.demo",
               "run the local demo cluster with mock DCUs, schedule example pods, print the result"),
    Subcommand("status", "hami_dcu.cli.status",
               "show what is used where: per node and card, slots, memory, cores, pods, locks"),
    Subcommand("cleanup", "hami_dcu.cli.cleanup",
               "remove what hami-dcu created outside the Helm release (certificate Secrets, node annotations)"),
)


class OneLineParser(argparse.ArgumentParser):
    """Usage mistakes in one line that names the problem and where help is, exit 2 (argparse
    prints the whole usage block first, which buries the message)."""

    def __init__(self, *args: typing.Any, **kwargs: typing.Any) -> None:
        super().__init__(*args, **kwargs)
        self.subcommand_parsers: dict[str, argparse.ArgumentParser] = {}

    def error(self, message: str) -> typing.NoReturn:
        say(self.prog, f"{message} (see {self.prog} --help)")
        raise SystemExit(EXIT_USAGE)

    def parse_command_line(self, args: Sequence[str] | None) -> argparse.Namespace:
        """parse_args, but unknown flags are the subcommand's mistake: said with its name
        and its --help (argparse blames the top-level command); the flags every subcommand
        has may also come before it (`hami-dcu --log-level debug status`)."""
        try:
            hoisted = hoist_common_flags(list(sys.argv[1:] if args is None else args))
        except MissingSubcommand as exc:
            self.error(f"{exc} must be followed by a subcommand, e.g. {self.prog} {exc} status")
        parsed, extras = self.parse_known_args(hoisted)
        if extras:
            command = getattr(parsed, "command", None)
            where = self.subcommand_parsers.get(command, self) if command else self
            where.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed


class MissingSubcommand(CliError, ValueError):
    """Common flags with no subcommand after them."""


# Flags every subcommand takes, each with one value.
COMMON_FLAGS = ("--kubeconfig", "--log-level", "--naming")


def hoist_common_flags(args: list[str]) -> list[str]:
    """Common flags written before the subcommand, moved after it, where they are defined."""
    leading: list[str] = []
    position = 0
    while position < len(args):
        arg = args[position]
        name = arg.split("=", 1)[0]
        if name not in COMMON_FLAGS:
            break
        if "=" in arg:
            leading.append(arg)
            position += 1
        else:
            leading.extend(args[position:position + 2])
            position += 2
    if not leading or (position < len(args) and args[position].startswith("-")):
        return args  # argparse says what is wrong
    if position >= len(args):
        raise MissingSubcommand(" ".join(leading))
    return [args[position], *leading, *args[position + 1:]]


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Shows each flag's default, unless its help already says it or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default in (None, False, "", argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


def version() -> str:
    return installed_version() or "unknown (not installed)"


def _load(sub: Subcommand) -> ModuleType | None:
    try:
        return importlib.import_module(sub.module)
    except ModuleNotFoundError as exc:
        if exc.name and sub.module.startswith(exc.name):
            return None
        raise


def build_parser(prog: str = "hami-dcu") -> tuple[OneLineParser, dict[str, ModuleType | None]]:
    parser = OneLineParser(
        prog=prog,
        description="Fractional sharing of Hygon DCUs on Kubernetes (HAMi-compatible).",
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules: dict[str, ModuleType | None] = {}
    for sub in SUBCOMMANDS:
        module = _load(sub)
        modules[sub.name] = module
        summary = sub.summary if module else f"{sub.summary} [not available yet]"
        sp = subparsers.add_parser(sub.name, help=summary, description=summary,
                                   formatter_class=DefaultsHelpFormatter)
        parser.subcommand_parsers[sub.name] = sp
        sp.add_argument("--kubeconfig", help="kubeconfig file (default, as kubectl: $KUBECONFIG, else ~/.kube/config, "
                             "else the in-cluster service account)")
        sp.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                        help="log verbosity; debug also shows the traceback of an unexpected error")
        sp.add_argument("--naming", default=keys.DCU_NAMING.name, choices=sorted(keys.NAMINGS),
                        help="naming set: dcu (HAMi v2.10: hygon.com/dcunum, hami.io/node-dcu-register, ...) or "
                             "hcu (HAMi master, Hygon's plugin v3: hygon.com/hcunum, ...); the same on every "
                             "component of a cluster")
        if module is not None:
            module.add_arguments(sp)
    return parser, modules


def main(argv: Sequence[str] | None = None, prog: str = "hami-dcu") -> int:
    parser, modules = build_parser(prog)
    args = parser.parse_command_line(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    where = f"{prog} {args.command}"
    module = modules[args.command]
    if module is None:
        say(where, "not available in this build yet")
        return EXIT_USAGE
    problems = startup_problems(args)
    if problems:
        for problem in problems:
            say(where, problem)
        return EXIT_USAGE
    setup_logging(args.log_level)
    # args.naming names the set; each subcommand looks it up (keys.naming_by_name) and hands the
    # Naming to what it builds: nothing reads it from a global.
    return run_reporting(where, lambda: int(module.run(args) or 0), debug=args.log_level == "debug")


if __name__ == "__main__":
    sys.exit(main())

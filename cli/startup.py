"""Checks every subcommand gets before it starts, so a mistake is one line, not a traceback
from deep inside a server (a port past 65535, a kubelet directory that is not there).

They key on the flag names the components use (`--bind`, `--metrics-bind`, `--plugin-dir`,
...), so a component gets them by naming its flags that way, without importing this module.
`bind_problem` is pure; `startup_problems` looks at the file system.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from hami_dcu.common.io.tls import pem_pair_problem

# Directories that must exist and that we read and write (the kubelet creates the plugin
# dir; if it is missing, the plugin is on the wrong path or the kubelet is not running).
EXISTING_DIRS = {"plugin_dir": "--plugin-dir"}
# Directories we create when missing: they, or their nearest existing parent, must be writable.
WRITABLE_DIRS = {"vdev_dir": "--vdev-dir", "etc_vdev": "--etc-vdev"}
READABLE_FILES = {"tls_cert": "--tls-cert", "tls_key": "--tls-key", "client_ca": "--client-ca",
                  "mock_devices": "--mock-devices"}
NO_NODE_NAME = "no node name: pass --node-name or set NODE_NAME (the downward API's spec.nodeName)"


@dataclass(frozen=True)
class ChartBound:
    """A flag's range, the same as the chart's schema gives the value behind it."""

    command: str
    flag: str
    value: str  # the chart value, as values.schema.json names it
    minimum: float
    maximum: float | None = None

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


# What the chart's values.schema.json refuses, refused alike on the command line, in helm's
# words ("minimum: got 0, want 1"); tests/cli checks the table against the schema.
CHART_BOUNDS = (
    ChartBound("device-plugin", "--slots-per-card", "devicePlugin.slotsPerCard", 1, 16),
    ChartBound("device-plugin", "--register-interval", "devicePlugin.registerIntervalSeconds", 5, 55),
    ChartBound("device-plugin", "--lock-timeout", "scheduler.lockTimeoutSeconds", 10),
    ChartBound("dra-driver", "--slots-per-card", "devicePlugin.slotsPerCard", 1, 16),
    ChartBound("dra-driver", "--register-interval", "draDriver.registerIntervalSeconds", 5, 300),
    ChartBound("scheduler", "--lock-timeout", "scheduler.lockTimeoutSeconds", 10),
    ChartBound("scheduler", "--lock-wait", "scheduler.lockWaitSeconds", 0),
)


def bind_problem(flag: str, value: str) -> str | None:
    """Why `value` is not a usable HOST:PORT for `flag`, or None."""
    host, sep, port = value.rpartition(":")
    if not sep or not port:
        return f"{flag} {value!r}: expected HOST:PORT, e.g. 0.0.0.0:9443"
    if not port.isdigit():
        return f"{flag} {value!r}: port {port!r} is not a number"
    if not 0 <= int(port) <= 65535:
        return f"{flag} {value!r}: port {port} is out of range (0-65535)"
    if host.startswith("[") != host.endswith("]"):
        return f"{flag} {value!r}: unbalanced brackets around the IPv6 address"
    return None


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def chart_bound_problems(args: argparse.Namespace) -> list[str]:
    """The flags the chart would refuse, in the words of the chart's schema and validation."""
    values = vars(args)
    problems = []
    for bound in CHART_BOUNDS:
        value = values.get(bound.dest)
        if bound.command != values.get("command") or not isinstance(value, int | float):
            continue
        if value < bound.minimum:
            problems.append(f"{bound.flag}: minimum: got {_number(value)}, want {_number(bound.minimum)} "
                            f"(as the chart's {bound.value})")
        elif bound.maximum is not None and value > bound.maximum:
            problems.append(f"{bound.flag}: maximum: got {_number(value)}, want {_number(bound.maximum)} "
                            f"(as the chart's {bound.value})")
    wait, timeout = values.get("lock_wait"), values.get("lock_timeout")
    if isinstance(wait, int | float) and isinstance(timeout, int | float) and wait >= timeout:
        # The same words as chart/templates/validate.yaml, with the flags' names.
        problems.append(f"--lock-wait ({_number(wait)}) must be below --lock-timeout ({_number(timeout)}): a node "
                        "lock older than --lock-timeout is taken over, so a bind never needs to wait longer; lower "
                        "--lock-wait or raise --lock-timeout")
    return problems


def startup_problems(args: argparse.Namespace) -> list[str]:
    """Every problem with the flags' values that can be seen before starting."""
    values = vars(args)
    problems = chart_bound_problems(args)
    if "node_name" in values and not values["node_name"]:
        problems.append(NO_NODE_NAME)
    for dest, value in values.items():
        if dest.endswith("bind") and isinstance(value, str) and value:
            problem = bind_problem(_flag(dest), value)
            if problem:
                problems.append(problem)
    for dest, flag in EXISTING_DIRS.items():
        if values.get(dest):
            problems.extend(_existing_dir_problem(flag, Path(values[dest])))
    for dest, flag in WRITABLE_DIRS.items():
        if values.get(dest):
            problems.extend(_writable_dir_problem(flag, Path(values[dest])))
    for dest, flag in READABLE_FILES.items():
        if values.get(dest):
            problems.extend(_readable_file_problem(flag, Path(values[dest])))
    cert, key = values.get("tls_cert"), values.get("tls_key")
    if cert and key and not problems:
        problem = pem_pair_problem(Path(cert), Path(key))
        if problem:
            problems.append(problem)
    problems.extend(volcano_problems(values))
    return problems


# Volcano's Hygon deviceshare drops a node whose handshake it stamped over 60 s ago: the
# plugin must write its own at least twice a minute.
VOLCANO_MAX_REGISTER_INTERVAL = 30.0


def volcano_problems(values: dict[str, object]) -> list[str]:
    """What Volcano mode (`--volcano-scheduler-name`) cannot work with (pure). Either naming
    set: the plugin reports its set's memory and cores in node status, all upstream Volcano's
    fit reads; that Hygon's fork reads only the hcu set is the chart's rule (validate.yaml),
    where it is known which Volcano runs."""
    if not values.get("volcano_scheduler_name"):
        return []
    problems = []
    interval = values.get("register_interval")
    if isinstance(interval, int | float) and interval > VOLCANO_MAX_REGISTER_INTERVAL:
        problems.append(f"--register-interval {interval:g}: Volcano drops a node whose handshake is older than "
                        f"60 s; at most {VOLCANO_MAX_REGISTER_INTERVAL:g} in Volcano mode")
    return problems


def _existing_dir_problem(flag: str, path: Path) -> list[str]:
    if not path.exists():
        return [f"{flag} {path}: no such directory (is the kubelet running on this node, with this root dir?)"]
    if not path.is_dir():
        return [f"{flag} {path}: not a directory"]
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        return [f"{flag} {path}: not readable and writable by this process (uid {os.geteuid()})"]
    return []


def _writable_dir_problem(flag: str, path: Path) -> list[str]:
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return [f"{flag} {path}: {existing} is not a directory"]
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "" if existing == path else f" (its parent {existing}, where it would be created)"
        return [f"{flag} {path}: not writable by this process (uid {os.geteuid()}){what}"]
    return []


def _readable_file_problem(flag: str, path: Path) -> list[str]:
    if not path.exists():
        return [f"{flag} {path}: no such file"]
    if not path.is_file():
        return [f"{flag} {path}: not a file"]
    if not os.access(path, os.R_OK):
        return [f"{flag} {path}: not readable by this process (uid {os.geteuid()})"]
    return []

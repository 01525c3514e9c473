"""argparse types for the numbers and paths every subcommand's flags take, so a flag that must
be above 0 refuses 0 the same way everywhere: `argument --resync: '0': expected seconds above 0`,
one line, exit 2 (cli/main.py), instead of a loop that spins or a timer that never fires."""

from __future__ import annotations

import argparse
import math
import os


def positive_seconds(value: str) -> float:
    """A number of seconds above 0 (and finite): an interval, a timeout."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not number > 0 or math.isinf(number):
        raise argparse.ArgumentTypeError(f"{value!r}: expected seconds above 0")
    return number


def positive_int(value: str) -> int:
    """A whole number of at least 1: a count, a cap."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: expected at least 1")
    return number


def absolute_path(value: str) -> str:
    """A path made absolute against the working directory. For the kubelet's socket
    directories: gRPC reads `unix://pd/x` as the absolute `/pd/x`, and the kubelet is told
    the socket's path, which means nothing to it relative to our working directory."""
    if not value:
        raise argparse.ArgumentTypeError("expected a path, not an empty one")
    return os.path.abspath(value)


def optional_absolute_path(value: str) -> str:
    """`absolute_path`, or "" where an empty value turns the feature off."""
    return absolute_path(value) if value else ""

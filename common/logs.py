"""Logging setup shared by every subcommand: one line per record, UTC timestamps."""

from __future__ import annotations

import logging
import time


def setup_logging(level: str = "info") -> None:
    handler = logging.StreamHandler()
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

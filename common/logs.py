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
    # urllib3 warns on every retry it makes; our callers retry and log the failure themselves,
    # naming the pod or node, so its lines are only noise (and two per failed call).
    if root.level > logging.DEBUG:
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)

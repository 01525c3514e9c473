"""Logging setup shared by every subcommand: one line per record, UTC timestamps."""

from __future__ import annotations

import logging
import time

from hami_dcu.common.protocol.untrusted import escape_controls

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class UtcFormatter(logging.Formatter):
    """FORMAT with a UTC timestamp, rendered once per second rather than once per line: a
    webhook logs every review, and strftime was a third of each line's cost."""

    def __init__(self) -> None:
        super().__init__(FORMAT)
        self._stamped: tuple[int, str] = (-1, "")  # one attribute: threads never see half an update

    def formatMessage(self, record: logging.LogRecord) -> str:
        # One record, one line: a value a tenant wrote (an annotation, a name admission has not
        # validated yet) that slipped past common/protocol/untrusted.shown cannot forge a second line or
        # drive the reader's terminal. A traceback is appended after this, on lines of its own.
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        stamped = self._stamped
        if stamped[0] != second:
            stamped = self._stamped = (second, time.strftime(TIME_FORMAT, time.gmtime(second)))
        return stamped[1]


def setup_logging(level: str = "info") -> None:
    # The format names no thread, process or source line: skip collecting them per record
    # (findCaller walks the stack on every call).
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None  # the documented way to skip findCaller
    handler = logging.StreamHandler()
    handler.setFormatter(UtcFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # urllib3 warns on every retry it makes; our callers retry and log the failure themselves,
    # naming the pod or node, so its lines are only noise (and two per failed call).
    if root.level > logging.DEBUG:
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)

"""Log lines: `<UTC time> <LEVEL> <logger>: <message>`, the timestamp right at every second."""

from __future__ import annotations

import logging

from hami_dcu.common.io.logs import UtcFormatter


def record(created: float, message: str = "pod default/p: allowed") -> logging.LogRecord:
    rec = logging.LogRecord("hami_dcu.webhook.server", logging.INFO, __file__, 1, message, None, None)
    rec.created = created
    return rec


def test_a_line_names_the_utc_time_level_logger_and_message():
    line = UtcFormatter().format(record(1_795_000_000.25))
    assert line == "2026-11-18T11:06:40Z INFO hami_dcu.webhook.server: pod default/p: allowed"


def test_the_timestamp_follows_each_second_and_back():
    formatter = UtcFormatter()
    stamps = [formatter.format(record(t)).split()[0] for t in (1_795_000_000.1, 1_795_000_000.9, 1_795_000_001.0,
                                                                1_795_000_000.5)]
    assert stamps == ["2026-11-18T11:06:40Z", "2026-11-18T11:06:40Z", "2026-11-18T11:06:41Z", "2026-11-18T11:06:40Z"]


def test_an_exception_is_still_rendered_after_the_line():
    formatter = UtcFormatter()
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        rec = record(1_795_000_000.0)
        rec.exc_info = sys.exc_info()
    lines = formatter.format(rec).splitlines()
    assert lines[0].endswith("pod default/p: allowed") and lines[-1] == "ValueError: boom"


def test_a_forged_line_and_a_terminal_escape_stay_inside_one_line():
    # A tenant's annotation value logged as it came: a newline would forge a second record, an
    # OSC sequence would retitle the reader's terminal.
    forged = "K100\n2026-11-18T11:06:40Z INFO hami_dcu.scheduler: pod x bound\x1b]0;pwned\x07"
    line = UtcFormatter().format(record(1_795_000_000.0, f"pod default/p: type {forged}"))
    assert len(line.splitlines()) == 1
    assert "\x1b" not in line and "\x07" not in line
    assert line.endswith("type K100\\n2026-11-18T11:06:40Z INFO hami_dcu.scheduler: pod x bound\\x1b]0;pwned\\x07")

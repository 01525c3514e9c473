"""Tenant-written text made safe to show: in a log line, an Event, a failure reason, a terminal.

Annotation values (`use-dcutype`, `device-scoring-weights`, policy words) and other strings a
pod's author writes are copied into messages that operators read with `kubectl logs`,
`kubectl describe` and `hami-dcu status`. A newline there forges a log line of the author's
choosing; an ANSI or OSC escape rewrites the reader's terminal (its title, its colours, the
lines above). So every such value passes through `shown`: each control or formatting
character (Unicode categories C* and the line and paragraph separators) becomes a visible
escape (`\\n`, `\\x1b`, `\\u202e`), and the value is cut to a length that keeps a message
readable and an Event within bounds. Pure.
"""

from __future__ import annotations

import unicodedata

DEFAULT_LIMIT = 64
ELLIPSIS = "..."
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _unsafe(char: str) -> bool:
    # isprintable() is False for every category C* and Z* character but the ASCII space;
    # other spaces (U+00A0...) are harmless, so only C*, Zl and Zp are escaped.
    return not char.isprintable() and (unicodedata.category(char)[0] == "C" or char in "\u2028\u2029")


def shown(value: object, limit: int = DEFAULT_LIMIT) -> str:
    """`value` as text with control characters escaped, at most `limit` characters long
    (plus "..." when it was cut). An escape is never cut in half."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit and text.isprintable():
        return text  # the common case: a word like "K100_AI"
    out: list[str] = []
    length = 0
    for char in text:
        piece = _escaped(char) if _unsafe(char) else char
        if length + len(piece) > limit:
            out.append(ELLIPSIS)
            break
        out.append(piece)
        length += len(piece)
    return "".join(out)


def escape_controls(text: str) -> str:
    """`text` with control characters escaped and nothing cut: for a whole message assembled
    from our own words and values already `shown` (the log formatter's last line of defence)."""
    if text.isprintable():
        return text
    return "".join(_escaped(char) if _unsafe(char) else char for char in text)

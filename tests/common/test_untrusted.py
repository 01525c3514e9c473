"""common/protocol/untrusted.shown: what a tenant wrote, made safe for logs, Events and terminals."""

from __future__ import annotations

import pytest

from hami_dcu.common.protocol.untrusted import ELLIPSIS, escape_controls, shown


def test_a_plain_word_is_shown_as_written():
    assert shown("K100_AI") == "K100_AI"
    assert shown("слот, 卡") == "слот, 卡"  # printable non-ASCII is no threat


@pytest.mark.parametrize(("raw", "expected"), [
    ("a\nb", "a\\nb"),
    ("a\r\nb", "a\\r\\nb"),
    ("\x1b[2J\x1b]0;title\x07", "\\x1b[2J\\x1b]0;title\\x07"),
    ("\x9b31m", "\\x9b31m"),  # the 8-bit CSI
    ("abc\u202edcb", "abc\\u202edcb"),  # right-to-left override: reorders what the reader sees
    ("line\u2028sep", "line\\u2028sep"),
    ("nul\x00", "nul\\x00"),
])
def test_control_and_format_characters_are_escaped(raw, expected):
    assert shown(raw) == expected


def test_a_long_value_is_capped_and_marked():
    assert shown("x" * 1000) == "x" * 64 + ELLIPSIS
    assert shown("x" * 1000, limit=10) == "x" * 10 + ELLIPSIS
    assert shown("x" * 64) == "x" * 64


def test_an_escape_is_never_cut_in_half():
    text = shown("abcdefgh\x1b", limit=10)
    assert text == "abcdefgh" + ELLIPSIS  # "\x1b" needs 4 characters, 2 were left


def test_non_strings_are_shown_as_their_text():
    assert shown(42) == "42"


def test_escape_controls_cuts_nothing():
    assert escape_controls("ok") == "ok"
    assert escape_controls("a\nb" * 100) == "a\\nb" * 100

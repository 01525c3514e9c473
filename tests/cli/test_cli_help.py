"""`--help` explains every flag of every subcommand and shows its default."""

import argparse

import pytest

from hami_dcu.cli.main import build_parser

PARSER, _ = build_parser()


@pytest.mark.parametrize("command", sorted(PARSER.subcommand_parsers))
def test_every_flag_is_explained_with_its_default(command):
    parser = PARSER.subcommand_parsers[command]
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue
        text = formatter._expand_help(action) if action.help else ""
        assert text, f"{command} {action.option_strings[-1]}: no help"
        if action.default not in (None, False, "", [], argparse.SUPPRESS):
            assert "default" in text, f"{command} {action.option_strings[-1]}: default {action.default!r} not shown"

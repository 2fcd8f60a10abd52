"""Every `parasim` parser: no abbreviated options (issue 28: `search --tp` was taken as
`--tp-comm-overlap` and changed the chosen layout) and a help text for every option."""

import argparse

import pytest

from simulator.cli import build_parser, main


def parsers(parser=None, name="parasim"):
    parser = parser or build_parser()
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from parsers(sub, f"{name} {sub_name}")


PARSERS = list(parsers())


def test_every_command_is_walked():
    names = {n for n, _ in PARSERS}
    assert {"parasim train", "parasim search", "parasim lesson grade", "parasim checkpoint convert"} <= names


@pytest.mark.parametrize("name,parser", PARSERS, ids=[n for n, _ in PARSERS])
def test_no_abbreviations_and_every_option_explained(name, parser):
    assert parser.allow_abbrev is False
    silent = [a.option_strings[0] for a in parser._actions if a.option_strings and not a.help]
    assert not silent, f"{name}: options without help text: {silent}"


@pytest.mark.parametrize("argv,flag", [(["simulate", "--model", "gpt3-1.3b", "--gpus", "8", "--tp-comm"], "--tp-comm"),
                                       (["train", "--strat", "dp"], "--strat"),
                                       (["memory", "--param", "7.5B"], "--param")])
def test_a_prefix_of_an_option_is_refused(argv, flag, capsys):
    try:
        code = main(argv)
    except SystemExit as refused:   # argparse's own refusal (one line, exit 2: cli._Parser.error)
        code = refused.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and flag in err and len(err.strip().splitlines()) == 1

"""`parasim`: the command-line entry point. Routes to the modules in simulator/commands.

Bad input is refused with one line (`error: ...`, exit 2), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from . import commands
from .errors import ParasimError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as for every other refusal
        self.exit(2, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="parasim", description="See how parallel strategies train large models.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{info.name}").add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:   # commands that take Megatron-LM's flags (`megatron_flags`) parse the rest themselves
        if not getattr(args, "megatron_flags", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.megatron_argv = extra
    if not getattr(args, "func", None):
        parser.print_help()
        return 1
    try:
        return int(args.func(args) or 0)
    except ParasimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `parasim ... | head`: the reader left; say nothing more
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())

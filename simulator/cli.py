"""`parasim`: the command-line entry point. Routes to the modules in simulator/commands.

Bad input is refused with one line (`error: ...`, exit 2), never a traceback: a ParasimError, a
file that cannot be read or written (OSError) and exhausted memory are all reported that way; a
device that died in a run without fault tolerance exits 1 with one line. `parasim ... | head`
(a reader that left, BrokenPipeError) ends quietly with 0.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from . import commands
from .errors import DeviceFailure, ParasimError


class _Parser(argparse.ArgumentParser):
    """Every parasim parser: no abbreviated options (`--tp` must never be taken as a prefix of
    `--tp-comm-overlap`), and a refusal is one line with exit code 2."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message):  # one line, exit 2, as for every other refusal
        self.exit(2, f"error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="parasim", description="See how parallel strategies train large models.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{commands.__name__}.{info.name}").add_parser(sub)
    return parser


# Options naming a file a command writes at the end of its work: checked before the work starts.
OUTPUT_FILE_OPTIONS = ("trace", "csv", "output")


def check_output_files(args) -> None:
    """Refuse up front an output file that cannot be written (empty name, a folder, a missing or
    read-only parent folder), so a long run does not fail at its very end."""
    for name in OUTPUT_FILE_OPTIONS:
        path = getattr(args, name, None)
        if path is None or not isinstance(path, str):
            continue
        flag = "--" + name
        if not path.strip():
            raise ParasimError(f"{flag} needs a file name, got an empty string")
        if os.path.isdir(path):
            raise ParasimError(f"{flag} {path} is a folder, not a file")
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise ParasimError(f"{flag} {path}: folder {parent} does not exist")
        if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
            raise ParasimError(f"{flag} {path}: not writable")


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
        check_output_files(args)
        return int(args.func(args) or 0)
    except ParasimError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except DeviceFailure as e:  # a real device (actor) death in a run without fault tolerance
        print(f"error: {e} (no fault tolerance in this run: add --checkpoint-every K to recover)", file=sys.stderr)
        return 1
    except MemoryError:
        print("error: this machine ran out of memory for the requested sizes; shrink them", file=sys.stderr)
        return 2
    except OSError as e:  # a file the user named: unwritable, missing, a folder, a full disk
        if isinstance(e, BrokenPipeError):
            sys.stderr.close()
            return 0
        where = f" {e.filename}" if e.filename else ""
        print(f"error: cannot use{where}: {e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

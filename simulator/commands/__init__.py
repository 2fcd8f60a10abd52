"""CLI subcommands: every module here exposes `add_parser(subparsers)` and `run(args) -> int`."""

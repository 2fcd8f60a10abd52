"""What parasim does with every Megatron-LM flag: the one table, `megatron_flags.txt`.

Each row is `name | effect | reason`. The effect is one of:
- `priced`: the flag changes the price. Its type and default are in `megatron_args.FLAGS`.
- `refused`: it changes time or memory and is not priced. Giving it is refused with the reason.
- `none`: it has no effect on the time or memory of a training step. It is accepted and listed
  as ignored.

tests/test_cost_megatron_flag_table.py checks that every name is classified and that the
`priced` rows are exactly the flags `megatron_args` types.
"""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from simulator.errors import ParasimError

EFFECTS = ("priced", "refused", "none")
TABLE_PATH = Path(__file__).with_name("megatron_flags.txt")


def _load() -> dict[str, tuple[str, str]]:
    rows: dict[str, tuple[str, str]] = {}
    for n, line in enumerate(TABLE_PATH.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        cells = [c.strip() for c in line.split("|")]
        name, effect, reason = cells[0], cells[1] if len(cells) > 1 else "", cells[2] if len(cells) > 2 else ""
        if effect not in EFFECTS or (effect == "refused" and not reason) or name in rows:
            raise ParasimError(f"{TABLE_PATH.name} line {n}: {line!r} is not 'name | priced|refused|none | reason' "
                               "(a refused flag needs its reason; each name once)")
        rows[name] = (effect, reason)
    return rows


FLAG_EFFECTS = MappingProxyType(_load())   # flag (without --) -> (effect, reason)
PRICED = frozenset(n for n, (e, _r) in FLAG_EFFECTS.items() if e == "priced")


def refusal(flag: str) -> str | None:
    """The reason `--flag` is refused (None when it is priced or has no effect)."""
    effect, reason = FLAG_EFFECTS.get(flag, ("none", ""))
    return reason if effect == "refused" else None

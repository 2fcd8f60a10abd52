"""What a device holds: its named tensors, with the bytes held per memory category kept up to date.

The definition of a device's memory is the recount `Device.bytes_by_category`: every tensor it
holds, by the category of its name (`category_of`), `nbytes_of` each. A device samples it after
every instruction, and recounting every tensor each time was most of a small training run's time
(bench/bench_holdings.py, 3 December 2026: the Context page's run on 8 devices 0.72 s with the
recount, 0.25 s with the running totals; a 4-device data-parallel run 1.31 s and 0.99 s). `Holdings` is a
dict of the tensors that adds a tensor's bytes to its category when the tensor is stored and
takes them away when it is replaced or dropped, so a sample costs one copy of five numbers.
Numpy arrays never change size in place, so the totals stay the recount's;
tests/test_holdings.py checks them against the recount after every instruction of every strategy.
"""

from __future__ import annotations

from ..units import nbytes_of

CATEGORIES = ("param", "grad", "opt", "act", "other")


def category_of(name: str) -> str:
    """'param/w1' -> 'param'; names without a known prefix count as 'other'."""
    head = name.split("/", 1)[0]
    return head if head in CATEGORIES[:-1] and "/" in name else "other"


class Holdings(dict):
    """name -> tensor, and `totals`: category -> bytes of the tensors held (module docstring).
    Every way a dict changes goes through `__setitem__` or `_drop`."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self._sizes: dict[str, tuple[str, int]] = {}
        self.totals = dict.fromkeys(CATEGORIES, 0)
        self.update(*args, **kwargs)

    def __setitem__(self, name: str, value) -> None:
        if name in self._sizes:
            self._drop(name)
        super().__setitem__(name, value)
        category, nbytes = category_of(name), nbytes_of(value)
        self._sizes[name] = (category, nbytes)
        self.totals[category] += nbytes

    def _drop(self, name: str) -> None:
        category, nbytes = self._sizes.pop(name)
        self.totals[category] -= nbytes

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self._drop(name)

    def pop(self, name: str, *default):
        if name in self:
            self._drop(name)
            return super().pop(name)
        if default:
            return default[0]
        raise KeyError(name)

    def popitem(self):
        name, value = super().popitem()
        self._drop(name)
        return name, value

    def clear(self) -> None:
        super().clear()
        self._sizes.clear()
        self.totals = dict.fromkeys(CATEGORIES, 0)

    def update(self, *args, **kwargs) -> None:
        for name, value in dict(*args, **kwargs).items():
            self[name] = value

    def setdefault(self, name: str, value=None):
        if name not in self:
            self[name] = value
        return self[name]

    def __ior__(self, other):
        self.update(other)
        return self

    def __reduce__(self):   # pickle and copy rebuild it from its items (dict's way would set items first)
        return (Holdings, (dict(self),))

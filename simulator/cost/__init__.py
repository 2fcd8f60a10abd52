"""Cost models: analytic estimates, the paper simulator, hardware presets, search.

Result types keep their per-kind tables read-only (`types.MappingProxyType`). Registered here,
such a table pickles and deep-copies as its contents, so `dataclasses.asdict`, `copy.deepcopy`
and `pickle` work on every result (they failed with "cannot pickle 'mappingproxy' object").
"""

import copyreg
from types import MappingProxyType


def read_only(mapping) -> MappingProxyType:
    """A read-only view of a new dict of `mapping` (how results keep their tables)."""
    return MappingProxyType(dict(mapping))


copyreg.pickle(MappingProxyType, lambda m: (read_only, (dict(m),)))

"""Values as data between the grader and a sandbox: what a submission's function returns, and the
arguments a check passes to it (both directions are JSON; nothing is unpickled).

The sandboxed process encodes a return value with `to_data` into JSON-able data; the grader
decodes it with `from_data` into plain data only: numbers, strings, lists, tuples, sets, dicts,
numeric numpy arrays and scalars. A parasim object the submission returned (a dataclass, named
tuple, enum of a module under `simulator.`) arrives as a `Record`: the name of its class, as text,
and its fields as plain data. The grader never imports a module or runs a constructor named in a
frame; a check that wants the object asks for it by class (`rebuild(value, ParallelConfig)`: the
check names the class) or hands the record to a probe sandbox (`probes.py`). Only inside a sandbox
(`classes()`, the runner decoding what the grader sent) are parasim objects rebuilt from data.
Anything else is refused with a one-line reason. Inside a parasim object, an attribute that
cannot travel (a function, a runtime handle, a non-dataclass object) arrives as None.
"""

from __future__ import annotations

import base64
import contextlib
import contextvars
import dataclasses
import enum
import importlib
import math
import sys
from pathlib import PurePath
from types import MappingProxyType

import numpy as np

MAX_DEPTH = 64
_NUMERIC = "biufc"


class DataError(TypeError):
    """A value that cannot travel as data (the message names its type)."""


_TRUSTED = contextvars.ContextVar("parasim_codec_trusted", default=None)
_CLASSES = contextvars.ContextVar("parasim_codec_classes", default=False)


@contextlib.contextmanager
def classes():
    """Decode parasim objects as objects of their class (importing the named module): only in a
    sandbox, for the data the grader sent it. The grader itself never enters this."""
    token, memo = _CLASSES.set(True), _TRUSTED.set({"ids": {}, "keep": [], "objs": {}})
    try:
        yield
    finally:
        _CLASSES.reset(token)
        _TRUSTED.reset(memo)


class Record:
    """A parasim object a sandbox sent, as plain data: `type_name` (its class's name, text only)
    and `fields`; attribute access reads the fields. It travels back out unchanged (`to_data`)."""

    __slots__ = ("path", "fields", "raw")

    def __init__(self, path: str, fields: dict, raw: dict):
        self.path, self.fields, self.raw = path, fields, raw

    @property
    def type_name(self) -> str:
        return self.path.rpartition(":")[2].rpartition(".")[2]

    def __getattr__(self, name):
        if name in Record.__slots__:
            raise AttributeError(name)
        try:
            return self.fields[name]
        except KeyError:
            raise AttributeError(f"a {self.type_name} has no field {name!r}") from None

    def __eq__(self, other):
        return isinstance(other, Record) and (self.path, self.fields) == (other.path, other.fields)

    __hash__ = None

    def __repr__(self):
        return f"{self.type_name}(" + ", ".join(f"{k}={v!r}" for k, v in self.fields.items()) + ")"


def type_name(value) -> str:
    """The class name of a value or of a `Record` (what a check compares instead of `type(x)`)."""
    return value.type_name if isinstance(value, Record) else type(value).__name__


def rebuild(value, cls):
    """The parasim dataclass `cls` (named by the check, never by the data) built by its own
    constructor from a `Record` of that class; DataError for anything else."""
    if isinstance(value, cls):       # graded in-process: the object itself
        return value
    if not isinstance(value, Record) or value.path != _class_path(cls) or not dataclasses.is_dataclass(cls):
        raise DataError(f"a {cls.__name__} was expected, got {type_name(value)}")
    init = {f.name for f in dataclasses.fields(cls) if f.init}   # attributes it derives are derived again
    return cls(**{k: v for k, v in value.fields.items() if k in init})


def finite(value, depth: int = 0) -> bool:
    """No NaN or infinity anywhere in `value` (plain data or a Record)."""
    if depth > MAX_DEPTH:
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, np.ndarray | np.generic):
        return not np.asarray(value).dtype.kind in "fc" or bool(np.all(np.isfinite(value)))
    if isinstance(value, dict):
        return all(finite(k, depth + 1) and finite(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(finite(v, depth + 1) for v in value)
    if isinstance(value, Record):
        return finite(value.fields, depth + 1)
    return True


@contextlib.contextmanager
def trusted():
    """Values of the grader itself (the arguments a check passes to the sandbox, what the check's
    callbacks return): inside, any parasim object with attributes (a `Network` a check built, not
    only a dataclass) travels as its attributes and is rebuilt without running its constructor;
    an object met again (a tensor's `net` pointing back at its network) travels as a reference.
    Never used for what a submission sends to the grader."""
    token = _TRUSTED.set({"ids": {}, "keep": [], "objs": {}})
    try:
        yield
    finally:
        _TRUSTED.reset(token)


def _trusted_object(obj, depth: int) -> dict:
    """A parasim object's attributes, or a reference to it if this value already holds it."""
    memo = _TRUSTED.get()
    n = memo["ids"].get(id(obj))
    if n is not None:
        return {"$": "ref", "i": n}
    n = memo["ids"][id(obj)] = len(memo["keep"])
    memo["keep"].append(obj)          # alive until the end: its id is not reused
    return {"$": "obj", "cls": _class_path(type(obj)), "id": n,
            "d": {k: _attr(v, depth) for k, v in vars(obj).items()}}


def _trusted_ref(data: dict):
    memo = _TRUSTED.get()
    if memo is None or data.get("i") not in memo["objs"]:
        raise DataError("unexpected data kind 'ref'")
    return memo["objs"][data["i"]]


def _class_path(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _parasim_class(cls) -> bool:
    return cls.__module__ == "simulator" or cls.__module__.startswith("simulator.")


def to_data(obj, depth: int = 0):
    """JSON-able data for `obj` (see the module docstring for what may travel)."""
    if depth > MAX_DEPTH:
        raise DataError(f"a value nested deeper than {MAX_DEPTH} levels")
    enc = lambda x: to_data(x, depth + 1)
    if obj is None or isinstance(obj, (bool, int, str)) and type(obj) in (bool, int, str):
        return obj
    if type(obj) is Record:
        return obj.raw
    if type(obj) is float:
        return obj if math.isfinite(obj) else {"$": "float", "v": repr(obj)}
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in _NUMERIC:
            raise DataError(f"a numpy array of dtype {obj.dtype} (only numbers travel)")
        arr = np.ascontiguousarray(obj)
        return {"$": "nd", "dtype": arr.dtype.str, "shape": list(arr.shape),
                "b64": base64.b64encode(arr.tobytes()).decode("ascii")}
    if isinstance(obj, np.generic):
        return {"$": "nd0", "dtype": obj.dtype.str, "v": to_data(obj.item(), depth + 1)}
    if isinstance(obj, enum.Enum) and _parasim_class(type(obj)):
        return {"$": "enum", "cls": _class_path(type(obj)), "v": enc(obj.value)}
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, (dict, MappingProxyType)):
        return {"$": "dict", "v": [[enc(k), enc(v)] for k, v in obj.items()]}
    if isinstance(obj, tuple) and type(obj) is not tuple and _parasim_class(type(obj)):  # a NamedTuple
        return {"$": "nt", "cls": _class_path(type(obj)), "v": [enc(x) for x in obj]}
    if isinstance(obj, (list, tuple, set, frozenset)):
        kind = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}.get(type(obj))
        if kind is None:
            raise DataError(f"a {type(obj).__name__} (a subclass of {type(obj).__mro__[1].__name__})")
        return {"$": kind, "v": [enc(x) for x in obj]}
    return _object_to_data(obj, depth)


def _object_to_data(obj, depth: int):
    """A parasim dataclass (or, when `trusted`, any parasim object with attributes)."""
    cls = type(obj)
    if _parasim_class(cls) and hasattr(obj, "__dict__") and not isinstance(obj, type):
        if _TRUSTED.get() is not None:
            return _trusted_object(obj, depth)
        if dataclasses.is_dataclass(obj):
            return {"$": "obj", "cls": _class_path(cls), "d": {k: _attr(v, depth) for k, v in vars(obj).items()}}
    if _parasim_class(cls) and dataclasses.is_dataclass(obj):
        return {"$": "dc", "cls": _class_path(cls),
                "f": {f.name: _attr(getattr(obj, f.name), depth) for f in dataclasses.fields(obj)}}
    raise DataError(f"a {cls.__module__}.{cls.__qualname__} (return numbers, strings, lists, dicts, "
                    "numpy arrays or parasim objects)")


def _attr(value, depth: int):
    """An attribute of a parasim object: one that cannot travel (a function, a runtime handle)
    arrives as None; the object's data still does."""
    try:
        return to_data(value, depth + 1)
    except DataError:
        return None


def _parasim_type(path: str):
    module, _, qualname = str(path).partition(":")
    if not (module == "simulator" or module.startswith("simulator.")) or not qualname:
        raise DataError(f"class {path!r} is not one of parasim's")
    mod = sys.modules.get(module) or importlib.import_module(module)
    obj = mod
    for part in qualname.split("."):
        if part.startswith("_") and part != qualname.split(".")[-1] or part == "<locals>":
            raise DataError(f"class {path!r} is not one of parasim's")
        obj = getattr(obj, part, None)
    if not isinstance(obj, type) or obj.__module__ != module:
        raise DataError(f"class {path!r} is not one of parasim's")
    return obj


def from_data(data, depth: int = 0):
    """Rebuild what `to_data` encoded. Runs only parasim's own constructors."""
    if depth > MAX_DEPTH:
        raise DataError(f"data nested deeper than {MAX_DEPTH} levels")
    dec = lambda x: from_data(x, depth + 1)
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:  # plain JSON lists only appear inside encoded containers
        return [dec(x) for x in data]
    if type(data) is not dict or "$" not in data:
        raise DataError(f"unexpected data {type(data).__name__}")
    kind = data["$"]
    if kind in ("dc", "obj", "nt", "enum", "ref") and not _CLASSES.get():
        return _record(data, kind, dec)
    if kind == "ref":
        return _trusted_ref(data)
    if kind == "float":
        return float(data["v"]) if data["v"] in ("nan", "inf", "-inf") else 0.0
    if kind in ("list", "tuple", "set", "frozenset"):
        items = [dec(x) for x in data["v"]]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
    if kind == "dict":
        return {_hashable(dec(k)): dec(v) for k, v in data["v"]}
    if kind in ("nd", "nd0"):
        return _array_from_data(data, kind, dec)
    return _object_from_data(data, kind, dec)


def _array_from_data(data: dict, kind: str, dec):
    """A numpy array ("nd") or scalar ("nd0") of a numeric dtype."""
    dtype = np.dtype(str(data["dtype"]))
    if dtype.kind not in _NUMERIC:
        raise DataError(f"dtype {dtype} is not numeric")
    if kind == "nd0":
        return dtype.type(dec(data["v"]))
    shape = tuple(int(n) for n in data["shape"])
    raw = base64.b64decode(data["b64"])
    if len(raw) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        raise DataError("array data does not match its shape")
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def _object_from_data(data: dict, kind: str, dec):
    """A parasim NamedTuple, enum or dataclass, rebuilt by its own class."""
    cls = _parasim_type(data.get("cls", ""))
    if kind == "nt" and issubclass(cls, tuple):
        return cls(*[dec(x) for x in data["v"]])
    if kind == "enum" and issubclass(cls, enum.Enum):
        return cls(dec(data["v"]))
    if kind == "dc" and dataclasses.is_dataclass(cls):
        values = {k: dec(v) for k, v in data["f"].items()}
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if set(values) - set(fields):
            raise DataError(f"{cls.__name__} has no fields {sorted(set(values) - set(fields))}")
        obj = cls(**{k: v for k, v in values.items() if fields[k].init})
        for k, v in values.items():
            if not fields[k].init:
                object.__setattr__(obj, k, v)
        return obj
    if kind == "obj":  # attributes, no __init__
        obj = cls.__new__(cls)
        if _TRUSTED.get() is not None and "id" in data:
            _TRUSTED.get()["objs"][data["id"]] = obj     # before its attributes: they may point back
        obj.__dict__.update({str(k): dec(v) for k, v in data["d"].items()})
        return obj
    raise DataError(f"unexpected data kind {kind!r}")


def _record(data: dict, kind: str, dec) -> Record:
    """A parasim object as plain data: its class name as text (nothing imported) and its fields."""
    path = str(data.get("cls", ""))
    if kind in ("nt", "enum"):
        body = data.get("v")
        fields = {"value": dec(body)} if kind == "enum" else {str(i): dec(x) for i, x in enumerate(body or [])}
    elif kind == "ref":
        raise DataError("unexpected data kind 'ref'")
    else:
        body = data.get("f" if kind == "dc" else "d")
        if type(body) is not dict:
            raise DataError(f"a {kind} without fields")
        fields = {str(k): dec(v) for k, v in body.items()}
    return Record(path, fields, data)


def _hashable(key):
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    if isinstance(key, (set, dict)):
        raise DataError("a dict key that is a set or a dict")
    return key

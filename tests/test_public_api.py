"""simulator's public API (simulator/__init__.py) is imported name by name on first use: every
public name resolves to the object its module defines, a name that is also a submodule stays the
public object, and importing one name does not import the whole library."""

import importlib
import json
import subprocess
import sys

import simulator


def test_every_public_name_is_its_modules_object():
    from simulator import _WHERE

    assert set(simulator.__all__) == {*_WHERE, "auto", "vocabulary", "__version__"}
    for name, (module, attr) in _WHERE.items():
        assert getattr(simulator, name) is getattr(importlib.import_module(f"simulator.{module}"), attr), name
    assert simulator.auto is importlib.import_module("simulator.auto")
    assert simulator.validate_schedule is importlib.import_module("simulator.parallel.schedule_check").validate


def test_a_submodule_of_a_public_names_name_does_not_hide_it():
    """simulator.sweep is the function `sweep`, as it was when the package imported everything,
    even when the submodule simulator.sweep is imported first (Python binds a submodule on its
    package under its name). In a fresh interpreter, so that nothing is imported before."""
    code = ("import sys, types; import simulator.sweep; from simulator import sweep\n"
            "print(isinstance(sweep, types.FunctionType), sweep is sys.modules['simulator.sweep'].sweep,"
            " simulator.sweep is sweep)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True"]


def test_other_submodules_are_attributes_and_unknown_names_are_refused():
    assert simulator.cost is importlib.import_module("simulator.cost")
    try:
        simulator.no_such_name  # noqa: B018
    except AttributeError as err:
        assert "no attribute 'no_such_name'" in str(err)
    else:
        raise AssertionError("simulator.no_such_name did not raise")


def test_one_name_imports_its_modules_only():
    """`from simulator import make_schedule` (the home page's figure) leaves the cost model, the
    runtime, the models and auto-parallel unimported; `import simulator` alone imports nothing."""
    code = ("import sys; import simulator; before = {m for m in sys.modules if m.startswith('simulator')}\n"
            "from simulator import make_schedule, simulate_schedule\n"
            "after = {m for m in sys.modules if m.startswith('simulator.')}\n"
            "print(sorted(before)); print(sorted({m.split('.')[1] for m in after}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, after = out.stdout.splitlines()
    assert before == "['simulator']"
    assert not {"cost", "runtime", "models", "auto", "training"} & set(json.loads(after.replace("'", '"'))), after

"""The package's own imports, read from its source: no import circle (at
module level or inside functions), and no import from a lower floor to a
higher one. Every module has a floor; a new one must be given its floor
here, where the layering is written down."""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Lowest first: each of irshard's packages (a phase) and the modules of the
# ways in. A module imports from its own floor or lower ones; each
# package's __init__ says the same in words.
FLOORS = {
    # Errors, the spec grammar, leaf paths, frames, files, schemas: no JAX.
    "core": ["core"],
    # JAX and XLA (and MLIR through jaxlib's bindings): every call into them.
    "backend": ["backend"],
    # HLO as XLA writes it: modules, the streaming scan, tiles, groups.
    "xla": ["xla"],
    # The step-time model: profiles, instruction costs, links, the walk.
    "timemodel": ["timemodel"],
    # Targets and where a program's mesh lives.
    "hardware": ["hardware"],
    # The report as a value, its writers, budgets, layouts, notebooks.
    "reporting": ["reporting"],
    # Reading a compiled module: collectives, dumps, findings, why.
    "collectives": ["collectives"],
    # MLIR modules: annotation, other exporters, pass pipelines, opt, and
    # the passes themselves.
    "ir": ["ir", "passes"],
    # A program: loaded from a file or given from Python, its inputs' data.
    "loading": ["loading"],
    # The staged pipeline: trace, lower, propagate, partition, compile.
    "stages": ["stages"],
    # Running on a mesh, on one host or several, and the run checked.
    "running": ["running"],
    # Measuring the devices present for the time model.
    "measuring": ["measuring"],
    # Trying other strategies.
    "strategy": ["strategy"],
    # The ways in: files, the Python API, pytest helpers and plugin, the
    # command line.
    "front": ["irshard", "frontend", "hosting", "library", "searching", "apichecks", "apiprogram", "apireport", "api", "testing",
              "pytest_plugin", "commands", "options", "optiontypes", "cli",
              "__main__", "forkserver"],
}


def _modules() -> dict[str, str]:
    found = {}
    for package in ("irshard", "passes"):
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            if "__pycache__" in folder:
                continue
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    dotted = dotted.removesuffix(".__init__")
                    if dotted.startswith("passes"):
                        dotted = "irshard." + dotted
                    found[dotted] = path
    return found


MODULES = _modules()


def _target(name: str) -> str | None:
    """The package module an imported name belongs to."""
    if name.startswith("passes"):
        name = "irshard." + name
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> dict[str, bool]:
    """The package modules `module` imports, each with whether only inside
    functions."""
    tree = ast.parse(open(MODULES[module]).read())
    found: dict[str, bool] = {}

    def visit(node, inside):
        for child in ast.iter_child_nodes(node):
            nested = inside or isinstance(child, (ast.FunctionDef,
                                                  ast.AsyncFunctionDef))
            names = []
            if isinstance(child, ast.ImportFrom) and child.module and not child.level:
                names = [f"{child.module}.{a.name}" for a in child.names]
            elif isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            for name in names:
                target = _target(name)
                if target and target != module:
                    found[target] = found.get(target, True) and nested
            visit(child, nested)

    visit(tree, False)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _short(module: str) -> str:
    """The package (or top-level module) a module belongs to."""
    if module == "irshard":
        return module
    return module.removeprefix("irshard.").split(".")[0]


def _floor(module: str) -> tuple[int, str]:
    short = _short(module)
    for i, (name, members) in enumerate(FLOORS.items()):
        if short in members:
            return i, name
    pytest.fail(f"{module} has no floor; add it to FLOORS in {__file__}")


def test_every_module_has_one_floor():
    listed = [m for members in FLOORS.values() for m in members]
    assert len(listed) == len(set(listed))
    named = {_short(m) for m in MODULES}
    assert sorted(named ^ set(listed)) == []


def test_every_package_says_what_it_holds_and_may_import():
    for module, path in MODULES.items():
        if path.endswith("__init__.py") and module.count(".") == 1 \
                and _short(module) != "passes":
            doc = ast.get_docstring(ast.parse(open(path).read())) or ""
            assert "import" in doc, f"{path}: no docstring saying what it may import"


def test_no_library_module_is_over_450_lines():
    """A module that grows past 450 lines is split by what its parts do
    (the cap was 600)."""
    long = {m: n for m, p in MODULES.items()
            if (n := sum(1 for _ in open(p))) > 450}
    assert long == {}


def test_no_two_public_classes_share_a_name():
    """A class name says which class it is: two public classes of one name
    (a `Step` of the simulation and one of a pass pipeline) make a reader
    look up which module a name came from."""
    homes: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        for node in ast.parse(open(path).read()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                homes.setdefault(node.name, []).append(module)
    assert {name: where for name, where in homes.items() if len(where) > 1} == {}


def test_no_import_goes_up_a_floor():
    upward = []
    for module, targets in sorted(GRAPH.items()):
        here, floor = _floor(module)
        for target, lazily in sorted(targets.items()):
            there, other = _floor(target)
            if there > here:
                upward.append(f"{module} ({floor}) -> {target} ({other})"
                              + (" inside a function" if lazily else ""))
    assert upward == []


def test_no_import_circle():
    """Tarjan's strongly connected components over every import, at
    module level or inside functions."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in GRAPH[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for v in sorted(GRAPH):
        if v not in index:
            strong(v)
    assert circles == []


def test_the_reading_is_real():
    """The graph has the imports it must: a check that could be false."""
    assert GRAPH["irshard.cli"]["irshard.core.errors"] is False
    assert "irshard.stages.staged" in GRAPH["irshard.api"]
    assert GRAPH["irshard.api"]["irshard.stages.staged"] is True
    assert "irshard.passes" in GRAPH["irshard.passes.collectives"]


def test_the_library_reaches_passes_through_their_registry():
    """Outside the passes themselves, only `irshard.passes` (the registry,
    `pass_class`) is imported, never a pass's own module."""
    direct = sorted(f"{module} -> {target}" for module, targets in GRAPH.items()
                    if not module.startswith("irshard.passes")
                    for target in targets if target.startswith("irshard.passes."))
    assert direct == []


def test_the_report_is_a_typed_frozen_value():
    """The report and each of its parts are frozen dataclasses whose fields
    name their types: no `Any`, nothing of the program it was read from
    (that is `irshard.api.Report`'s)."""
    import dataclasses
    import typing
    from irshard.reporting import parts, peak, report, why
    from irshard.timemodel import links, step
    seen, todo = set(), [report.CollectiveReport]
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen, cls
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            assert "Any" not in str(hints[f.name]), f"{cls.__name__}.{f.name}"
            for arg in _classes(hints[f.name]):
                if dataclasses.is_dataclass(arg):
                    todo.append(arg)
    assert {report.Collective, parts.MemoryUse, peak.Peak, why.Why, why.Origin,
            step.Step, links.Roofline, parts.TargetInfo} <= seen
    names = {f.name for f in dataclasses.fields(report.CollectiveReport)}
    assert not names & {"stages", "run", "results", "extra"}


def _classes(hint):
    import typing
    found = [hint] if isinstance(hint, type) else []
    for arg in typing.get_args(hint):
        found += _classes(arg)
    return found


def test_the_version_is_pyprojects():
    import tomllib

    from irshard.core.version import VERSION
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        assert tomllib.load(f)["project"]["version"] == VERSION


def test_no_library_function_is_over_60_lines():
    """No function is over 60 lines: one that grows past it is split by
    what its parts do."""
    long = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > 60:
                    long[f"{module}.{node.name}"] = n
    assert long == {}

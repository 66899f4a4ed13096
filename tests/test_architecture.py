"""The package's shape, checked: layers import only downwards, no import cycle, a pure planning core.

Every `import` in corgi_io/ counts, those inside functions too (a lazy import still ties the modules).
"""
from __future__ import annotations

import ast
from pathlib import Path

import corgi_io

ROOT = Path(corgi_io.__file__).parent
# Lower layers first; a module may import its own layer's modules only inside its own package.
LAYERS = [
    {"errors"}, {"arguments"}, {"storage"}, {"formats"}, {"manifest"}, {"processes", "schedule", "images", "timing"},
    {"packing", "reading", "report", "indexes"}, {"loaders"}, {"cli"}, {"__init__"},
]
PURE = {"schedule": {"errors", "arguments", "schedule"},  # planning: numpy in and out, no I/O, no torch
        "timing": {"timing"}}  # the clocks and their summaries: numpy and the time, no I/O, no torch
TORCH_ONLY_IN = "loaders"
READ_SIDE = {"loaders", "reading", "schedule"}  # never import packing (issue 30)


def modules() -> dict:
    """{dotted module name: set of corgi_io modules and top-level packages it imports}."""
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(("corgi_io", *parts[:-1], *([] if parts[-1] == "__init__" else [parts[-1]])))
        found[name] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found[name].add(node.module)
                found[name].update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found[name].update(alias.name for alias in node.names)
    return found


def top(module: str) -> str:
    """The top-level part of corgi_io that `module` belongs to ("corgi_io" itself is "__init__")."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer(module: str) -> int:
    return next(i for i, names in enumerate(LAYERS) if top(module) in names)


GRAPH = modules()


def internal(imports: set) -> set:
    return {name for name in imports if name in GRAPH}


def test_every_top_level_part_has_a_layer():
    assert {top(name) for name in GRAPH} <= set().union(*LAYERS)


def test_imports_point_down_the_layers():
    upward = [(name, target) for name, imports in GRAPH.items() for target in internal(imports)
              if layer(target) > layer(name) or (layer(target) == layer(name) and top(target) != top(name))]
    assert upward == []


def test_no_import_cycle():
    state, cycles = {}, []

    def visit(name, path):
        state[name] = "open"
        for target in sorted(internal(GRAPH[name]) - {name}):
            if state.get(target) == "open" and not name.startswith(target + "."):  # a package's own __init__
                cycles.append(path[path.index(target):] + [target] if target in path else [name, target])
            elif target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in sorted(GRAPH):
        if name not in state:
            visit(name, [name])
    assert cycles == []


def test_the_planning_core_is_pure():
    for package, allowed in PURE.items():
        for name, imports in GRAPH.items():
            if top(name) == package:
                assert {top(t) for t in internal(imports)} <= allowed, name
                assert not {i.split(".")[0] for i in imports} & {"torch", "fsspec", "urllib3", "os", "io"}, name


def test_torch_is_imported_only_by_the_loaders():
    assert [name for name, imports in GRAPH.items()
            if top(name) != TORCH_ONLY_IN and any(i.split(".")[0] in ("torch", "torchdata") for i in imports)] == []


def test_the_read_side_never_imports_packing():
    """The loaders, the reader and the planner share the field vocabulary with packing through the manifest."""
    assert [(name, target) for name, imports in GRAPH.items() if top(name) in READ_SIDE
            for target in internal(imports) if top(target) == "packing"] == []

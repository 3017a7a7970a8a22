"""The layer rules of docs/design.md, checked on the package's own imports (including imports inside functions).

The rules, written once as data (:data:`LAYERS`):

* every module belongs to one layer; a module imports only from its own layer and the layers below it
  (no import runs back up);
* layers on one row stand side by side and do not import each other (update and sync: the Trainer
  hands the reduced gradient to the update; the array faces and the arenas);
* an import cycle stays inside one folder of the package (with its subfolders: the emulated CuPy mirrors
  CuPy's own ``cupy`` <-> ``cupy.cuda`` knot); a cycle through two top-level folders is an error;
* outside the emulated CuPy there is no import cycle at all: a lower module that must reach a higher one
  gets a registry the higher one fills at import;
* an import inside a function is for an optional dependency or for a module loaded only when asked for
  (:data:`LAZY_IMPORTS`), not a way around a cycle;
* layers meet through public names: no ``from <another layer> import _private``, no attribute of
  another layer's that is private there (``arena._grad_buf``), and no Tensor internals (``x._data``)
  outside the tensor floor (the autograd engine and the op library, whose ops read them on their hot path).
"""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "mxlite"

# Bottom to top. A row of several layers: side by side (peers). A module belongs to the layer of its
# longest matching prefix; "mxlite" alone is the package's own __init__ (the top face).
LAYERS: list[list[tuple[str, tuple[str, ...]]]] = [
    [("device", ("mxlite.device", "mxlite._emulation"))],
    [("formats", ("mxlite.formats",))],
    [("profiler", ("mxlite.profiler",))],
    [("tensor", ("mxlite.autograd",))],
    [("ops", ("mxlite.ops", "mxlite.initializer"))],
    [("faces", ("mxlite.arrays", "mxlite.io", "mxlite.image", "mxlite.recordio")), ("memory", ("mxlite.store",))],
    [("update", ("mxlite.optimizer",)), ("sync", ("mxlite.comm",))],
    [("store", ("mxlite.kvstore",))],
    [("gluon", ("mxlite.gluon", "mxlite.amp", "mxlite.checkpoint", "mxlite.datasets"))],
    [("command", ("mxlite.cli", "mxlite.__main__", "mxlite"))],
]

# Tensor's private slots and its gradient test: the tensor floor's alone (other layers use Tensor.array, .grad,
# .rebind, ...). The floor is the engine ("tensor") and the op library above it ("ops"), and "device", whose
# emulated arrays have slots of these names.
TENSOR_INTERNALS = {"_data", "_device", "_grad", "_grad_req", "_node", "_fresh_grad", "_hooks", "_requires_grad"}
TENSOR_FLOOR = ("tensor", "ops", "device")


def _layer_of(module: str) -> tuple[int, str]:
    best: tuple[int, str, int] | None = None
    for level, row in enumerate(LAYERS):
        for name, prefixes in row:
            for prefix in prefixes:
                matches = module == prefix or (prefix != "mxlite" and module.startswith(prefix + "."))
                if matches and (best is None or len(prefix) > best[2]):
                    best = (level, name, len(prefix))
    if best is None:
        raise AssertionError(f"module {module} belongs to no layer: add it to tests/test_architecture.py LAYERS "
                             "and to docs/design.md's layer table")
    return best[0], best[1]


def _modules() -> dict[str, tuple[pathlib.Path, ast.Module]]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = (path, ast.parse(path.read_text(), str(path)))
    return found


MODULES = _modules()


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports() -> list[tuple[str, str, str, int]]:
    """(importer, imported module, imported name or '', line) for every mxlite import in the package."""
    out = []
    for module, (path, tree) in MODULES.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                target = _resolve(module, is_package, node)
                if not target.startswith("mxlite"):
                    continue
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in MODULES:  # `from pkg import module`
                        out.append((module, sub, "", node.lineno))
                    else:
                        out.append((module, target, alias.name, node.lineno))
            elif isinstance(node, ast.Import):
                out.extend((module, a.name, "", node.lineno) for a in node.names if a.name.startswith("mxlite"))
    return out


IMPORTS = _imports()


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer_of(module)


def test_no_import_runs_back_up_and_peers_stay_apart():
    wrong = []
    for importer, target, _, line in IMPORTS:
        (lo, lname), (hi, hname) = _layer_of(importer), _layer_of(target)
        if hi > lo or (hi == lo and hname != lname):
            what = "runs back up" if hi > lo else "crosses to a peer"
            wrong.append(f"{importer}:{line} imports {target} ({lname} -> {hname}: {what})")
    assert not wrong, "imports breaking the layer rules:\n" + "\n".join(wrong)


def _strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _top_folder(module: str) -> str:
    """The first folder below mxlite/ holding the module ('' for a file directly in mxlite/)."""
    path, _ = MODULES[module]
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else ""


def _edges(modules: set[str] | None = None) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for importer, target, _, _ in IMPORTS:
        if target in MODULES and target != importer and (modules is None or {importer, target} <= modules):
            edges[importer].add(target)
    return edges


def test_no_import_cycle_outside_the_emulation():
    """Module-level and function-level imports alike: docs/design.md, 'Layers as built'."""
    outside = {m for m in MODULES if not m.startswith("mxlite._emulation")}
    cycles = _strongly_connected(_edges(outside))
    assert not cycles, "import cycles (each a group of modules importing one another):\n" + "\n".join(
        ", ".join(c) for c in cycles)


# What a function may import (a module or package, or a name's first part): optional dependencies, and the
# modules loaded only when asked for (gradient compression; the emulated GPUs, installed on request).
LAZY_IMPORTS = ("cupy", "cupyx", "cudnn", "mpi4py", "cv2", "PIL", "matplotlib", "ml_dtypes", "threadpoolctl",
                "mxlite.comm.compression", "mxlite._emulation.install")


def _imports_in_functions() -> list[tuple[str, int, str]]:
    """(module, line, imported module) for every import statement inside a function, outside the emulation."""
    found = []
    for module, (path, tree) in MODULES.items():
        if module.startswith("mxlite._emulation"):
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    found.extend((module, node.lineno, a.name) for a in node.names)
                elif isinstance(node, ast.ImportFrom):
                    target = _resolve(module, path.name == "__init__.py", node)
                    found.extend((module, node.lineno, f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES
                                  else target) for a in node.names)
    return found


def test_imports_inside_functions_are_optional_or_on_demand():
    wrong = sorted({f"{module}:{line} imports {target}" for module, line, target in _imports_in_functions()
                    if not any(target == lazy or target.startswith(lazy + ".") for lazy in LAZY_IMPORTS)})
    assert not wrong, ("imports inside functions that are neither an optional dependency nor loaded on demand "
                       "(import at the top; a cycle is broken by a registry the higher module fills):\n"
                       + "\n".join(wrong))


def test_no_import_cycle_crosses_a_folder():
    edges: dict[str, set[str]] = defaultdict(set)
    for importer, target, _, _ in IMPORTS:
        if target in MODULES and target != importer:
            edges[importer].add(target)
    crossing = [c for c in _strongly_connected(edges) if len({_top_folder(m) for m in c}) > 1
                or _top_folder(c[0]) == ""]
    assert not crossing, f"import cycles across folders: {crossing}"


def _defined_private_names() -> dict[str, set[str]]:
    """Private name -> layers that define it (functions, classes, module variables, attributes, slots)."""
    defined: dict[str, set[str]] = defaultdict(set)
    for module, (_, tree) in MODULES.items():
        layer = _layer_of(module)[1]
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.append(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.append(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.append(node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in TENSOR_INTERNALS:
                names.append(node.value)  # __slots__ entries
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    defined[n].add(layer)
    return defined


def test_layers_meet_through_public_names():
    defined = _defined_private_names()
    wrong = []
    for importer, target, name, line in IMPORTS:
        if name.startswith("_") and not name.startswith("__") and _layer_of(importer) != _layer_of(target):
            wrong.append(f"{importer}:{line} imports the private {name} of {target}")
    for module, (_, tree) in MODULES.items():
        level, layer = _layer_of(module)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            owners = defined.get(node.attr, set())
            if node.attr in TENSOR_INTERNALS:
                if layer not in TENSOR_FLOOR:
                    wrong.append(f"{module}:{node.lineno} reads Tensor's internal {node.attr} (use the public "
                                 "accessors)")
            elif owners and layer not in owners:
                wrong.append(f"{module}:{node.lineno} uses {node.attr}, private to the {'/'.join(sorted(owners))} "
                             "layer")
    assert not wrong, "layers meeting through private names:\n" + "\n".join(wrong)


@pytest.mark.parametrize("rule", ["update", "sync", "tensor", "ops", "memory", "store"])
def test_lower_layers_know_no_block(rule):
    """Update, sync, tensor, ops, memory and store never import Gluon (Blocks, Parameters, the Trainer)."""
    bad = [f"{i}:{line}" for i, t, _, line in IMPORTS if _layer_of(i)[1] == rule and _layer_of(t)[1] == "gluon"]
    assert not bad

"""Measures of how the package is laid out, printed as JSON: the figures a restructuring is judged by.

    python tools/house_metrics.py            # the working tree
    python tools/house_metrics.py --root DIR # another checkout

Figures (every one counted from the source, nothing imported):

* ``import_cycles``: strongly connected groups of modules under the import graph (module-level and
  function-level imports alike), outside the emulated CuPy, largest first, as sizes;
* ``imports_in_functions``: ``import`` statements inside a function or method;
* ``dtype_tables``: dict displays mapping NumPy dtypes to CUDA C type names (a key or value ``"__half"``);
* ``name_lists``: module-level assignments to a name ending in ``_ALL_NAMES``;
* ``block_size_constants``: assignments of the literal 256 to a name containing ``THREADS`` (any case);
* ``private_cross_folder``: ``obj._name`` reads or writes where ``obj`` is not ``self``/``cls`` and no module in
  the same folder defines ``_name`` (an attribute, function or method of that name);
* ``modules_without_test_file``: package modules with no ``tests/test_<module name>*.py``;
* ``stale_references``: ``mxlite/...py`` or ``kernels/...`` paths written in the package, kernels, docs and
  README that do not exist;
* ``largest_files``: the five largest package files, in lines.
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import re
from collections import defaultdict

_EMULATION = "mxlite._emulation"
_PATH_MENTION = re.compile(r"\b((?:mxlite|kernels)/[\w/]+\.(?:py|cu|cuh))\b")


def _modules(root: pathlib.Path) -> dict[str, tuple[pathlib.Path, ast.Module]]:
    found = {}
    for path in sorted((root / "mxlite").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = (path, ast.parse(path.read_text(), str(path)))
    return found


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: pathlib.Path, tree: ast.Module, known: set[str]) -> set[str]:
    targets = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node, path.name == "__init__.py")
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        targets.update(n for n in names if n in known and n != module)
    return targets


def _cycles(graph: dict[str, set[str]]) -> list[int]:
    """Sizes of the strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    sizes = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    sizes.append(len(group))
    return sorted(sizes, reverse=True)


def _in_function_imports(tree: ast.Module) -> int:
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            count += sum(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(node))
    return count  # nested functions count their imports once per enclosing function: rare, accepted


def _defined_names(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def measure(root: pathlib.Path) -> dict:
    """The figures of the module docstring for the checkout at ``root``."""
    modules = _modules(root)
    known = set(modules)
    graph = {m: _imports(m, p, t, known) for m, (p, t) in modules.items() if not m.startswith(_EMULATION)}
    graph = {m: {t for t in targets if t in graph} for m, targets in graph.items()}

    folder_names: dict[pathlib.Path, set[str]] = defaultdict(set)
    for path, tree in modules.values():
        folder_names[path.parent] |= _defined_names(tree)
    private = []
    dtype_tables = name_lists = block_sizes = in_functions = 0
    for module, (path, tree) in modules.items():
        if module.startswith(_EMULATION):
            continue
        in_functions += _in_function_imports(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                    and node.attr not in folder_names[path.parent]):
                private.append(f"{path.relative_to(root)}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.Dict) and any(
                    isinstance(v, ast.Constant) and v.value == "__half" for v in [*node.keys, *node.values]):
                dtype_tables += 1
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value == 256:
                block_sizes += any(isinstance(t, ast.Name) and "threads" in t.id.lower() for t in node.targets)
        name_lists += sum(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id.endswith("_ALL_NAMES")
                                                             for t in n.targets) for n in tree.body)

    tests = [p.name for p in (root / "tests").glob("test_*.py")]
    untested = sorted(m for m, (p, _) in modules.items() if not m.startswith(_EMULATION) and p.name != "__init__.py"
                      and not any(t.startswith(f"test_{p.stem.lstrip('_')}") for t in tests))

    stale = []
    texts = [*(root / "mxlite").rglob("*.py"), *(root / "kernels").glob("*.cu*"), *(root / "docs").glob("*.md"),
             root / "README.md", root / "pyproject.toml"]
    for path in texts:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for mention in _PATH_MENTION.findall(line):
                if not (root / mention).exists():
                    stale.append(f"{path.relative_to(root)}:{n} {mention}")

    sizes = sorted(((len(p.read_text().splitlines()), str(p.relative_to(root))) for p, _ in modules.values()),
                   reverse=True)
    return {
        "import_cycles": _cycles(graph),
        "imports_in_functions": in_functions,
        "dtype_tables": dtype_tables,
        "name_lists": name_lists,
        "block_size_constants": block_sizes,
        "private_cross_folder": len(private),
        "private_cross_folder_examples": private[:15],
        "modules_without_test_file": len(untested),
        "modules": len([m for m in modules if not m.startswith(_EMULATION)]),
        "stale_references": stale,
        "largest_files": [f"{path} ({lines})" for lines, path in sizes[:5]],
    }


def main(argv: list[str] | None = None) -> int:
    """Print the figures of ``--root`` (default: this checkout) as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.root), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

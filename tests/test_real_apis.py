"""The GPU doubles held to the real packages' names and signatures: CuPy (with NCCL and cupyx), nvmath-python's
cuBLAS bindings and NVIDIA's cuDNN frontend, each imported without a GPU.

Each test runs this file as a script in a fresh interpreter where the emulation is not installed (``import cupy``,
``import nvmath``, ``import cudnn`` are the real packages), walks every public name of the package's doubles (the
modules :mod:`mxlite._emulation.install` puts at each real module path) and compares it with the real module there:

* the name exists in the real module;
* a callable's parameters, both ways: every parameter the double accepts, the real one accepts (by name, or through
  its ``*args``/``**kwargs``), and every parameter the real one requires (no default, not ``*args``/``**kwargs``)
  the double requires too, so a call that works on the double also gives the real one all it needs;
* a positional parameter of the double is at the same position in the real callable (checked where that has one
  signature), so a positional call means the same to both;
* an enum's members have the real names and values (a double may offer fewer), and an enum whose members are ints
  in the double has int members in the real package; a ufunc has as many inputs and outputs;
* a constant (None, bool, int, float, str) has the real value.

Signatures come from ``inspect.signature``, else from the docstring's signature lines: Cython's ``name(a, b=1)``,
pybind11/nanobind's ``name(self, a: T, b: T = ...) -> R``, one line per overload (a parameter is accepted if one
overload accepts it, required if every overload requires it). A cuDNN ``pygraph`` builder whose Python signature is
generic (``*args, **kwargs``: the frontend generates them from a table) is compared with the compiled
``backend_graph`` method it lowers to, which is what rejects a missing argument on a real GPU.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import math
import os
import re
import subprocess
import sys
import time
import types
from typing import Any

import pytest

from tests.real_libs import probe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SCRIPT = os.path.abspath(__file__)
_EMULATION = "mxlite._emulation"

# A parameter: (name, kind, required). Kinds: "p" positional-only, "pk" positional or keyword, "k" keyword-only,
# "*" var-positional, "**" var-keyword. A signature is a list of them; a callable has one or more (overloads).
Param = tuple[str, str, bool]
_KINDS = {inspect.Parameter.POSITIONAL_ONLY: "p", inspect.Parameter.POSITIONAL_OR_KEYWORD: "pk",
          inspect.Parameter.KEYWORD_ONLY: "k", inspect.Parameter.VAR_POSITIONAL: "*",
          inspect.Parameter.VAR_KEYWORD: "**"}

# Where a real class's generic Python methods lower to a compiled binding whose signature is the telling one.
_LOWERED = {"cudnn.pygraph": ("cudnn._compiled_module", "backend_graph")}


# -- reading signatures ------------------------------------------------------------------------------------------
def _split_top(text: str, sep: str = ",") -> list[str]:
    """``text`` split at the ``sep`` characters outside brackets and quotes."""
    parts, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(text):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _parse_params(text: str) -> list[Param]:
    """The parameters of a docstring signature's parameter list ``a, b: int = 1, /, *args, c=None, **kw``."""
    out: list[Param] = []
    kind = "pk"
    for raw in _split_top(text):
        part = raw.strip()
        if not part:
            continue
        if part == "/":
            out = [(n, "p" if k == "pk" else k, r) for n, k, r in out]
            continue
        if part == "*":
            kind = "k"
            continue
        head, *default = _split_top(part, "=")
        name = _split_top(head, ":")[0].strip()
        if name.startswith("**"):
            out.append((name[2:].strip(), "**", False))
        elif name.startswith("*"):
            out.append((name[1:].strip(), "*", False))
            kind = "k"
        else:
            out.append((name.split()[-1], kind, not default))  # Cython may write a C type first: ``int n``
    return out


def _drop_self(params: list[Param]) -> list[Param]:
    """A method's parameters without its ``self`` (bound and unbound methods then compare alike)."""
    return params[1:] if params and params[0][0] == "self" else params


def _doc_signatures(obj: Any) -> list[list[Param]] | None:
    """Every signature line of ``obj``'s docstring (``name(...)`` or ``N. name(...) -> R``), or None."""
    name = getattr(obj, "__name__", None)
    if not name:
        return None
    found = []
    for line in (getattr(obj, "__doc__", None) or "").splitlines():
        m = re.match(r"^\s*(?:\d+\.\s+)?([\w.]+)\(", line)
        if not m or m.group(1).split(".")[-1] not in (name, "__init__"):
            continue
        depth, end = 0, None
        for i in range(m.end() - 1, len(line)):
            depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(line[i], 0)
            if depth == 0:
                end = i
                break
        if end is not None:
            found.append(_drop_self(_parse_params(line[m.end():end])))
    return found or None


def _is_generic(params: list[Param]) -> bool:
    """Whether a signature says nothing of the positional arguments: ``*args`` and ``**kwargs`` take them all."""
    return any(k == "*" for _, k, _ in params) and any(k == "**" for _, k, _ in params) and not any(
        k in ("p", "pk") for _, k, _ in params)


def _signatures(obj: Any) -> list[list[Param]] | None:
    """``obj``'s signatures (self dropped), from ``inspect.signature`` or else its docstring; None if neither."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return _doc_signatures(obj)
    params = _drop_self([(p.name, _KINDS[p.kind], p.default is inspect.Parameter.empty and p.kind in (
        inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY))
        for p in sig.parameters.values()])
    if isinstance(obj, type) and _is_generic(params):  # a compiled class's generic __init__: its doc says more
        return _doc_signatures(obj) or [params]
    return [params]


def _real_signatures(path: str, real: Any, owner: Any = None) -> tuple[list[list[Param]] | None, bool]:
    """The real callable's signatures, and whether they are its Python ones. A generic Python method of a class in
    :data:`_LOWERED` takes those of the compiled method it lowers to, plus its own keyword-only parameters (then
    positions are the binding's, not the Python method's)."""
    sigs = _signatures(real)
    if sigs is None and isinstance(real, type):
        sigs = _signatures(real.__init__)
    lowered = _LOWERED.get(path.rsplit(".", 1)[0]) if owner is not None else None
    if sigs and lowered and len(sigs) == 1 and _is_generic(sigs[0]):
        target = getattr(getattr(importlib.import_module(lowered[0]), lowered[1]), path.rsplit(".", 1)[1], None)
        low = _doc_signatures(target) if target is not None else None
        if low:
            own = [p for p in sigs[0] if p[1] == "k"]
            return [o + [p for p in own if p[0] not in {n for n, _, _ in o}] for o in low], False
    return sigs, True


def _show(sigs: list[list[Param]] | None) -> str:
    """Signatures as text: ``(a, b=…, *args, **kwargs)``, overloads joined by `` | ``."""
    def one(params: list[Param]) -> str:
        marks = {"*": "*", "**": "**"}
        return "(" + ", ".join(marks.get(k, "") + n + ("" if r or k in marks else "=…") for n, k, r in params) + ")"
    return " | ".join(one(s) for s in sigs) if sigs else "?"


# -- comparing ---------------------------------------------------------------------------------------------------
def _accepts(real: list[Param], name: str, kind: str) -> bool:
    """Whether a real signature accepts the double's parameter ``name`` of ``kind``."""
    if kind in ("*", "**"):
        return any(k == kind for _, k, _ in real)
    named = {n for n, k, _ in real if k in ("pk", "k")}
    return (name in named or (kind in ("pk", "k") and any(k == "**" for _, k, _ in real))
            or (kind == "p" and any(k in ("p", "pk", "*") for _, k, _ in real)))


def _extra_params(fake: list[Param], real: list[list[Param]]) -> list[str]:
    """The double's parameters that no real signature accepts."""
    return [("*" if k == "*" else "**" if k == "**" else "") + n for n, k, _ in fake
            if not any(_accepts(o, n, k) for o in real)]


def _unrequired_params(fake: list[Param], real: list[list[Param]]) -> list[str]:
    """Parameters every real signature requires that the double does not require (a default, ``*args``/
    ``**kwargs`` in their place, or no such parameter): a call the double takes, the real one refuses."""
    by_name = set.intersection(*({n for n, k, r in o if r and k in ("pk", "k")} for o in real))
    fake_required = {n for n, k, r in fake if r}
    missing = sorted(by_name - fake_required)
    # positional-only parameters are matched by position, their names being the bindings' own
    positional = min(sum(1 for _, k, r in o if r and k == "p") for o in real)
    fake_positional = [r for _, k, r in fake if k in ("p", "pk")][:positional]
    if len(fake_positional) < positional or not all(fake_positional):
        missing.append(f"the first {positional} positional arguments")
    return missing


def _same_value(fake: Any, real: Any) -> bool:
    """Whether a constant of the double equals the real one (NaN equal to NaN, a bool only to a bool)."""
    if isinstance(fake, float) and math.isnan(fake):
        return isinstance(real, float) and math.isnan(real)
    return fake == real and isinstance(fake, bool) == isinstance(real, bool)


def _misplaced_params(fake: list[Param], real: list[list[Param]]) -> list[str]:
    """The double's positional parameters that the real one has at another position, or not positionally at all
    (so a positional call means something else there, or fails). Checked where the real callable has one signature:
    an overloaded binding's positions are its overloads' own."""
    if len(real) != 1:
        return []
    real_positional = [(n, k) for n, k, _ in real[0] if k in ("p", "pk")]
    takes_more = any(k == "*" for _, k, _ in real[0])
    bad = []
    for i, name in enumerate(n for n, k, _ in fake if k in ("p", "pk")):
        if i >= len(real_positional):
            if not takes_more:
                bad.append(f"{name} (position {i}: the real one takes {len(real_positional)} positionally)")
        elif real_positional[i][1] == "pk" and real_positional[i][0] != name:
            bad.append(f"{name} (position {i}: the real one's is {real_positional[i][0]})")
    return bad


class _Walk:
    """One package's comparison, as a JSON-able report: how much was compared, every mismatch as ``[path, what]``
    (``path`` the double's name), and what could not be compared."""

    def __init__(self) -> None:
        self.report: dict[str, Any] = {"names": 0, "signatures": 0, "enums": 0, "enum_members": 0, "constants": 0,
                                       "compared": [], "problems": [], "not_compared": [], "members_not_offered": {}}

    def problem(self, path: str, what: str) -> None:
        """Record a mismatch of the double's ``path``."""
        self.report["problems"].append([path, what])

    def name(self, path: str, fake: Any, real_owner: Any, attr: str, owner: Any = None) -> None:
        """Compare one public name of the double with the real one of the same name in ``real_owner``."""
        self.report["names"] += 1
        if not hasattr(real_owner, attr):
            self.problem(path, "not in the real package")
            return
        real = getattr(real_owner, attr)
        if isinstance(fake, types.ModuleType):
            return  # a submodule, walked on its own
        if getattr(fake, "__module__", "").split(".")[0] == "numpy":
            self.report["not_compared"].append(f"{path} (NumPy's own)")
        elif isinstance(fake, enum.EnumMeta):
            self.enum(path, fake, real)
        elif type(fake).__name__ == "ufunc":
            self.ufunc(path, fake, real)
        elif isinstance(fake, type):
            self.callable(path, fake.__init__, real)
            self.members(path, fake, real)
        elif callable(fake):
            self.callable(path, fake, real, owner)
        elif fake is None or isinstance(fake, (bool, int, float, str)):
            self.report["constants"] += 1
            if not _same_value(fake, real):
                self.problem(path, f"double {fake!r}, real {real!r}")
        else:
            self.report["not_compared"].append(f"{path} (a {type(fake).__name__})")

    def members(self, path: str, fake: type, real: Any) -> None:
        """The public methods, properties and constants a double class defines, and a few dunders CuPy's have."""
        for attr, member in vars(fake).items():
            if attr.startswith("_") and attr not in ("__dlpack__", "__dlpack_device__", "__array__"):
                continue
            if isinstance(member, property):
                self.report["names"] += 1
                if not hasattr(real, attr):
                    self.problem(f"{path}.{attr}", "not in the real package")
                continue
            value = member.__func__ if isinstance(member, staticmethod) else getattr(fake, attr)
            self.name(f"{path}.{attr}", value, real, attr, owner=fake)

    def callable(self, path: str, fake: Any, real: Any, owner: Any = None) -> None:
        """Compare a callable's parameters: accepted, required and positional (see the module's docstring)."""
        fake_sigs = _signatures(fake)
        real_sigs, python_positions = _real_signatures(path, real, owner)
        if fake_sigs is None or real_sigs is None:
            self.report["not_compared"].append(f"{path} (no readable signature in the "
                                               f"{'double' if fake_sigs is None else 'real package'})")
            return
        self.report["signatures"] += 1
        self.report["compared"].append(path)
        fake_params, shown = fake_sigs[0], f"double {_show(fake_sigs)}, real {_show(real_sigs)}"
        extra = _extra_params(fake_params, real_sigs)
        if extra:
            self.problem(path, f"the real one does not accept {', '.join(extra)}; {shown}")
        unrequired = _unrequired_params(fake_params, real_sigs)
        if unrequired:
            self.problem(path, f"the real one requires {', '.join(unrequired)}, the double does not; {shown}")
        misplaced = _misplaced_params(fake_params, real_sigs) if python_positions else []
        if misplaced:
            self.problem(path, f"positional {'; '.join(misplaced)}; {shown}")

    def ufunc(self, path: str, fake: Any, real: Any) -> None:
        """A ufunc of the double is a ufunc in the real package, with as many inputs and outputs."""
        self.report["signatures"] += 1
        self.report["compared"].append(path)
        arity = (getattr(fake, "nin", None), getattr(fake, "nout", None))
        real_arity = (getattr(real, "nin", None), getattr(real, "nout", None))
        if type(real).__name__ != "ufunc" or arity != real_arity:
            self.problem(path, f"a ufunc of (nin, nout) {arity}; real: {type(real).__name__} {real_arity}")

    def enum(self, path: str, fake: enum.EnumMeta, real: Any) -> None:
        """Compare an enum's members (names, aliases included, and values) with the real class's."""
        self.report["enums"] += 1
        self.report["compared"].append(path)
        for member, value in fake.__members__.items():
            self.report["enum_members"] += 1
            if not hasattr(real, member):
                self.problem(path, f"{member} ({value.value}) is not a member of the real one")
                continue
            real_member = getattr(real, member)
            real_value = getattr(real_member, "value", real_member)
            if value.value != real_value:
                self.problem(path, f"{member} is {value.value!r} in the double, {real_value!r} in the real one")
            elif isinstance(value, int) and not isinstance(real_member, int):
                self.problem(path, f"{member} is an int in the double, a {type(real_member).__name__} in the real one")
        unoffered = sorted(set(getattr(real, "__members__", {})) - set(fake.__members__))
        if unoffered:
            self.report["members_not_offered"][path] = unoffered


def _offered(module: types.ModuleType) -> list[tuple[str, Any]]:
    """A double module's public names: what it defines or re-exports, not the modules and typing names it uses."""
    out = []
    for name in dir(module):
        value = getattr(module, name)
        if name.startswith("_") or name == "annotations":
            continue
        if isinstance(value, types.ModuleType) and not value.__name__.startswith(_EMULATION):
            continue  # an import (numpy, os, ...), not an offered name
        if getattr(value, "__module__", "") in ("typing", "collections.abc", "__future__"):
            continue
        out.append((name, value))
    return out


def _report(package: str) -> dict[str, Any]:
    """Compare every double of ``package`` ("cupy", "nvmath" or "cudnn") with the real modules at its paths."""
    import warnings  # noqa: PLC0415

    warnings.simplefilter("ignore")
    modules_of = {"cupy": "_MODULES", "nvmath": "_NVMATH_MODULES", "cudnn": "_CUDNN_MODULES"}
    importlib.import_module(package)  # the real package first, before anything of mxlite's is imported
    import mxlite._emulation.install as emu  # noqa: PLC0415 - importing it installs nothing

    modules = getattr(emu, modules_of[package])
    real = {public: importlib.import_module(public) for public in modules}
    assert all(_EMULATION not in (m.__file__ or "") for m in real.values()), "a double shadows the real package"
    walk = _Walk()
    for public, private in modules.items():
        fake_mod = importlib.import_module(f"{_EMULATION}.{private}")
        for name, value in _offered(fake_mod):
            walk.name(f"{public}.{name}", value, real[public], name)
    return walk.report


def _run(package: str) -> dict[str, Any]:
    """The report of ``package``, from this file run as a script where the emulation is not installed; printed."""
    env = {k: v for k, v in os.environ.items() if k != "MXLITE_EMULATE_GPUS"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, _SCRIPT, package], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{package}: compared {report['names']} names, {report['signatures']} signatures, {report['enums']} enums "
          f"({report['enum_members']} members), {report['constants']} constants in "
          f"{time.perf_counter() - start:.1f} s\nnot compared: {report['not_compared']}\n"
          f"real enum members the double does not offer: {report['members_not_offered']}")
    return report


def _check_coverage(report: dict[str, Any], names: int, signatures: int, must: set[str]) -> None:
    """The walk compared at least ``names`` names and ``signatures`` signatures, ``must`` among them (so an empty
    or broken walk cannot pass)."""
    assert report["names"] >= names, report["names"]
    assert report["signatures"] >= signatures, report["signatures"]
    assert must <= set(report["compared"]), sorted(must - set(report["compared"]))


def _lines(problems: list[list[str]]) -> str:
    """Mismatches as a message, one a line."""
    return "\n".join(f"{path}: {what}" for path, what in problems)


@pytest.mark.real_libs
def test_cupy_double_matches_real_cupy():
    """fakecupy (cupy, cupy.cuda and its submodules with cupy.cuda.nccl, random, linalg, lib) and fakecupyx."""
    probe("cupy", "import cupy, cupy.cuda.nccl as n; assert n.available")
    report = _run("cupy")
    _check_coverage(report, 600, 450, {
        "cupy.cuda.Stream.begin_capture", "cupy.cuda.Stream.end_capture", "cupy.cuda.Stream.is_capturing",
        "cupy.cuda.graph.Graph.launch", "cupy.cuda.graph.Graph.upload", "cupy.cuda.graph.Graph.debug_dot_str",
        "cupy.cuda.Graph.launch", "cupy.cuda.set_allocator", "cupy.cuda.memory.get_allocator", "cupy.RawModule",
        "cupy.cuda.nccl.NcclCommunicator", "cupy.cuda.nccl.NcclCommunicator.allReduce", "cupy.add",
        "cupyx.scatter_add"})
    assert not report["problems"], _lines(report["problems"])


@pytest.mark.real_libs
def test_nvmath_double_matches_real_nvmath():
    """fakenvmath: ``nvmath.CudaDataType`` and ``nvmath.bindings.cublas`` (handles, modes, the GEMMs, the enums)."""
    probe("nvmath", "import nvmath.bindings.cublas")
    report = _run("nvmath")
    _check_coverage(report, 20, 15, {
        "nvmath.CudaDataType", "nvmath.bindings.cublas.gemm_ex", "nvmath.bindings.cublas.gemm_strided_batched_ex",
        "nvmath.bindings.cublas.set_workspace", "nvmath.bindings.cublas.Operation",
        "nvmath.bindings.cublas.ComputeType", "nvmath.bindings.cublas.cuBLASError"})
    assert report["enums"] >= 8 and report["enum_members"] >= 100, (report["enums"], report["enum_members"])
    assert not report["problems"], _lines(report["problems"])


@pytest.mark.real_libs
def test_cudnn_double_matches_real_cudnn_frontend():
    """fakecudnn: the frontend's functions, ``pygraph`` (its generated builders compared with the compiled
    ``backend_graph`` methods they lower to), ``Tensor``, ``Handle`` and the enums."""
    probe("cudnn", "import cudnn; cudnn.pygraph; cudnn._compiled_module.backend_graph")
    report = _run("cudnn")
    _check_coverage(report, 30, 25, {
        "cudnn.pygraph", "cudnn.pygraph.tensor", "cudnn.pygraph.conv_fprop", "cudnn.pygraph.conv_dgrad",
        "cudnn.pygraph.conv_wgrad", "cudnn.pygraph.batchnorm", "cudnn.pygraph.batchnorm_inference",
        "cudnn.pygraph.batchnorm_backward", "cudnn.pygraph.execute", "cudnn.create_handle", "cudnn.set_stream",
        "cudnn.data_type", "cudnn.heur_mode"})
    assert not report["problems"], _lines(report["problems"])


# -- the comparison itself, without the real packages ------------------------------------------------------------
def _doc(name: str, doc: str) -> Any:
    """A stand-in for a compiled callable: a name and a docstring, no readable signature."""
    return types.SimpleNamespace(__name__=name, __doc__=doc)


def test_docstring_signatures_keep_kinds_defaults_and_overloads():
    """Cython, pybind11 and nanobind signature lines give each parameter's kind and whether it has a default."""
    nanobind = _doc("batchnorm", "batchnorm(self, input: m.tensor, mean: m.tensor | None, peer_stats: "
                    "collections.abc.Sequence[m.tensor] = [], name: str = '') -> list[m.tensor]")
    assert _doc_signatures(nanobind) == [[("input", "pk", True), ("mean", "pk", True), ("peer_stats", "pk", False),
                                          ("name", "pk", False)]]
    cython = _doc("f", "f(int n, b=1, *, c=None, **kw)\n\nDoes f.")
    assert _doc_signatures(cython) == [[("n", "pk", True), ("b", "pk", False), ("c", "k", False),
                                        ("kw", "**", False)]]
    pybind = _doc("g", "g(*args, **kwargs)\nOverloaded function.\n\n1. g(self, a: int) -> None\n\n"
                  "2. g(self, a: int, b: str = 'x, y', /, *rest) -> None\n")
    assert _doc_signatures(pybind)[1:] == [[("a", "pk", True)],
                                           [("a", "p", True), ("b", "p", False), ("rest", "*", False)]]
    assert _doc_signatures(_doc("h", "Some prose about h.")) is None


def test_comparison_finds_each_kind_of_mismatch():
    """Extra parameters, parameters the real callable requires that the double does not, and moved positions."""
    def real(handle, m, n, alpha=1.0, *, stream=None):
        """The real binding."""

    def loose(handle, m, n=0, alpha=1.0, beta=0.0):
        """A double that gives n a default and accepts a beta the real one does not."""

    def swapped(handle, n, m, alpha=1.0, *, stream=None):
        """A double with m and n swapped."""

    real_sigs = _signatures(real)
    assert _extra_params(_signatures(loose)[0], real_sigs) == ["beta"]
    assert _unrequired_params(_signatures(loose)[0], real_sigs) == ["n"]
    assert _misplaced_params(_signatures(loose)[0], real_sigs) == [
        "beta (position 4: the real one takes 4 positionally)"]
    assert _misplaced_params(_signatures(swapped)[0], real_sigs) == [
        "n (position 1: the real one's is m)", "m (position 2: the real one's is n)"]
    assert not (_extra_params(_signatures(swapped)[0], real_sigs) or _unrequired_params(_signatures(swapped)[0],
                                                                                         real_sigs))
    # over overloads: accepted if one overload accepts it, required if every overload requires it
    overloads = [[("x", "pk", True), ("pad", "pk", False)], [("x", "pk", True), ("pre", "pk", True)]]
    assert _extra_params([("x", "pk", True), ("pad", "pk", False), ("pre", "pk", False)], overloads) == []
    assert _unrequired_params([("x", "pk", False), ("pre", "pk", False)], overloads) == ["x"]


def test_walk_compares_enums_and_constants():
    """An enum member with another value, one the real enum lacks, and a constant with another value are reported;
    members the double leaves out are listed, not failed."""
    class Real(enum.Enum):
        FLOAT = 1
        HALF = 3
        NOT_SET = 0

    class Double(enum.Enum):
        FLOAT = 0
        HALF = 3
        INT4 = 20

    real_module = types.SimpleNamespace(data_type=Real, VERSION=2)
    walk = _Walk()
    walk.name("m.data_type", Double, real_module, "data_type")
    walk.name("m.VERSION", 3, real_module, "VERSION")
    walk.name("m.extra", 1, real_module, "extra")
    assert walk.report["problems"] == [
        ["m.data_type", "FLOAT is 0 in the double, 1 in the real one"],
        ["m.data_type", "INT4 (20) is not a member of the real one"],
        ["m.VERSION", "double 3, real 2"], ["m.extra", "not in the real package"]]
    assert walk.report["members_not_offered"] == {"m.data_type": ["NOT_SET"]}
    assert (walk.report["enums"], walk.report["enum_members"], walk.report["constants"]) == (1, 3, 1)


if __name__ == "__main__":
    print(json.dumps(_report(sys.argv[1])))

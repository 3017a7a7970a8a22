"""Compile the project's CUDA sources with g++ for the HOST and launch them the way CuPy does.

Two builds of the same unmodified source:

* the **fiber build** (default), for the emulated GPUs: real block sizes, one fiber per CUDA
  thread, shuffled schedules; it proves a kernel's results, not its speed;
* the **serial build** (``HostModule(..., serial=True)``), for CPU devices: one thread per block,
  with ``threadIdx``/``blockDim`` compile-time constants, so a kernel's block loop
  ``for (i = begin + threadIdx.x; i < end; i += blockDim.x)`` is a unit-stride loop that g++
  vectorises (``-O3``); blocks run in order on the calling thread (``runtime_serial.cpp``). It is
  how CPU devices run the fused optimizer updates at memory speed, with the kernels' own
  arithmetic. A serial launch takes ``block=1`` only; code that needs real threads (warp
  shuffles over more than lane 0, dynamic shared memory) fails the launch with a message.

Why the fiber build: CI has no GPU, yet ``kernels/*.cu`` must be checked against their NumPy twins. This module
builds an unmodified CUDA source into a shared library (``g++ -shared``, loaded with ctypes) and
launches its kernels with CuPy's calling convention: ``HostModule`` mirrors ``cupy.RawModule``
(code, options, name_expressions), ``HostKernel.__call__(grid, block, args, shared_mem, stream)``
mirrors ``cupy.RawKernel``, including how arguments are packed (an array passes its data
pointer, a NumPy scalar its own bytes, a Python int an int64, a Python float a float64, a bool a
bool). Unlike CuPy, every argument is checked against the kernel's real C++ signature.

Design:

* ``cuda_host.h`` (force-included) defines the CUDA built-ins for g++: the qualifiers,
  ``threadIdx``/``blockIdx``/``blockDim``/``gridDim``, ``__syncthreads``, warp shuffles and votes,
  atomics and math intrinsics. ``__half``/``__nv_bfloat16`` are CUDA's own ``cuda_fp16.h`` /
  ``cuda_bf16.h`` host code from a pip package (:func:`cuda_include_dirs`).
* Two build-time rewrites of the source text (line numbers kept): ``extern __shared__ T name[];``
  (function scope, the usual form) becomes a pointer to the launch's dynamic shared buffer
  (``shared_mem`` bytes, poisoned with 0xff bytes before each block); recognised inline PTX
  ``asm(...)`` statements (``add/sub/mul/div/fma/sqrt/neg/abs/min/max`` ``.rn`` [``.ftz``] ``.f32``/
  ``.f64``, ``mov.b32``/``.b64``, special registers such as ``%laneid``) become calls of host
  functions; any other PTX instruction is a build error naming it.
* For each name expression (``'adam_update<float>'``) the translation unit gets an ``extern "C"``
  launch entry and a signature entry; template deduction on the kernel's function pointer gives
  each parameter's kind (pointer/value), type code, width and const-ness (:class:`Param`).
* ``runtime_fibers.cpp`` runs the threads of a block as fibers (one 64 KiB stack each, from a
  pool) on one OS thread. A fiber yields at ``__syncthreads`` and at every warp operation; the
  scheduler completes a barrier when every thread of the block waits there, and a warp
  operation when every live lane of its mask does (real 32-lane warp semantics for the
  shuffles). Blocks run one after another.

What the shuffle proves: blocks, and the fibers of a block within each round, run in an order
drawn from a seed (``seed=`` of the module or the launch, else ``MXLITE_HOSTCUDA_SEED``, else
:data:`DEFAULT_SEED`). A kernel whose result depends on the order of threads between two
barriers (a missing ``__syncthreads``, a race on shared memory, a reduction order taken for
granted) gives different results for different seeds; a barrier that can never complete (some
threads exited or wait elsewhere) raises :class:`HostCudaLaunchError` naming the kernel, block
and threads, instead of hanging.

What the host build cannot show: the GPU memory model (fibers switch only at barriers and
warp operations, so a data race inside one segment, e.g. a non-atomic read-modify-write by two
threads, never interleaves; stale caches and fences are invisible); warp lockstep beyond
shuffles, votes and barriers (code relying on implicit warp-synchronous execution runs one
lane at a time); the GPU's flush-to-zero, its canonical NaNs and the rounding of its fast
special functions (``rsqrtf``, ``__expf``, ...: here IEEE host arithmetic, subnormals kept, no
a*b+c contraction); the reset of ``__shared__`` variables between blocks (static shared
variables keep their values from the previous block); code under ``#ifdef __CUDA_ARCH__``;
and speed.

NVRTC options: ``-std=c++NN`` sets the C++ standard (default C++17), ``-D``/``-U``/``-I`` (and
their long forms) pass through; architecture, debug/line-info, ``-ftz``, ``-fmad``,
``-prec-div``, ``-prec-sqrt``, ``--use_fast_math``, ``-rdc``, register and similar code
generation options are accepted and ignored (the host always keeps subnormals, never contracts
multiply-adds and never uses fast math, which is what the NumPy twins do). Any other option
raises ValueError.

Builds are cached in ``MXLITE_HOSTCUDA_CACHE`` (else ``~/.cache/mxlite/hostcuda``) under a
SHA-256 of everything that goes into them (source after rewriting, entries, flags, cuda_host.h,
the runtime, CUDA's headers, the g++ version); concurrent builders (MPI ranks) write to
temporary files and rename atomically. Per set of flags, a ``support-*`` folder holds a
precompiled cuda_host.h and the compiled runtime, so a module build only compiles its own
source (about 0.3 s for a small kernel, 2-3 s for ``optimizers.cu``; the first build of a flag
set adds about 2 s). ``MXLITE_HOSTCUDA_CXX`` names another g++ executable. Fibers switch with a
few instructions of x86-64 assembly (callee-saved registers, MXCSR, x87 control word), or with
``swapcontext`` on other machines or with ``-DHOSTCUDA_USE_UCONTEXT``; kernel code is built
with ``-fstack-clash-protection`` so that a stack overflow hits a guard page and is reported.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

__all__ = ["DEFAULT_SEED", "HostCudaBuildError", "HostCudaError", "HostCudaLaunchError", "HostCudaSetupError",
           "HostKernel", "HostModule", "Param", "build_count", "cache_dir", "cuda_include_dirs", "rewrite_source"]

DEFAULT_SEED = 0x5EED  # the scheduling seed when neither the call, the module nor the environment gives one
_FORMAT = "hostcuda-1"  # part of every cache key: bump when the generated code changes meaning
_HERE = os.path.dirname(os.path.abspath(__file__))
_HEADER = os.path.join(_HERE, "cuda_host.h")
_RUNTIMES = {False: os.path.join(_HERE, "runtime_fibers.cpp"), True: os.path.join(_HERE, "runtime_serial.cpp")}
_ERR_LEN = 8192
_COMPILE_LINES = 40  # lines of g++ output quoted in a build error
_MAX_BLOCK = (1024, 1024, 64)
_MAX_GRID = (2**31 - 1, 65535, 65535)
_MAX_THREADS = 1024
_MAX_SHARED = 48 * 1024


class HostCudaError(RuntimeError):
    """Base class of the host CUDA build's errors."""


class HostCudaSetupError(HostCudaError):
    """The toolchain is incomplete: no g++, or no pip package with CUDA's fp16/bf16 headers."""


class HostCudaBuildError(HostCudaError):
    """g++ rejected the source, or the source uses inline PTX the rewriter does not know."""


class HostCudaLaunchError(HostCudaError):
    """A launch failed inside the runtime: a barrier that can never complete, a memory fault,
    ``__trap()``, a C++ exception, an invalid configuration. ``code`` is the runtime's error code
    (1 deadlock, 2 signal, 3 exception, 4 configuration, 5 trap, 6 misuse)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


class Param(NamedTuple):
    """One kernel parameter as the C++ signature declares it.

    kind: ``'ptr'`` or ``'value'``; code: the value's (or pointee's) type, one of ``'float'``,
    ``'double'``, ``'half'``, ``'bf16'``, ``'int'`` (signed), ``'uint'``, ``'bool'``, ``'void'``,
    ``'pointer'``, ``'other'``; width: its size in bytes (0 for void); is_const: a pointer to const
    (the kernel only reads through it; always False for values).
    """

    kind: str
    code: str
    width: int
    is_const: bool


# -- locating CUDA's headers -----------------------------------------------------------------------
_REQUIRED_HEADERS = ("cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h", "cuda_bf16.hpp", "vector_types.h",
                     "crt/host_defines.h", "nv/target")
# (description, pip packages, include folders under site-packages/nvidia)
_LAYOUTS = (
    ("CUDA 13", "nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl", ("cu13/include",)),
    ("CUDA 12", "nvidia-cuda-runtime-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-cccl-cu12",
     ("cuda_runtime/include", "cuda_nvcc/include", "cuda_cccl/include")),
)
_include_dirs: tuple[str, ...] | None = None


def _nvidia_roots() -> list[str]:
    roots: list[str] = []
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        roots += [str(p) for p in spec.submodule_search_locations]
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "nvidia")
        if os.path.isdir(candidate) and candidate not in roots:
            roots.append(candidate)
    return roots


def cuda_include_dirs() -> tuple[str, ...]:
    """The include folders holding CUDA's ``cuda_fp16.h``/``cuda_bf16.h`` and what they include.

    Looked up in the installed pip packages (``site-packages/nvidia/...``), never in a
    hand-installed toolkit: the CUDA 13 set (``nvidia-cuda-runtime``, ``nvidia-cuda-crt``,
    ``nvidia-cuda-cccl``: ``nvidia/cu13/include``) or the CUDA 12 set
    (``nvidia-cuda-runtime-cu12``, ``nvidia-cuda-nvcc-cu12`` for ``crt/``, ``nvidia-cuda-cccl-cu12``
    for ``nv/target``).

    Raises:
        HostCudaSetupError: no complete set is installed (the message names the packages).
    """
    global _include_dirs
    if _include_dirs is not None:
        return _include_dirs
    partial = []
    for root in _nvidia_roots():
        for _label, _packages, folders in _LAYOUTS:
            dirs = [os.path.join(root, f) for f in folders if os.path.isdir(os.path.join(root, f))]
            if not dirs:
                continue
            missing = [h for h in _REQUIRED_HEADERS if not any(os.path.isfile(os.path.join(d, h)) for d in dirs)]
            if not missing:
                _include_dirs = tuple(dirs)
                return _include_dirs
            partial.append(f"{', '.join(dirs)} lacks {', '.join(missing)}")
    found = f" Found only: {'; '.join(partial)}." if partial else ""
    raise HostCudaSetupError(
        "the host CUDA build needs CUDA's cuda_fp16.h/cuda_bf16.h host headers from pip packages: "
        f"pip install {_LAYOUTS[0][1]}  (CUDA 13 headers, about 7 MB), or the CUDA 12 set "
        f"pip install {_LAYOUTS[1][1]}.{found}")


# -- source rewriting ----------------------------------------------------------------------------------
def _mask(code: str) -> str:
    """``code`` with comments and the insides of string/char literals blanked (same length, newlines kept)."""
    out = list(code)
    i, n = 0, len(code)

    def blank(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            while j > 0 and code[j - 1] == "\\" and j < n:  # a line comment continued by backslash
                k = code.find("\n", j + 1)
                j = n if k < 0 else k
            blank(i, j)
            i = j
        elif code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and code.startswith('R"', i) and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', code[i:])
            if not m:
                i += 1
                continue
            end = code.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            blank(i + 2, end - 1)
            i = end
        elif c in "\"'":
            prefix = re.search(r"(?:\bu8|\b[uUL])$", code[max(0, i - 3):i])
            if c == "'" and i > 0 and code[i - 1].isalnum() and not prefix:
                i += 1  # a digit separator (1'000'000)
                continue
            j = i + 1
            while j < n and code[j] != c and code[j] != "\n":
                j += 2 if code[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _line_of(code: str, pos: int) -> int:
    return code.count("\n", 0, pos) + 1


def _matching(masked: str, open_pos: int) -> int:
    """Index of the parenthesis closing the one at ``open_pos`` (in masked text)."""
    depth = 0
    for k in range(open_pos, len(masked)):
        ch = masked[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return k
    return -1


def _split_top(text: str, masked: str, sep: str) -> list[str]:
    """Split ``text`` at ``sep`` characters that are outside brackets (judged on ``masked``)."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(masked):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    return parts


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "", "0": "\0"}


def _string_literals(text: str) -> str:
    body = "".join(m.group(1) for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', text, re.S))
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body, flags=re.S)


_SPECIAL_REGS = {
    "%laneid": "::hostcuda::lane_id()", "%warpid": "::hostcuda::warp_id()",
    "%clock": "(unsigned)::hostcuda::clock_ticks()", "%clock64": "::hostcuda::clock_ticks()",
    **{f"%tid.{a}": f"threadIdx.{a}" for a in "xyz"}, **{f"%ntid.{a}": f"blockDim.{a}" for a in "xyz"},
    **{f"%ctaid.{a}": f"blockIdx.{a}" for a in "xyz"}, **{f"%nctaid.{a}": f"gridDim.{a}" for a in "xyz"},
}
_FLOAT_OPS = {"add": 2, "sub": 2, "mul": 2, "div": 2, "fma": 3, "sqrt": 1, "neg": 1, "abs": 1, "min": 2, "max": 2}
_NEEDS_RN = {"div", "fma", "sqrt"}  # div.f32 alone would be div.approx/full: only .rn is exact IEEE
_MOV_TYPES = {"b16", "u16", "s16", "b32", "u32", "s32", "f32", "b64", "u64", "s64", "f64"}
_SUPPORTED_PTX = ("add|sub|mul|div|fma|sqrt|neg|abs|min|max[.rn][.ftz].f32|.f64 (div/fma/sqrt need .rn), "
                 "mov.b16|b32|b64|u32|s32|f32|u64|s64|f64, special registers "
                 + " ".join(sorted(_SPECIAL_REGS)))


def _ptx_statement(instr: str, operands: list[str], n_out: int, where: str) -> str:
    """One PTX instruction as a C++ statement on the asm operand expressions."""
    m = re.match(r"^([a-z][\w.]*)\s*(.*)$", instr, re.S)
    if not m or instr.startswith("@"):
        raise HostCudaBuildError(f"{where}: unsupported PTX instruction {instr!r} for the host build "
                                 f"(supported: {_SUPPORTED_PTX})")
    opcode, rest = m.group(1), m.group(2)
    tokens = [t.strip() for t in rest.split(",")] if rest.strip() else []

    def operand(tok: str) -> str:
        if re.fullmatch(r"%\d+", tok):
            k = int(tok[1:])
            if k >= len(operands):
                raise HostCudaBuildError(f"{where}: PTX operand {tok} out of range in {instr!r}")
            return operands[k]
        if tok in _SPECIAL_REGS:
            return _SPECIAL_REGS[tok]
        if re.fullmatch(r"0[fF][0-9a-fA-F]{8}", tok):
            return f"::hostcuda::ptx::f32_bits(0x{tok[2:]}u)"
        if re.fullmatch(r"0[dD][0-9a-fA-F]{16}", tok):
            return f"::hostcuda::ptx::f64_bits(0x{tok[2:]}ull)"
        if re.fullmatch(r"-?(?:0[xX][0-9a-fA-F]+|\d+)[uU]?", tok):
            return tok
        raise HostCudaBuildError(f"{where}: unsupported PTX operand {tok!r} in {instr!r}")

    def destination(tok: str) -> str:
        if not re.fullmatch(r"%\d+", tok) or int(tok[1:]) >= n_out:
            raise HostCudaBuildError(f"{where}: the destination of {instr!r} must be an output operand")
        return operand(tok)

    parts = opcode.split(".")
    base, mods = parts[0], parts[1:]
    if base == "mov" and len(mods) == 1 and mods[0] in _MOV_TYPES and len(tokens) == 2:
        return f"::hostcuda::ptx::mov({destination(tokens[0])}, {operand(tokens[1])});"
    if base in _FLOAT_OPS and mods and mods[-1] in ("f32", "f64"):
        kind, flags = mods[-1], mods[:-1]
        rounding = [f for f in flags if f in ("rn", "rz", "rm", "rp")]
        ftz = "ftz" in flags
        other = [f for f in flags if f not in ("rn", "ftz")]
        ok = (not other and (rounding == ["rn"] or (not rounding and base not in _NEEDS_RN))
              and not (ftz and kind == "f64") and not (rounding and base in ("neg", "abs", "min", "max"))
              and len(tokens) == _FLOAT_OPS[base] + 1)
        if ok:
            args = [operand(t) for t in tokens[1:]]
            if kind == "f32":
                args.append("true" if ftz else "false")
            return f"{destination(tokens[0])} = ::hostcuda::ptx::{base}_{kind}({', '.join(args)});"
    raise HostCudaBuildError(f"{where}: unsupported PTX instruction {instr!r} for the host build "
                             f"(supported: {_SUPPORTED_PTX})")


def _rewrite_asm(code: str, masked: str, filename: str) -> str:
    pattern = re.compile(r"(?<![\w$])(?:asm|__asm__|__asm)\b(?:\s*(?:volatile|__volatile__|inline|goto)\b)*\s*\(")
    pieces, last = [], 0
    for m in pattern.finditer(masked):
        if m.start() < last:
            continue
        where = f"{filename}:{_line_of(code, m.start())}"
        open_pos = m.end() - 1
        close = _matching(masked, open_pos)
        semi = close + 1
        while semi < len(masked) and masked[semi] in " \t\r\n":
            semi += 1
        if close < 0 or semi >= len(masked) or masked[semi] != ";":
            raise HostCudaBuildError(f"{where}: cannot parse this asm statement for the host build")
        inner, inner_masked = code[open_pos + 1:close], masked[open_pos + 1:close]
        sections = _split_top(inner, inner_masked, ":")
        masked_sections = _split_top(inner_masked, inner_masked, ":")
        template = _string_literals(sections[0])
        outputs: list[str] = []
        names: dict[str, int] = {}
        n_out = 0
        for s, (section, msection) in enumerate(zip(sections[1:3], masked_sections[1:3])):
            if not section.strip():
                continue
            for op_text in _split_top(section, msection, ","):
                om = re.match(r'^\s*(?:\[\s*(\w+)\s*\])?\s*"([^"]*)"\s*\((.*)\)\s*$', op_text, re.S)
                if not om:
                    raise HostCudaBuildError(f"{where}: cannot parse asm operand {op_text.strip()!r}")
                if om.group(1):
                    names[om.group(1)] = len(outputs)
                outputs.append(f"({om.group(3).strip()})")
                n_out += s == 0
        template = re.sub(r"%\[(\w+)\]", lambda t, named=names: f"%{named.get(t.group(1), 10**6)}", template)
        template = template.replace("%%", "%")
        statements = []
        for instr in re.split(r"[;\n]", template):
            instr = instr.strip()
            if instr:
                statements.append(_ptx_statement(instr, outputs, n_out, where))
        span = code[m.start():semi + 1]
        newline = "\\\n" if "\\\n" in span else "\n"
        replacement = "{ " + " ".join(statements) + " }" + newline * span.count("\n")
        pieces += [code[last:m.start()], replacement]
        last = semi + 1
    pieces.append(code[last:])
    return "".join(pieces)


def _rewrite_extern_shared(code: str, masked: str, filename: str) -> str:
    pattern = re.compile(r"\bextern\s+__shared__\b([^;{}]*?)\[\s*\]\s*;")
    pieces, last = [], 0
    for m in pattern.finditer(masked):
        decl = code[m.start(1):m.end(1)]
        decl = re.sub(r"(?:__align__|alignas)\s*\([^)]*\)|__attribute__\s*\(\(.*?\)\)", " ", decl)
        dm = re.match(r"^\s*(.*?)\s*\b([A-Za-z_]\w*)\s*$", decl, re.S)
        if not dm or not dm.group(1).strip():
            raise HostCudaBuildError(f"{filename}:{_line_of(code, m.start())}: cannot parse this extern __shared__ "
                                     "declaration for the host build")
        type_, name = " ".join(dm.group(1).split()), dm.group(2)
        span = code[m.start():m.end()]
        # The lambda with a capture-default only compiles at function scope: a namespace-scope
        # `extern __shared__` is a build error instead of a pointer fixed at load time.
        replacement = (f"{type_} *const {name} = [&] {{ return reinterpret_cast<{type_} *>("
                       f"::hostcuda::dynamic_shared()); }}();" + "\n" * span.count("\n"))
        pieces += [code[last:m.start()], replacement]
        last = m.end()
    pieces.append(code[last:])
    return "".join(pieces)


def rewrite_source(code: str, filename: str = "<inline>") -> str:
    """The CUDA source as g++ compiles it: ``extern __shared__`` arrays and inline PTX rewritten.

    Line numbers are kept, so g++'s messages point at the original lines.

    Raises:
        HostCudaBuildError: an ``asm`` statement with PTX the host build does not implement, or a
            declaration the rewriter cannot parse.
    """
    code = _rewrite_asm(code, _mask(code), filename)
    return _rewrite_extern_shared(code, _mask(code), filename)


def _plain_kernels(code: str) -> list[str]:
    """Names of the non-template ``__global__`` functions of ``code`` (for name_expressions=None)."""
    masked = _mask(code)
    names: list[str] = []
    for m in re.finditer(r"\b__global__\b", masked):
        head = masked[:m.start()]
        cut = max(head.rfind(";"), head.rfind("}"), head.rfind("{"))
        if re.search(r"\btemplate\b", head[cut + 1:]):
            continue
        nm = re.match(r"\s*(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                      r"([A-Za-z_]\w*)\s*\(", masked[m.end():])
        if nm and nm.group(1) not in names:
            names.append(nm.group(1))
    return names


# -- options ------------------------------------------------------------------------------------------
_IGNORED_OPTIONS = re.compile(
    r"^(?:-arch|--gpu-architecture|-code|-ftz|--ftz|-fmad|--fmad|-prec-div|--prec-div|-prec-sqrt|--prec-sqrt|"
    r"-use_fast_math|--use_fast_math|-lineinfo|--generate-line-info|-G|--device-debug|-rdc|"
    r"--relocatable-device-code|-dc|-dw|-ewp|--extensible-whole-program|-maxrregcount|--maxrregcount|-restrict|"
    r"--restrict|-dopt|--dopt|-default-device|--device-as-default-execution-space|-dlto|--dlink-time-opt|"
    r"-split-compile|--split-compile|-time|--time|-jump-table-density|-pch|--pch|-Xptxas|--ptxas-options|"
    r"-opt-info|-err-no|-no-source-include|--no-source-include|-builtin-move-forward|-builtin-initializer-list|"
    r"-extra-device-vectorization|-modify-stack-limit|-minimal)(?:=.*)?$")


def _map_options(options: Sequence[str]) -> tuple[str, list[str]]:
    std, flags = "c++17", []
    for opt in options:
        if not isinstance(opt, str):
            raise TypeError(f"options must be strings, got {opt!r}")
        m = re.fullmatch(r"--?std=(c\+\+\d\w)", opt)
        if m:
            std = m.group(1)
        elif re.match(r"^(-D|-U|-I)\S", opt):
            flags.append(opt)
        elif re.match(r"^--(define-macro|undefine-macro|include-path)=", opt):
            key, value = opt[2:].split("=", 1)
            flags.append({"define-macro": "-D", "undefine-macro": "-U", "include-path": "-I"}[key] + value)
        elif opt in ("-w", "--disable-warnings"):
            flags.append("-w")
        elif _IGNORED_OPTIONS.match(opt):
            continue
        else:
            raise ValueError(f"NVRTC option {opt!r} has no meaning in the host build (hostcuda accepts -std=, -D, -U, "
                             "-I, -w and ignores architecture, debug and fast-math/ftz/fmad options)")
    return std, flags


# -- building ----------------------------------------------------------------------------------------
_build_count = 0
_build_lock = threading.Lock()
_libraries: dict[str, ctypes.CDLL] = {}
_compiler_ids: dict[str, str] = {}


def build_count() -> int:
    """How many times this process has run g++ (cache hits do not count)."""
    return _build_count


def cache_dir() -> str:
    """Where built modules are kept: ``MXLITE_HOSTCUDA_CACHE``, else ``~/.cache/mxlite/hostcuda``."""
    return os.environ.get("MXLITE_HOSTCUDA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "mxlite",
                                                                   "hostcuda")


def _compiler() -> str:
    cxx = os.environ.get("MXLITE_HOSTCUDA_CXX", "g++")
    path = shutil.which(cxx)
    if path is None:
        raise HostCudaSetupError(f"the host CUDA build needs the C++ compiler {cxx!r} (g++), which is not on PATH")
    return path


def _compiler_version(cxx: str) -> str:
    """``cxx``'s path, version and target machine (part of every cache key), asked once per compiler."""
    found = _compiler_ids.get(cxx)
    if found is None:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=False).stdout
        machine = subprocess.run([cxx, "-dumpmachine"], capture_output=True, text=True, check=False).stdout
        found = _compiler_ids[cxx] = f"{cxx}\n{out}\n{machine}"
    return found


def _file_digest(path: str) -> bytes:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).digest()


def _run_compiler(command: list[str], what: str) -> None:
    global _build_count
    _build_count += 1
    try:
        result = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise HostCudaSetupError(f"cannot run the C++ compiler {command[0]!r} for the host build: {exc}") from exc
    if result.returncode != 0:
        lines = (result.stderr + result.stdout).splitlines()
        shown = "\n".join(lines[:_COMPILE_LINES])
        more = f"\n... ({len(lines) - _COMPILE_LINES} more lines)" if len(lines) > _COMPILE_LINES else ""
        raise HostCudaBuildError(f"g++ failed to compile {what} for the host (hostcuda):\n{shown}{more}")


def _support(base: list[str], digest_parts: list[bytes], runtime_source: str) -> tuple[str, str]:
    """(header to -include, runtime object) for one set of flags: built once, then shared by modules.

    The header is cuda_host.h next to its precompiled ``.gch``, so a module's translation unit
    does not parse CUDA's fp16/bf16 headers again, and the runtime is compiled only once.
    """
    key = hashlib.sha256(b"support\0" + "\0".join(base).encode() + b"\0" + b"".join(digest_parts)).hexdigest()
    root = cache_dir()
    folder = os.path.join(root, f"support-{key[:32]}")
    header, runtime = os.path.join(folder, "cuda_host.h"), os.path.join(folder, "runtime.o")
    if os.path.isfile(runtime):
        return header, runtime
    os.makedirs(root, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=root, prefix=".build-")
    try:
        shutil.copyfile(_HEADER, os.path.join(tmp, "cuda_host.h"))
        _run_compiler([*base, "-x", "c++-header", os.path.join(tmp, "cuda_host.h"), "-o",
                       os.path.join(tmp, "cuda_host.h.gch")], "cuda_host.h")
        _run_compiler([*base, "-include", _HEADER, "-c", runtime_source, "-o", os.path.join(tmp, "runtime.o")],
                      os.path.basename(runtime_source))
        os.chmod(tmp, 0o755)
        try:
            os.rename(tmp, folder)  # atomic; fails when a concurrent builder got there first (then use theirs)
        except OSError:
            if not os.path.isfile(runtime):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return header, runtime


# The serial build's extra flags: -O3 vectorises the block loops, with this machine's widest vectors
# (-march=native: the cache key then includes the target g++ resolves it to, so a cache shared by
# different machines never hands one a library built for another); errno and FP traps are never
# read, and leaving them out lets g++ use the vector square root and if-convert the NaN-keeping
# selects. None of this changes a result: every operation stays an IEEE operation in source order
# (-ffp-contract=off still forbids fused multiply-adds, and there is no fast math).
_SERIAL_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-fno-trapping-math", "-DHOSTCUDA_SERIAL")
_native_targets: dict[str, str] = {}


def _native_target(cxx: str) -> str:
    """What ``-march=native`` means to ``cxx`` on this machine: every target option it resolves to."""
    found = _native_targets.get(cxx)
    if found is None:
        found = subprocess.run([cxx, "-march=native", "-Q", "--help=target"], capture_output=True, text=True,
                               check=False).stdout
        _native_targets[cxx] = found
    return found


def _load(unit: str, filename: str, std: str, flags: list[str], serial: bool = False) -> ctypes.CDLL:
    """Build (or find in the cache) the shared library of one translation unit and load it."""
    cxx = _compiler()
    includes = cuda_include_dirs()
    runtime = _RUNTIMES[serial]
    optimise = list(_SERIAL_FLAGS) if serial else ["-O2"]
    # The optimisation flags come after -fno-fast-math, which would turn -fno-math-errno off again.
    base = [cxx, f"-std={std}", "-fPIC", "-pthread", "-ffp-contract=off", "-fno-fast-math", *optimise,
            "-fno-strict-aliasing", "-fexceptions", "-fvisibility=hidden", "-fstack-clash-protection", *flags,
            *(f"-I{d}" for d in includes)]
    digests = [_compiler_version(cxx).encode(), _FORMAT.encode()]
    if serial:
        digests.append(_native_target(cxx).encode())
    digests += [_file_digest(path) for path in (_HEADER, runtime, *(
        os.path.join(d, h) for d in includes for h in _REQUIRED_HEADERS[:4] if os.path.isfile(os.path.join(d, h))))]
    key = hashlib.sha256(unit.encode() + b"\0" + "\0".join(base).encode() + b"\0" + b"".join(digests))
    digest = key.hexdigest()
    with _build_lock:
        lib = _libraries.get(digest)
        if lib is not None:
            return lib
        folder = cache_dir()
        target = os.path.join(folder, f"{digest[:40]}.so")
        if not os.path.isfile(target):
            try:
                header, runtime_object = _support(base, digests, runtime)
                os.makedirs(folder, exist_ok=True)
                with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as tmp:
                    source = os.path.join(tmp, "unit.cpp")
                    with open(source, "w") as f:
                        f.write(unit)
                    output = os.path.join(tmp, "module.so")
                    _run_compiler([*base, "-include", header, "-shared", source, runtime_object, "-o", output],
                                  filename)
                    os.replace(source, target[:-3] + ".cpp")  # the translation unit, for reading errors later
                    os.replace(output, target)  # atomic: a concurrent builder sees no file or the whole new one
            except OSError as exc:  # g++ ran (or _run_compiler said why not): the cache folder is the problem
                raise HostCudaError(f"cannot build {filename} in the host build cache {folder}: {exc}. "
                                    "MXLITE_HOSTCUDA_CACHE names another folder") from exc
        lib = ctypes.CDLL(target)
        _libraries[digest] = lib
        return lib


# -- modules and kernels ------------------------------------------------------------------------------
_CODES = {"f": "float", "h": "half", "b": "bf16", "i": "int", "u": "uint", "?": "bool", "v": "void", "p": "pointer",
          "o": "other"}
_LAUNCH_ARGTYPES = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_ulonglong,
                    ctypes.c_char_p, ctypes.c_size_t]


def _default_seed() -> int:
    text = os.environ.get("MXLITE_HOSTCUDA_SEED")
    if not text:
        return DEFAULT_SEED
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError(f"MXLITE_HOSTCUDA_SEED must be an integer, got {text!r}") from None


class HostModule:
    """A CUDA source compiled for the host: the counterpart of ``cupy.RawModule(code=...)``.

    Args:
        code: the CUDA C++ source text.
        options: NVRTC options; mapped or ignored as the module docstring lists.
        name_expressions: the kernels to expose (``'k'``, ``'k<float>'``, ``'k<float, f16_wire>'``);
            None exposes every non-template ``__global__`` function of the source.
        name: the source's file name, used in compile errors and ``__FILE__``.
        seed: the scheduling seed of every launch (overridden per call); default
            ``MXLITE_HOSTCUDA_SEED``, else :data:`DEFAULT_SEED`. Unused by serial builds.
        serial: build for CPU devices (module docstring): one thread per block, blocks in order.

    Raises (at compile time, i.e. on :meth:`compile` or the first :meth:`get_function`):
        HostCudaSetupError: no g++ (or it cannot be run) or no CUDA header package.
        HostCudaBuildError: g++ failed (its first 40 lines of output and the file name are
            quoted) or the source has inline PTX the host build does not know.
        HostCudaError: the build cache folder cannot be written (the message names it).
        ValueError: an NVRTC option without a host meaning.
    """

    def __init__(self, code: str, options: tuple[str, ...] = (), name_expressions: Sequence[str] | None = None,
                 *, name: str = "<inline>", seed: int | None = None, serial: bool = False) -> None:
        if not isinstance(code, str):
            raise TypeError(f"code must be the CUDA source text, got {type(code).__name__}")
        self.code = code
        self.options = tuple(options)
        self.name_expressions = None if name_expressions is None else tuple(name_expressions)
        self.name = name
        self.serial = bool(serial)
        if seed is None:  # a serial build has no schedule to seed: MXLITE_HOSTCUDA_SEED is not its business
            seed = DEFAULT_SEED if self.serial else _default_seed()
        self.seed = int(seed)
        self._std, self._flags = _map_options(self.options)
        self._lib: ctypes.CDLL | None = None
        self._index: dict[str, int] = {}
        self._kernels: dict[str, HostKernel] = {}
        self._lock = threading.Lock()

    def _unit(self) -> str:
        names = list(self.name_expressions) if self.name_expressions is not None else _plain_kernels(self.code)
        self._index = {n: i for i, n in enumerate(names)}
        label = self.name.replace("\\", "/").replace('"', "'")
        lines = [f'#line 1 "{label}"', rewrite_source(self.code, self.name), ""]
        for i, expr in enumerate(names):
            c_name = expr.replace("\\", "\\\\").replace('"', '\\"')
            lines += [
                f'#line 1 "name expression {c_name}"',
                f'extern "C" __attribute__((visibility("default"))) int hostcuda_launch_{i}(void **args, '
                "const unsigned *grid, const unsigned *block, unsigned long long shared_mem, unsigned long long seed, "
                "char *err, size_t err_len) {",
                f'    return ::hostcuda::launch(&{expr}, "{c_name}", args, grid, block, shared_mem, seed, err, '
                "err_len);",
                "}",
                f'extern "C" __attribute__((visibility("default"))) int hostcuda_signature_{i}(char *buf, size_t len) '
                f"{{ return ::hostcuda::describe(&{expr}, buf, len); }}",
            ]
        return "\n".join(lines) + "\n"

    def compile(self, log_stream: Any = None) -> None:
        """Build (or load from the cache) the shared library now; ``log_stream`` is accepted and unused.

        Raises:
            HostCudaError (HostCudaSetupError, HostCudaBuildError), ValueError: see the class docstring.
        """
        with self._lock:
            if self._lib is None:
                self._lib = _load(self._unit(), self.name, self._std, self._flags, self.serial)

    def get_function(self, name: str) -> HostKernel:
        """The kernel of name expression ``name`` (compiling the module first if needed).

        Raises:
            KeyError: ``name`` is not among the module's name expressions (or plain kernels).
            HostCudaError (HostCudaSetupError, HostCudaBuildError), ValueError: from compiling, see the class
                docstring.
        """
        kernel = self._kernels.get(name)
        if kernel is not None:
            return kernel
        self.compile()
        if name not in self._index:
            raise KeyError(f"{name!r} is not a kernel of {self.name}: the module exposes {sorted(self._index)}")
        assert self._lib is not None
        kernel = HostKernel(self, name, self._lib, self._index[name])
        self._kernels[name] = kernel
        return kernel


def _normalise_dims(value: Any, what: str, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    if type(value) is tuple and len(value) == 1 and type(value[0]) is int and 1 <= value[0] <= limits[0]:
        return value[0], 1, 1  # the common (n,): what the checks below give, faster
    dims = value if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
    out = []
    for d, limit in zip(dims, limits):
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)):
            raise ValueError(f"{what} must be an int or a tuple of 1 to 3 ints, got {value!r}")
        if not 1 <= int(d) <= limit:
            raise ValueError(f"{what} {value!r}: each dimension must be in 1..{limit} (CUDA's limits)")
        out.append(int(d))
    while len(out) < 3:
        out.append(1)
    return out[0], out[1], out[2]


_addressof = ctypes.addressof
_from_buffer = ctypes.c_char.from_buffer  # a writeable buffer's first byte: where a NumPy array's data starts
_NUMBER_SCALARS = frozenset((np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
                             np.uint16, np.uint32, np.uint64))


def _array_info(arg: Any) -> tuple[int, np.dtype, bool] | None:
    """(address, dtype, writeable) of an array argument, or None for anything else."""
    if isinstance(arg, np.ndarray):
        return arg.__array_interface__["data"][0], arg.dtype, bool(arg.flags.writeable)
    data = getattr(arg, "data", None)
    ptr = getattr(data, "ptr", None)
    if ptr is not None and hasattr(arg, "dtype"):
        return int(ptr), np.dtype(arg.dtype), True
    interface = getattr(arg, "__cuda_array_interface__", None)
    if isinstance(interface, dict):
        address, read_only = interface["data"]
        return int(address), np.dtype(interface["typestr"]), not read_only
    return None


def _describe(arg: Any) -> str:
    info = _array_info(arg)
    if info is not None:
        return f"a {info[1].name} array ({type(arg).__module__}.{type(arg).__name__})"
    if isinstance(arg, np.generic):
        return f"a numpy.{type(arg).__name__} scalar ({arg.dtype.itemsize} bytes)"
    if isinstance(arg, bool):
        return "a Python bool"
    if isinstance(arg, int):
        return "a Python int (passed as int64, as CuPy does)"
    if isinstance(arg, float):
        return "a Python float (passed as float64, as CuPy does)"
    return f"{type(arg).__module__}.{type(arg).__name__}"


@functools.cache  # a launch checks every argument: keep it cheap (dtype.name is slow)
def _pointee_accepts(param: Param, dtype: np.dtype) -> bool:
    code, width = param.code, param.width
    if code in ("void", "other"):
        return True
    name = dtype.name
    if code == "pointer":
        return name in ("uint64", "int64")
    if dtype.itemsize != width and not (code == "bool" and name == "uint8"):
        return False
    if code == "float":
        return name == "float32"
    if code == "double":
        return name == "float64"
    if code == "half":
        return name == "float16"
    if code == "bf16":
        return name in ("uint16", "bfloat16")
    if code == "int":
        return dtype.kind == "i"
    if code == "uint":
        return dtype.kind == "u" or (width == 2 and name in ("float16", "bfloat16")) or (width == 1 and name == "bool")
    if code == "bool":
        return name in ("bool", "uint8")
    return False


@functools.cache
def _scalar_fits(code: str, width: int, dtype: np.dtype) -> bool:
    """Whether a NumPy scalar of ``dtype`` passes for a value parameter of type ``code`` and ``width`` bytes."""
    if dtype.itemsize != width:
        return False
    return {"float": dtype.name == "float32", "double": dtype.name == "float64", "half": dtype.name == "float16",
            "bf16": dtype.name in ("uint16", "bfloat16"), "int": dtype.kind == "i", "uint": dtype.kind == "u",
            "other": dtype.kind == "V"}.get(code, False)


def _value_bytes(param: Param, arg: Any) -> bytes | None:
    """The bytes a scalar argument passes for a value parameter, or None when it does not fit."""
    code, width = param.code, param.width
    if isinstance(arg, (bool, np.bool_)):
        return struct.pack("?", bool(arg)) if code == "bool" else None
    if isinstance(arg, np.generic):  # before int/float: numpy.float64 is a Python float
        return arg.tobytes() if _scalar_fits(code, width, arg.dtype) else None
    if isinstance(arg, int):
        if width == 8 and code == "int" and -(2**63) <= arg < 2**63:
            return struct.pack("<q", arg)
        if width == 8 and code == "uint" and 0 <= arg < 2**63:
            return struct.pack("<q", arg)
        return None
    if isinstance(arg, float):
        return struct.pack("<d", arg) if (code, width) == ("double", 8) else None
    return None


class HostKernel:
    """One kernel of a :class:`HostModule`: the counterpart of ``cupy.RawKernel``.

    Attributes:
        name: the name expression.
        signature: one :class:`Param` per C++ parameter, in order (a caller can treat pointers to
            const as reads and other pointers as reads and writes).
        param_types: the C++ spelling of each parameter's type.
    """

    def __init__(self, module: HostModule, name: str, lib: ctypes.CDLL, index: int) -> None:
        self.module = module
        self.name = name
        self._launch = getattr(lib, f"hostcuda_launch_{index}")
        self._launch.argtypes = _LAUNCH_ARGTYPES
        self._launch.restype = ctypes.c_int
        describe = getattr(lib, f"hostcuda_signature_{index}")
        describe.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        describe.restype = ctypes.c_int
        buf = ctypes.create_string_buffer(1 << 16)
        count = describe(buf, len(buf))
        if count < 0:
            raise HostCudaError(f"kernel {name!r}: its signature does not fit the description buffer")
        params, types = [], []
        for line in buf.value.decode().splitlines()[:count]:
            kind, code, width, const, cxx = line.split(" ", 4)
            code_name = _CODES[code]
            if code_name == "float" and width == "8":
                code_name = "double"
            params.append(Param("ptr" if kind == "p" else "value", code_name, int(width), const == "1"))
            types.append(cxx)
        self.signature: tuple[Param, ...] = tuple(params)
        self.param_types: tuple[str, ...] = tuple(types)
        # Launch-time caches (a launch of a tiny update is mostly Python): per parameter, the dtypes
        # seen and whether they fit; per thread, the argument slots and buffers, reused by every launch.
        self._fits: tuple[dict[np.dtype, bool], ...] = tuple({} for _ in params)
        self._tls = threading.local()

    def __repr__(self) -> str:
        return f"<HostKernel {self.name}({', '.join(self.param_types)}) of {self.module.name}>"

    def _mismatch(self, i: int, arg: Any, detail: str = "") -> TypeError:
        return TypeError(f"kernel {self.name!r} args[{i}]: the parameter is `{self.param_types[i]}`, got "
                         f"{_describe(arg)}{detail}")

    def _buffers(self) -> tuple[Any, Any, memoryview, Any, Any]:
        """This thread's (slots, pointers, slot bytes, dims, error buffer): made once, reused by every launch.

        Slot i (16 bytes) holds argument i's value or address, and pointers[i] points at it; a value
        wider than 16 bytes gets its own buffer per launch instead (:meth:`_pack`).
        """
        buffers = getattr(self._tls, "buffers", None)
        if buffers is None:
            n = max(len(self.signature), 1)
            slots = (ctypes.c_uint64 * (2 * n))()
            base = ctypes.addressof(slots)
            pointers = (ctypes.c_void_p * n)(*range(base, base + 16 * n, 16))
            buffers = (slots, pointers, memoryview(slots).cast("B"), (ctypes.c_uint * 6)(),
                       ctypes.create_string_buffer(_ERR_LEN))
            self._tls.buffers = buffers
        return buffers

    def _pack(self, args: Sequence[Any]) -> tuple[Any, Any, list[Any]]:
        n = len(self.signature)
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"kernel {self.name!r}: args must be a tuple, got {type(args).__name__}")
        if len(args) != n:
            raise TypeError(f"kernel {self.name!r} takes {n} arguments ({', '.join(self.param_types)}), "
                            f"got {len(args)}")
        slots, pointers, raw, _, _ = self._buffers()
        keep: list[Any] = []
        for i, (param, arg) in enumerate(zip(self.signature, args)):
            if param.kind == "ptr" and type(arg) is np.ndarray:  # the common case, checked as below, faster
                dtype = arg.dtype
                fits = self._fits[i].get(dtype)
                if fits is None:
                    fits = self._fits[i][dtype] = _pointee_accepts(param, dtype)
                if not fits:
                    raise self._mismatch(i, arg)
                try:  # a writeable, C-contiguous, non-empty array: its buffer starts at its data
                    slots[2 * i] = _addressof(_from_buffer(arg))
                except (TypeError, ValueError, BufferError):  # any other array: its interface says where
                    if not param.is_const and not arg.flags.writeable:
                        raise self._mismatch(i, arg, " that is read-only (the kernel may write through it)") from None
                    slots[2 * i] = arg.__array_interface__["data"][0]
                continue
            if param.kind == "value" and type(arg) in _NUMBER_SCALARS:
                dtype = arg.dtype  # a NumPy number: exactly its type and width (as _value_bytes checks)
                fits = self._fits[i].get(dtype)
                if fits is None:
                    fits = self._fits[i][dtype] = _scalar_fits(param.code, param.width, dtype)
                if not fits:
                    raise self._mismatch(i, arg)
                data = arg.data.cast("B")  # its bytes (at most 8), as tobytes() gives them
            else:
                info = _array_info(arg)
                if param.kind == "ptr":
                    if info is not None:
                        if not _pointee_accepts(param, info[1]):
                            raise self._mismatch(i, arg)
                        if not info[2] and not param.is_const:
                            raise self._mismatch(i, arg, " that is read-only (the kernel may write through it)")
                        slots[2 * i] = info[0]
                    elif isinstance(arg, (int, np.integer)) and not isinstance(arg, (bool, np.bool_)) and (
                            isinstance(arg, int) or arg.dtype.itemsize == 8):
                        slots[2 * i] = int(arg) & (2**64 - 1)  # an 8-byte integer is a raw address; 0 is null
                    else:
                        raise self._mismatch(i, arg)
                    continue
                if info is not None:
                    raise self._mismatch(i, arg, ": an array where a value is expected")
                data = _value_bytes(param, arg)
                if data is None:
                    raise self._mismatch(i, arg)
            if len(data) > 16:  # only ever for this parameter (its width): pointers[i] is always set here
                holder = ctypes.create_string_buffer(data, len(data) + 16)
                keep.append(holder)
                address = (ctypes.addressof(holder) + 15) & ~15
                ctypes.memmove(address, data, len(data))
                pointers[i] = address
            else:
                raw[16 * i: 16 * i + len(data)] = data
        return slots, pointers, keep

    def __call__(self, grid: Any, block: Any, args: Sequence[Any], shared_mem: int = 0, stream: Any = None, *,
                 seed: int | None = None) -> None:
        """Run the kernel over ``grid`` blocks of ``block`` threads; returns when it has finished.

        Args:
            grid, block: an int or a tuple of 1 to 3 ints (CUDA's limits apply).
            args: the kernel arguments, packed as CuPy packs them and checked against the signature.
                A pointer parameter takes an array (NumPy, an object with ``.data.ptr`` and ``.dtype``
                such as a CuPy array, or one with ``__cuda_array_interface__``) whose dtype fits the
                pointee: float32 for ``float*``, float64 ``double*``, float16 ``__half*``, uint16 (or a
                dtype named bfloat16) ``__nv_bfloat16*``, a signed/unsigned integer dtype of the same
                width for integer pointees (``unsigned short*`` also takes float16/bfloat16 bit
                storage), any dtype for ``void*`` and struct pointees; a read-only NumPy array only
                for a pointer to const; or an 8-byte integer, taken as a raw address (0: null). A
                value parameter takes a NumPy scalar of its exact type and width, a Python int for
                an 8-byte integer, a Python float for ``double``, a bool for ``bool``.
            shared_mem: bytes of dynamic shared memory (``extern __shared__``), at most 48 KiB (none
                in a serial build, whose ``block`` must be 1).
            stream: accepted and ignored (launches are synchronous).
            seed: the scheduling seed of this launch (default: the module's).

        Raises:
            TypeError: wrong number of arguments, or an argument that does not fit its parameter
                (the message names the kernel, the position, the C++ type and what was given).
            ValueError: a bad grid, block or shared_mem.
            HostCudaLaunchError: the launch failed in the runtime (deadlock, fault, trap, ...).
        """
        g = _normalise_dims(grid, "grid", _MAX_GRID)
        b = _normalise_dims(block, "block", _MAX_BLOCK)
        if b[0] * b[1] * b[2] > _MAX_THREADS:
            raise ValueError(f"block {block!r} has {b[0] * b[1] * b[2]} threads, at most {_MAX_THREADS}")
        if self.module.serial and b != (1, 1, 1):
            raise ValueError(f"kernel {self.name!r} is a serial host build (one thread per block): block must be 1, "
                             f"got {block!r}")
        if isinstance(shared_mem, bool) or not isinstance(shared_mem, (int, np.integer)) or not (
                0 <= shared_mem <= _MAX_SHARED):
            raise ValueError(f"shared_mem must be an int in 0..{_MAX_SHARED} bytes, got {shared_mem!r}")
        slots, pointers, keep = self._pack(args)
        _, _, _, dims, err = self._buffers()
        dims[0], dims[1], dims[2], dims[3], dims[4], dims[5] = *g, *b
        launch_seed = (self.module.seed if seed is None else int(seed)) & (2**64 - 1)
        rc = self._launch(_addressof(pointers), _addressof(dims), _addressof(dims) + 12, int(shared_mem),
                          launch_seed, err, _ERR_LEN)
        del slots, keep
        if rc != 0:
            raise HostCudaLaunchError(err.value.decode(errors="replace"), rc)

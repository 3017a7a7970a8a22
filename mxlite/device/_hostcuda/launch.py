"""Modules and kernels: :class:`HostModule` (``cupy.RawModule``'s shape) and :class:`HostKernel` (``cupy.RawKernel``'s).

A module rewrites its source, adds an ``extern "C"`` launch and signature entry per name expression,
builds the library (:mod:`.build`) and hands out kernels; a kernel checks every argument against the
kernel's C++ signature, packs it as CuPy would, and launches it in the fiber or the serial runtime.

Threads of the serial build: a serial launch may run its blocks on up to :func:`get_threads` OS threads
(``runtime_serial.cpp``: same bits whatever the count), except a kernel that can reach an atomic
(:func:`_atomic_functions`), whose blocks always run in order on the calling thread. The budget
travels in the launch entry's seed slot, which only the fiber build reads as a seed. Launches of one
module from several host threads run one at a time (the runtime keeps a launch's grid in module
state, which its kernels read in every grid-stride loop); inside :func:`on_this_thread` a thread's
launches keep to that thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import re
import struct
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .. import env
from .build import _is_built, _load, _map_options
from .errors import HostCudaError, HostCudaLaunchError, Param
from .rewrite import _mask, _matching, _plain_kernels, rewrite_source

DEFAULT_SEED = 0x5EED  # the scheduling seed when neither the call, the module nor the environment gives one
_ERR_LEN = 8192
_MAX_BLOCK = (1024, 1024, 64)
_MAX_GRID = (2**31 - 1, 65535, 65535)
_MAX_THREADS = 1024
_MAX_SHARED = 48 * 1024


# -- modules and kernels ------------------------------------------------------------------------------
_CODES = {"f": "float", "h": "half", "b": "bf16", "i": "int", "u": "uint", "?": "bool", "v": "void", "p": "pointer",
          "o": "other"}
_LAUNCH_ARGTYPES = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_ulonglong,
                    ctypes.c_char_p, ctypes.c_size_t]


# -- threads of the serial build ----------------------------------------------------------------------------
_threads = 1  # set by mxlite.device.threads (mx.set_num_threads); 1 until then
_this_thread = threading.local()  # .alone: inside on_this_thread
# Words followed by a parenthesis and a brace that are not function definitions.
_NOT_FUNCTIONS = frozenset(("if", "for", "while", "switch", "catch", "return", "sizeof", "decltype", "alignof",
                            "static_assert", "defined", "__attribute__", "__launch_bounds__", "noexcept"))


def set_threads(n: int) -> None:
    """Let every serial launch (CPU devices) spread its blocks over up to ``n`` threads, the caller's included.

    Results do not depend on ``n`` (see the module docstring). Kernels that can reach an atomic run on
    one thread whatever ``n``.

    Raises:
        ValueError: ``n`` is not an integer >= 1.
    """
    global _threads
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the host kernels' thread count must be an integer >= 1, got {n!r}")
    _threads = int(n)


def get_threads() -> int:
    """The most threads a serial launch may use (:func:`set_threads`)."""
    return _threads


def launch_budget() -> int:
    """The thread budget a serial launch made now by this thread gets by default: 1 inside
    :func:`on_this_thread`, else :func:`get_threads`."""
    return 1 if getattr(_this_thread, "alone", False) else _threads


@contextlib.contextmanager
def on_this_thread() -> Iterator[None]:
    """Run the serial launches this thread makes inside the block on this thread alone (a budget of 1).

    For work that already runs side by side on several host threads (:mod:`mxlite.device.parallel`): each
    of them keeps its launches to itself instead of calling the pool. Nests; other threads are unaffected.
    """
    before = getattr(_this_thread, "alone", False)
    _this_thread.alone = True
    try:
        yield
    finally:
        _this_thread.alone = before


_serial_libraries: dict[int, ctypes.CDLL] = {}  # every serial library loaded, by id
_spread = (-1, -1)  # (least work worth a second thread, probe time), ns; -1: the runtime's own constant


def _spread_entry(lib: ctypes.CDLL) -> Any:
    entry = lib.hostcuda_set_spread
    entry.argtypes = [ctypes.c_longlong, ctypes.c_longlong, ctypes.POINTER(ctypes.c_ulonglong)]
    entry.restype = ctypes.c_ulonglong
    return entry


def set_spread(min_spread_ns: int = -1, probe_ns: int = -1) -> tuple[int, int]:
    """For tests and benchmarks: how readily serial launches spread over threads (``runtime_serial.cpp``).

    ``min_spread_ns``: the work (ns) left that is worth one more thread (0: always spread up to the
    budget); ``probe_ns``: how long the caller runs blocks before judging; -1 restores the runtime's
    constant. Applies to every serial library, loaded now or later.

    Returns:
        ``(spread_launches, pool_blocks)`` so far, summed over the loaded serial libraries: launches
        that woke pool threads, and the blocks those threads ran.
    """
    global _spread
    _spread = (int(min_spread_ns), int(probe_ns))
    launches = blocks = 0
    for lib in list(_serial_libraries.values()):
        ran = ctypes.c_ulonglong(0)
        launches += _spread_entry(lib)(_spread[0], _spread[1], ctypes.byref(ran))
        blocks += ran.value
    return launches, blocks


def spread_counts() -> tuple[int, int]:
    """``(spread_launches, pool_blocks)`` summed over the loaded serial libraries (see :func:`set_spread`)."""
    launches = blocks = 0
    for lib in list(_serial_libraries.values()):
        ran = ctypes.c_ulonglong(0)
        launches += _spread_entry(lib)(-1, -1, ctypes.byref(ran))
        blocks += ran.value
    return launches, blocks


def _atomic_functions(code: str) -> frozenset[str]:
    """Names of the functions and macros of ``code`` that can reach a CUDA atomic, directly or through calls.

    A textual over-approximation (a name defined twice counts if either definition qualifies; any
    identifier followed by ``(`` or ``<`` in a body counts as a call): the serial runtime traps an
    atomic in a launch allowed several threads, so what this misses fails loudly rather than silently.
    """
    masked = _mask(code)
    bodies: dict[str, list[str]] = {}
    for m in re.finditer(r"\b([A-Za-z_]\w*)\s*\(", masked):
        if m.group(1) in _NOT_FUNCTIONS:
            continue
        close = _matching(masked, m.end() - 1)
        if close < 0:
            continue
        after = re.match(r"\s*(?:(?:const|noexcept|mutable|override)\b\s*)*\{", masked[close + 1:])
        if after is None:
            continue
        brace = close + after.end() - 1
        end = _matching(masked, brace)
        bodies.setdefault(m.group(1), []).append(masked[brace:end if end >= 0 else len(masked)])
    for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)((?:.*\\\n)*.*)", masked, re.M):
        bodies.setdefault(m.group(1), []).append(m.group(2))
    text = {name: " ".join(parts) for name, parts in bodies.items()}
    reached = {name for name, body in text.items() if re.search(r"\batomic[A-Z]\w*\s*\(", body)}
    calls = {name: set(re.findall(r"\b([A-Za-z_]\w*)\s*[(<]", body)) for name, body in text.items()}
    grew = True
    while grew:
        more = {name for name, called in calls.items() if name not in reached and called & reached}
        reached |= more
        grew = bool(more)
    return frozenset(reached)


def _base_name(name_expression: str) -> str:
    """The function name of a name expression: ``'ns::k<float, 2>'`` -> ``'k'``."""
    return re.split(r"[<(\s]", name_expression.strip(), maxsplit=1)[0].split("::")[-1]


def _default_seed() -> int:
    """``MXLITE_HOSTCUDA_SEED`` (Python's integer literals: ``0x5eed`` too), else :data:`DEFAULT_SEED`."""
    return env.integer("MXLITE_HOSTCUDA_SEED", -(2**63), 2**64 - 1, DEFAULT_SEED, " (a launch uses it modulo 2^64)",
                       base=0)


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
        self._atomic: frozenset[str] | None = None  # serial builds: the functions that can reach an atomic
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
                if self.serial and id(self._lib) not in _serial_libraries:
                    _serial_libraries[id(self._lib)] = self._lib
                    _spread_entry(self._lib)(_spread[0], _spread[1], None)

    def is_built(self) -> bool:
        """Whether :meth:`compile` would find the library loaded or in the build cache (no g++ to run)."""
        if self._lib is not None:
            return True
        return _is_built(self._unit(), self._std, self._flags, self.serial)

    def library(self) -> ctypes.CDLL:
        """The built shared library (compiled first if needed), for host-only entry points a source exports
        itself (``extern "C" __attribute__((visibility("default")))``; kernels/rnn.cu's time loop)."""
        self.compile()
        assert self._lib is not None
        return self._lib

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
        if self.serial:
            with self._lock:
                if self._atomic is None:
                    self._atomic = _atomic_functions(self.code)
            kernel.ordered = _base_name(name) in self._atomic
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
        ordered: serial builds: the kernel can reach an atomic, so its blocks always run in grid
            order on the calling thread.
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
        self.ordered = False  # serial builds: the kernel can reach an atomic, so its blocks run in order on one thread

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
                 seed: int | None = None, threads: int | None = None) -> None:
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
            seed: the scheduling seed of this launch (default: the module's; fiber builds only).
            threads: serial builds only: the most OS threads this launch may spread its blocks over
                (default :func:`get_threads`; always 1 for a kernel that can reach an atomic, whatever
                is given). The results do not depend on it.

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
        if self.module.serial:  # the seed slot carries the thread budget (module docstring)
            if threads is None:
                threads = launch_budget()
            launch_seed = 1 if self.ordered else max(1, int(threads))
        else:
            launch_seed = (self.module.seed if seed is None else int(seed)) & (2**64 - 1)
        rc = self._launch(_addressof(pointers), _addressof(dims), _addressof(dims) + 12, int(shared_mem),
                          launch_seed, err, _ERR_LEN)
        del slots, keep
        if rc != 0:
            raise HostCudaLaunchError(err.value.decode(errors="replace"), rc)

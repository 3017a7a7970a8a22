"""Loading ``kernels/*.cu``: CuPy RawModules on GPUs, the serial host build on CPU devices.

The CUDA sources live in the repository's top-level ``kernels/`` folder, installed with the
package as ``mxlite/kernels``. ``cupy.RawModule(path=...)`` only takes cubin/PTX, so the loader
reads the text and compiles it with NVRTC, naming the template instantiation it will look up
(``name_expressions``) so that its mangled name resolves.

On a GPU each kernel variant (``'adam_update<float>'``) is its own module, compiled the first time
it is launched: the sources hold no explicit instantiations, so NVRTC compiles only what runs (the
first Adam step compiles one of optimizers.cu's 94 variants: about half a second, where the whole
file takes a minute or more). CuPy keeps every compiled module in its on-disk kernel cache
(``~/.cupy/kernel_cache``, ``CUPY_CACHE_DIR``), so later processes load it without compiling; ``mxlite
compile-kernels`` fills that cache ahead of time. :func:`register_kernel_names` lists, per file, every
variant mxlite may launch (the host build, ``mxlite compile-kernels`` and the tests compile them all).

Each kernel file is declared once, by the module that launches it, as a :class:`KernelFile`: its name
expressions (template instantiations over its dtypes, whose C types come from :data:`C_TYPES`, and any
other names), its GPU block size (:data:`BLOCK_THREADS` unless declared) and the choice between the
compiled kernels and the NumPy twins on CPU devices. The declaration registers its names; the module
launches with ``KERNELS.function(name, device)``.

CPU devices run the same source compiled by g++ with one thread per block (the serial build of
:mod:`mxlite.device._hostcuda`): the kernels' own arithmetic, vectorised, at memory speed; a launch
spreads its blocks over up to :func:`mxlite.device.threads.get_num_threads` threads, with the same
bits whatever the count. That needs
g++ and CUDA's half-precision headers (the ``cpu`` extra); :func:`cpu_kernels_enabled` decides,
from ``MXLITE_CPU_KERNELS``, whether a CPU device uses it or the kernels' NumPy twins.

NVRTC options: ``--fmad=false`` keeps every ``a*b + c`` two roundings, as in the NumPy twins,
instead of one fused multiply-add; see the header of ``kernels/optimizers.cu`` for why the
kernels follow their twins operation by operation rather than the twins following an error bound.
The host build never contracts either (``-ffp-contract=off``).
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import importlib.resources
import os
import re
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import _hostcuda, env, threads
from ._hostcuda import HostCudaLaunchError, launch
from .devices import Device

__all__ = ["BLOCK_THREADS", "CPU_KERNELS_ENV", "C_TYPES", "NVRTC_OPTIONS", "HostEntry", "KernelFile",
           "build_cpu_kernels", "cpu_kernels_enabled", "cpu_kernels_status", "cpu_kernels_to_build", "get_kernel",
           "host_entry", "instantiations", "kernel_names", "kernel_source", "register_kernel_names"]

CPU_KERNELS_ENV = "MXLITE_CPU_KERNELS"
_CPU_MODES = ("auto", "compiled", "numpy")

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_REPO_KERNELS = os.path.join(_REPO_ROOT, "kernels")
# C++17 for the kernels' templates and lambdas; --fmad=false: no a*b + c contraction (module docstring).
NVRTC_OPTIONS = ("-std=c++17", "--fmad=false")

_name_providers: dict[str, list[Callable[[], tuple[str, ...]]]] = {}


def register_kernel_names(filename: str, names: Callable[[], tuple[str, ...]]) -> None:
    """Record that ``names()`` lists name expressions of ``kernels/<filename>`` mxlite may launch (a driver
    calls this once at import; a callable, so that a list that grows, e.g. with registered optimizer rules,
    is read when asked)."""
    _name_providers.setdefault(filename, []).append(names)


def kernel_names() -> dict[str, tuple[str, ...]]:
    """Every registered name expression, per kernel file (``{'optimizers.cu': ('sgd_update<float>', ...)}``),
    in registration order without repeats. Only drivers already imported have registered: ``import mxlite``
    imports them all."""
    return {filename: tuple(dict.fromkeys(n for provider in providers for n in provider()))
            for filename, providers in sorted(_name_providers.items())}


_LOCAL_INCLUDE = re.compile(r'^#include "(\w+\.cuh)"[ \t]*$', re.MULTILINE)


@functools.cache
def kernel_source(filename: str) -> str:
    """The text of ``kernels/<filename>`` (installed package data, else the source checkout), each
    ``#include "name.cuh"`` of a header in ``kernels/`` replaced by that header's text (NVRTC and the
    host build get one self-contained text; ``nvcc`` finds the header beside the file).

    Raises:
        FileNotFoundError: no such kernel file or header.
    """
    return _LOCAL_INCLUDE.sub(lambda m: kernel_source(m.group(1)), _read_kernel_file(filename))


def _read_kernel_file(filename: str) -> str:
    try:
        resource = importlib.resources.files("mxlite.kernels").joinpath(filename)
        if resource.is_file():
            return resource.read_text()
    except ModuleNotFoundError:  # running from a checkout: kernels/ is not a subpackage there
        pass
    path = os.path.join(_REPO_KERNELS, filename)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"CUDA kernel source {filename!r} not found in mxlite/kernels or {_REPO_KERNELS}")
    with open(path) as f:
        return f.read()


@functools.cache
def _function(filename: str, name_expression: str, device_id: int) -> Any:
    """The GPU kernel ``name_expression`` of ``filename``: a module of its own (module docstring)."""
    import cupy  # noqa: PLC0415 - GPU only

    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=kernel_source(filename), options=NVRTC_OPTIONS,
                                name_expressions=(name_expression,))
        return module.get_function(name_expression)


@functools.cache
def _host_module(filename: str, name_expressions: tuple[str, ...]) -> Any:
    threads._apply_to_host_kernels()  # launches spread over mx.get_num_threads() threads
    return _hostcuda.HostModule(kernel_source(filename), NVRTC_OPTIONS, name_expressions, name=filename,
                                serial=True)


def get_kernel(filename: str, name_expression: str, device: Device, all_names: tuple[str, ...]) -> Any:
    """The kernel ``name_expression`` (e.g. ``'adam_update<float>'``) of ``filename`` on ``device``.

    On a GPU a CuPy RawKernel compiled for this one variant (module docstring); on a CPU device the
    serial host build's kernel (:class:`mxlite.device._hostcuda.HostKernel`, launched with ``block=1``),
    one build per file for every name of ``all_names``. The kernel object is made once per (file,
    name, device) and reused by every launch.

    Raises:
        ValueError: ``name_expression`` is not in ``all_names``.
        mxlite.device._hostcuda.HostCudaError: on a CPU device, the host build is not possible (no g++,
            no CUDA headers) or failed; :func:`cpu_kernels_enabled` checks this first.
    """
    all_names = tuple(all_names)
    if name_expression not in all_names:
        raise ValueError(f"{name_expression!r} is not among the compiled names {all_names}")
    if not device.is_gpu:
        threads.adapt_to_load()  # a CPU step's regular beat: the BLAS follows the cores other processes leave
        return _host_module(filename, all_names).get_function(name_expression)
    return _function(filename, name_expression, device.device_id)


class HostEntry:
    """A host-only function a kernel file exports from its serial host build (``extern "C"``, for CPU devices):
    called with ctypes arguments and an error buffer, it returns 0 or a runtime error code.

    Attributes:
        function: the ctypes function (its ``argtypes`` set by the caller, ``restype`` int).
    """

    _ERR_LEN = 4096

    def __init__(self, function: Any) -> None:
        self.function = function
        self.function.restype = ctypes.c_int
        self._err = ctypes.create_string_buffer(self._ERR_LEN)

    def __call__(self, *args: Any) -> None:
        """Call it with ``args`` then the error buffer and its length.

        Raises:
            mxlite.device._hostcuda.HostCudaLaunchError: it returned an error (a kernel it launched failed).
        """
        rc = self.function(*args, self._err, self._ERR_LEN)
        if rc != 0:
            raise HostCudaLaunchError(self._err.value.decode(errors="replace"), rc)

    @staticmethod
    def launch_budget() -> int:
        """The threads a serial launch made now by this thread may use (1 inside a :mod:`.parallel` piece)."""
        return launch.launch_budget()


def array_address(a: Any) -> int:
    """The address of ``a``'s first element for a host entry's argument struct (0 for None)."""
    return 0 if a is None else a.__array_interface__["data"][0]


def host_entry(filename: str, symbol: str, all_names: tuple[str, ...], argtypes: list[Any]) -> HostEntry | None:
    """``symbol`` of ``filename``'s serial host build (built first if needed), or None when it does not export it.
    ``argtypes``: the ctypes types of its arguments before the error buffer and its length.

    Raises:
        mxlite.device._hostcuda.HostCudaError: the host build is not possible or failed (check
            :func:`cpu_kernels_enabled` first).
    """
    function = getattr(_host_module(filename, tuple(all_names)).library(), symbol, None)
    if function is None:
        return None
    function.argtypes = [*argtypes, ctypes.c_char_p, ctypes.c_size_t]
    return HostEntry(function)


def cpu_kernels_to_build(filenames: Sequence[str] | None = None) -> list[str]:
    """The kernel files (default: every registered one) whose host build for CPU devices is not in the build cache
    yet: what the first step on a CPU device would wait for g++ to build. Empty when CPU devices run the NumPy
    twins (``MXLITE_CPU_KERNELS=numpy``) or g++ or CUDA's headers are missing (they then run the twins too).

    Raises:
        ValueError: ``MXLITE_CPU_KERNELS`` has an unknown value.
    """
    if _cpu_mode() == "numpy":
        return []
    try:
        _hostcuda.compiler()
        _hostcuda.cuda_include_dirs()
    except _hostcuda.HostCudaError:
        return []
    names = kernel_names()
    return [f for f in (names if filenames is None else filenames) if not _host_module(f, names[f]).is_built()]


def build_cpu_kernels(filenames: Sequence[str] | None = None, jobs: int | None = None,
                      done: Callable[[str, float, Exception | None], None] | None = None,
                      ) -> dict[str, Exception | None]:
    """Build the CPU devices' kernels now: the host build of each kernel file (default: every registered one), one
    g++ process per file, ``jobs`` at a time (default: the cores, :func:`mxlite.device.threads.cores`). A file
    already in the build cache is only loaded. ``done(file, seconds, failure)`` is called as each finishes.

    Returns ``{file: None, or the exception that stopped its build}``; a file that fails runs the NumPy twins
    (:func:`cpu_kernels_enabled`).
    """
    names = kernel_names()
    files = list(names if filenames is None else filenames)

    def build(filename: str) -> Exception | None:
        start = time.perf_counter()
        failure = _host_build_failure(filename, tuple(names[filename]))
        if done is not None:
            done(filename, time.perf_counter() - start, failure)
        return failure

    workers = max(1, min(len(files), jobs or threads.cores()))
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="mxlite-build") as pool:
        return dict(zip(files, pool.map(build, files)))


def _cpu_mode() -> str:
    return env.choice(CPU_KERNELS_ENV, _CPU_MODES, "auto")


@functools.cache
def _host_build_failure(filename: str, all_names: tuple[str, ...]) -> Exception | None:
    """None when the serial host build of ``filename`` is ready (built now or found in the cache), else why not."""
    try:
        _host_module(filename, all_names).compile()
    except (_hostcuda.HostCudaError, OSError) as exc:
        return exc
    return None


def cpu_kernels_enabled(filename: str, all_names: tuple[str, ...]) -> bool:
    """Whether CPU devices run ``filename``'s kernels compiled for the host, or else the NumPy twins.

    ``MXLITE_CPU_KERNELS`` decides: ``auto`` (the default) compiles when it can and otherwise falls
    back to the twins with one warning per process naming the reason; ``compiled`` requires the
    compiled kernels; ``numpy`` always runs the twins (the reference the kernels are tested against).
    The first call per file builds it (a few seconds; cached on disk by :mod:`mxlite.device._hostcuda`).

    Raises:
        ValueError: ``MXLITE_CPU_KERNELS`` has another value.
        mxlite.device._hostcuda.HostCudaError: mode ``compiled`` and the build is not possible or failed.
    """
    mode = _cpu_mode()
    if mode == "numpy":
        return False
    failure = _host_build_failure(filename, tuple(all_names))
    if failure is None:
        return True
    if mode == "compiled":
        raise failure
    _warn_twins_once(*_why(failure))
    return False


def _why(failure: Exception) -> tuple[str, str]:
    """(reason, advice) for the fallback warning: the failure's first line, and g++'s first error under it."""
    lines = [line.strip() for line in str(failure).splitlines() if line.strip()]
    reason = lines[0].rstrip(":") if lines else type(failure).__name__
    error = next((line for line in lines[1:] if "error:" in line), None)  # g++'s diagnostics follow a build error
    if error is not None:
        reason = f"{reason}: {error}"
    if isinstance(failure, _hostcuda.HostCudaSetupError):
        advice = "The compiled kernels need g++ and pip install 'mxlite[cpu]'"
    else:
        advice = f"{CPU_KERNELS_ENV}=compiled raises the whole error"
    return reason, advice


def cpu_kernels_status() -> str:
    """One line for ``mxlite info``: how CPU devices will run the fused kernels, without building anything.

    Raises:
        ValueError: ``MXLITE_CPU_KERNELS`` has an unknown value.
    """
    mode = _cpu_mode()
    if mode == "numpy":
        return f"NumPy twins ({CPU_KERNELS_ENV}=numpy)"
    try:
        cxx = _hostcuda.compiler()
        _hostcuda.cuda_include_dirs()
    except _hostcuda.HostCudaError as exc:
        return f"NumPy twins: {exc}" if mode == "auto" else f"unavailable ({CPU_KERNELS_ENV}=compiled): {exc}"
    return f"compiled kernels (serial host build by {cxx}, cached in {_hostcuda.cache_dir()})"


@functools.cache
def _warn_twins_once(reason: str, advice: str) -> None:
    warnings.warn(f"CPU devices run the NumPy twins of the compiled kernels (slower): {reason}. {advice}; "
                  f"{CPU_KERNELS_ENV}=numpy silences this warning.", RuntimeWarning, stacklevel=3)


# -- one declaration per kernel file -------------------------------------------------------------------
# The kernels' C type for each NumPy dtype they take (their template argument ``T``).
C_TYPES = {"float32": "float", "float64": "double", "float16": "__half", "bfloat16": "__nv_bfloat16"}
# The NumPy dtype a kernel accumulates a storage dtype in (its template argument ``A``; the dtype itself if absent).
_ACCUMULATE_IN = {"float16": "float32", "bfloat16": "float32"}
BLOCK_THREADS = 256  # threads per GPU block unless a file declares otherwise: 8 warps, good occupancy on sm_80+


def instantiations(templates: Sequence[str], arguments: Sequence[str]) -> tuple[str, ...]:
    """The name expressions ``template<arguments>`` of every template (outer loop) and argument list (inner)."""
    return tuple(f"{template}<{argument}>" for template in templates for argument in arguments)


class KernelFile:
    """The declaration of one ``kernels/<filename>``: the name expressions mxlite may launch from it (registered
    with :func:`register_kernel_names` on construction), the NumPy dtypes its templates take, its GPU block size,
    and whether a device runs it compiled or the NumPy twins.

    ``templates`` are instantiated for each dtype, as ``template<T>`` or, with ``accumulator``, as
    ``template<T, A>`` (``A``: float for half-precision ``T``, else ``T``); ``names`` (a tuple, or a callable read
    when asked, for a list that grows) follow them.

    Attributes:
        filename: the kernel file, e.g. ``'conv.cu'``.
        type_names: ``{NumPy dtype name: C type}`` for the dtypes its kernels take.
        block_threads: threads per block of its GPU launches (:data:`BLOCK_THREADS` unless declared).
    """

    def __init__(self, filename: str, dtypes: Sequence[str] = (), templates: Sequence[str] = (), *,
                 accumulator: bool = False, names: Sequence[str] | Callable[[], Sequence[str]] = (),
                 block_threads: int = BLOCK_THREADS) -> None:
        self.filename = filename
        self.type_names = {dtype: C_TYPES[dtype] for dtype in dtypes}
        self.block_threads = block_threads
        self._accumulator = accumulator
        self._templates = instantiations(templates, [self.template_arguments(dtype) for dtype in dtypes])
        self._names = names if callable(names) else (lambda listed=tuple(names): listed)
        register_kernel_names(filename, self.names)

    def names(self) -> tuple[str, ...]:
        """Every name expression of this file mxlite may launch, in declaration order."""
        return (*self._templates, *self._names())

    def supports(self, dtype: Any) -> bool:
        """Whether its templates take arrays of ``dtype`` (a dtype, or its name)."""
        return _dtype_name(dtype) in self.type_names

    def type_name(self, dtype: Any) -> str:
        """The C type of ``dtype`` (a dtype, or its name) in this file's kernels.

        Raises:
            ValueError: its kernels take no ``dtype``.
        """
        name = _dtype_name(dtype)
        if name not in self.type_names:
            raise ValueError(f"{self.filename} has no kernels for dtype {name} (it takes {', '.join(self.type_names)})")
        return self.type_names[name]

    def template_arguments(self, dtype: Any) -> str:
        """The template argument list for ``dtype``: ``'T'``, or ``'T, A'`` for a file declared with an accumulator.

        Raises:
            ValueError: its kernels take no ``dtype``.
        """
        storage = self.type_name(dtype)
        if not self._accumulator:
            return storage
        name = _dtype_name(dtype)
        return f"{storage}, {C_TYPES[_ACCUMULATE_IN.get(name, name)]}"

    def function(self, name_expression: str, device: Device) -> Any:
        """The kernel ``name_expression`` (e.g. ``'relu_forward<float>'``) on ``device`` (:func:`get_kernel`).

        Raises:
            ValueError: ``name_expression`` is not declared for this file.
        """
        return get_kernel(self.filename, name_expression, device, self.names())

    def cpu_enabled(self) -> bool:
        """Whether CPU devices run this file compiled for the host, else its NumPy twins (:func:`cpu_kernels_enabled`,
        whose errors it raises)."""
        return cpu_kernels_enabled(self.filename, self.names())

    def compiled_on(self, device: Device) -> bool:
        """Whether ``device`` runs this file's kernels: every GPU; a CPU device when :meth:`cpu_enabled`."""
        return device.is_gpu or self.cpu_enabled()

    def block_for(self, device: Device) -> int:
        """Threads per block of a launch on ``device``: :attr:`block_threads` on a GPU, 1 on a CPU device (the serial
        host build runs one thread per block)."""
        return self.block_threads if device.is_gpu else 1

    def host_entry(self, symbol: str, argtypes: list[Any]) -> HostEntry | None:
        """``symbol`` of this file's serial host build (:func:`host_entry`, whose errors it raises), or None."""
        return host_entry(self.filename, symbol, self.names(), argtypes)

    def host_library(self) -> Any:
        """The ctypes library of this file's serial host build (built first if needed).

        Raises:
            mxlite.device._hostcuda.HostCudaError: the host build is not possible or failed.
        """
        return _host_module(self.filename, self.names()).library()

    def __repr__(self) -> str:
        return f"KernelFile({self.filename!r}, {len(self.names())} names)"


def _dtype_name(dtype: Any) -> str:
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name

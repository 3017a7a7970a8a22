"""Put the CuPy/NCCL double into ``sys.modules`` so that unmodified ``import cupy`` code gets it.

``install(n)`` emulates ``n`` GPUs: ``cupy``, ``cupy.cuda``, ``cupy.cuda.runtime``, ``cupy.cuda.nccl``,
``cupy.cuda.memory``, ``cupy.cuda.graph``, ``cupy.random``, ``cupy.linalg``, ``cupy.lib``,
``cupy.lib.stride_tricks`` and ``cupyx`` then resolve to :mod:`mxlite._emulation.fakecupy` / ``fakecupyx``,
and ``nvmath``, ``nvmath.bindings`` and ``nvmath.bindings.cublas`` to :mod:`mxlite._emulation.fakenvmath`
(a subset of nvmath-python's raw cuBLAS bindings). :func:`install_cudnn` adds ``cudnn``, the part of NVIDIA's cuDNN
frontend mxlite calls (:mod:`mxlite._emulation.fakecudnn`): only on request, so emulated GPUs run mxlite's GEMM
path unless a test asks for the cuDNN one. Installing again with another count starts from a clean
state (no allocations, streams, captures, communicators or cuBLAS handles survive).
"""

from __future__ import annotations

import sys
from typing import Any

from .fakecupy import _counters, _errors, _memory, _state, _streams

__all__ = ["install", "uninstall", "install_cudnn", "uninstall_cudnn", "emulated_gpu_count", "EmulatedGPUError",
           "counters", "reset_counters", "MAX_GPUS"]

EmulatedGPUError = _errors.EmulatedGPUError
MAX_GPUS = 16
_MODULES = {
    "cupy": "fakecupy", "cupy.cuda": "fakecupy.cuda", "cupy.cuda.runtime": "fakecupy.cuda.runtime",
    "cupy.cuda.nccl": "fakecupy.cuda.nccl", "cupy.cuda.memory": "fakecupy.cuda.memory",
    "cupy.cuda.device": "fakecupy.cuda._device", "cupy.cuda.stream": "fakecupy.cuda.stream",
    "cupy.cuda.graph": "fakecupy.cuda.graph", "cupy.random": "fakecupy._random", "cupy.linalg": "fakecupy.linalg",
    "cupy.lib": "fakecupy.lib", "cupy.lib.stride_tricks": "fakecupy.lib.stride_tricks", "cupyx": "fakecupyx",
}
# nvmath-python's raw cuBLAS bindings. Each double is held to the real package's names and signatures at these
# paths by tests/test_real_apis.py.
_NVMATH_MODULES = {"nvmath": "fakenvmath", "nvmath.bindings": "fakenvmath.bindings",
                   "nvmath.bindings.cublas": "fakenvmath.bindings.cublas"}
# NVIDIA's cuDNN frontend (nvidia-cudnn-frontend): installed on request (install_cudnn), not by install.
_CUDNN_MODULES = {"cudnn": "fakecudnn"}
_installed = 0


def install(num_gpus: int) -> None:
    """Emulate ``num_gpus`` GPUs (1..16) and make ``import cupy`` / ``import cupyx`` return the double.

    Raises:
        ValueError: ``num_gpus`` is not an integer in 1..16.
    """
    global _installed
    if isinstance(num_gpus, bool) or not isinstance(num_gpus, int) or not 1 <= num_gpus <= MAX_GPUS:
        raise ValueError(f"the number of emulated GPUs must be an integer from 1 to {MAX_GPUS}, got {num_gpus!r}")
    import importlib  # noqa: PLC0415

    _streams.reset()
    _memory.reset()
    _state.set_num_devices(num_gpus)
    _memory.ensure_pools(num_gpus)
    _state._tls.device = 0
    for public, private in {**_MODULES, **_NVMATH_MODULES}.items():
        sys.modules[public] = importlib.import_module(f"{__package__}.{private}")
    sys.modules["nvmath.bindings.cublas"]._reset()
    # cuBLAS handles, graphs and dropout generator states of a previous install
    for cache in ("mxlite.device.blas", "mxlite.device.graphs", "mxlite.ops._philox"):
        module = sys.modules.get(cache)
        if module is not None:
            module._forget()
    _installed = num_gpus


def uninstall() -> None:
    """Remove the double from ``sys.modules`` (a later ``import cupy`` finds the real one, if any)."""
    global _installed
    for public in {**_MODULES, **_NVMATH_MODULES, **_CUDNN_MODULES}:
        if sys.modules.get(public) is not None and sys.modules[public].__name__.startswith(__package__):
            del sys.modules[public]
    _installed = 0


def install_cudnn() -> None:
    """Make ``import cudnn`` return the emulated cuDNN frontend (after :func:`install`; undone by :func:`uninstall`
    or :func:`uninstall_cudnn`).

    Raises:
        RuntimeError: no GPUs are emulated (the emulated frontend runs only on emulated GPUs).
    """
    if not _installed:
        raise RuntimeError("install_cudnn() needs emulated GPUs first: call install(n)")
    import importlib  # noqa: PLC0415

    for public, private in _CUDNN_MODULES.items():
        sys.modules[public] = importlib.import_module(f"{__package__}.{private}")


def uninstall_cudnn() -> None:
    """Remove the emulated cuDNN frontend from ``sys.modules`` (the emulated GPUs stay)."""
    for public in _CUDNN_MODULES:
        if sys.modules.get(public) is not None and sys.modules[public].__name__.startswith(__package__):
            del sys.modules[public]


def emulated_gpu_count() -> int:
    """How many GPUs are emulated (0 when the double is not installed)."""
    return _installed


def counters() -> dict[int, dict[str, Any]]:
    """Every emulated GPU's counters (allocations, bytes, peak, copies, syncs, launches, NCCL calls/bytes)."""
    return _counters.snapshot()


def reset_counters() -> None:
    """Zero every emulated GPU's counters (peak bytes restart from the bytes in use)."""
    _counters.reset()

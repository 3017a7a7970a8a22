"""``cupy.RawModule`` / ``cupy.RawKernel``: CUDA C++ compiled for the host by
:mod:`mxlite.device._hostcuda`, launched under the emulation's rules.

A launch checks every device-array argument: it must live on the current device (rule 1), a ``const T*``
parameter is a read and any other pointer a write, on the launch stream (``stream=`` or the current
stream; rule 2). The launch is counted (``kernel_launches`` by name) and runs at once on the host. On a
capturing stream it is recorded as a graph node (arrays passed as their NumPy views, so a launch of the
graph uses the same addresses without keeping the arrays alive) and counts when the graph is launched.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core, _counters, _ndarray, _state, _streams
from ._errors import EmulatedGPUError

__all__ = ["RawModule", "RawKernel"]


def _host_module(code: str, options: tuple, name_expressions: Any) -> Any:
    from mxlite.device import _hostcuda as hostcuda  # noqa: PLC0415 - built by g++ on first use

    names = None if name_expressions is None else _shared_names(code, tuple(name_expressions))
    return hostcuda.HostModule(code, tuple(options), names)


def _shared_names(code: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """The names to build ``code`` for. mxlite compiles each GPU kernel variant as a module of its own
    (mxlite/device/kernels.py); on the emulated GPUs one host library per ``kernels/`` file serves them all,
    built for every name registered for that file (one g++ build instead of one per variant). A module still
    offers only the names it was given (:meth:`RawModule.get_function`)."""
    from mxlite.device import kernels  # noqa: PLC0415 - mxlite's own kernels

    wanted = set(names)
    for filename, registered in kernels.kernel_names().items():
        if wanted <= set(registered) and kernels.kernel_source(filename) == code:
            return registered
    return names


class _Function:
    """A kernel of a compiled module: ``kernel(grid, block, args, shared_mem=0, stream=None)``."""

    def __init__(self, host_kernel: Any, name: str) -> None:
        self._kernel = host_kernel
        self.name = name
        self.signature = getattr(host_kernel, "signature", None)

    def __call__(self, grid: Any, block: Any, args: Any, shared_mem: int = 0, stream: Any = None,
                 enable_cooperative_groups: bool = False) -> None:
        device_id = _state.current_device_id()
        if stream is None:
            stream = _streams.get_current_stream(device_id)
        elif not isinstance(stream, _streams.Stream):
            raise TypeError(f"stream must be a cupy.cuda.Stream, got {type(stream).__name__}")
        elif stream.device_id != device_id:
            raise EmulatedGPUError(f"launch of {self.name}: {stream!r} belongs to gpu({stream.device_id}) but the "
                                   f"current device is gpu({device_id})")
        if not isinstance(args, tuple):
            raise TypeError(f"kernel arguments must be a tuple, got {type(args).__name__}")
        sig = self.signature
        if sig is not None and len(sig) != len(args):
            raise TypeError(f"kernel {self.name} takes {len(sig)} arguments, got {len(args)}")
        reads, writes, raw = [], [], []
        for i, arg in enumerate(args):
            if not isinstance(arg, _ndarray.ndarray):
                if isinstance(arg, np.ndarray) and arg.ndim > 0:
                    raise TypeError(f"kernel {self.name} argument {i}: a host NumPy array cannot be passed to a "
                                    "kernel (copy it to the device first)")
                if sig is not None and sig[i][0] == "ptr" and arg:
                    raw.append(i)  # an address: the double cannot tell what it points to
                continue
            if sig is not None:
                kind, _code, _width, is_const = sig[i]
                if kind != "ptr":
                    raise TypeError(f"kernel {self.name} argument {i}: a device array for a by-value parameter")
            else:
                is_const = False
            (reads if is_const else writes).append(arg)
        what = f"launch of kernel {self.name}"
        _core.check_device(reads + writes, device_id, what)
        capture = None
        if stream._capture is not None or _streams.active_captures:
            from . import _graph  # noqa: PLC0415 - cycle

            capture = _graph.issue(stream, what)
            if capture is not None and raw:
                raise EmulatedGPUError(f"{what} on {stream!r}, which is capturing: argument(s) {raw} are raw "
                                       "addresses, whose memory the capture cannot track; pass the arrays")
        _core.check_access(stream, reads, writes, what)
        _core.record_access(stream, reads, writes)
        grid = (grid,) if isinstance(grid, int) else tuple(grid)
        block = (block,) if isinstance(block, int) else tuple(block)
        self._kernel(grid, block, args, shared_mem=shared_mem, stream=stream)
        if capture is None:
            _counters.counters[device_id].kernel_launches[self.name] += 1
            return
        kernel = self._kernel
        frozen = tuple(a._a.view() if isinstance(a, _ndarray.ndarray) else a for a in args)
        capture.add(f"kernel {self.name}", lambda: kernel(grid, block, frozen, shared_mem=shared_mem), reads, writes)


class RawModule:
    """CUDA C++ source compiled for the host (CuPy's ``RawModule``; only ``code=`` sources are supported).

    Args:
        code: CUDA C++ source.
        path: not supported (cubin/PTX cannot run on the host).
        options: compiler options (passed on; ``-std=...`` is honoured).
        backend, translate_cucomplex, enable_cooperative_groups, jitify: accepted for compatibility.
        name_expressions: template instantiations to make available to :meth:`get_function`.
    """

    def __init__(self, code: str | None = None, *, path: str | None = None, options: tuple = (),
                 backend: str = "nvrtc", translate_cucomplex: bool = False, enable_cooperative_groups: bool = False,
                 name_expressions: Any = None, jitify: Any = None) -> None:
        if code is None:
            raise NotImplementedError("the GPU emulation compiles CUDA sources only: RawModule(path=...) loads "
                                      "cubin/PTX, which cannot run on the host")
        self.code = code
        self.options = tuple(options)
        self.name_expressions = None if name_expressions is None else tuple(name_expressions)
        self._module: Any = None

    def compile(self, log_stream: Any = None) -> None:
        """Compile the source now (otherwise done at the first :meth:`get_function`)."""
        if self._module is None:
            self._module = _host_module(self.code, self.options, self.name_expressions)

    def get_function(self, name: str) -> _Function:
        """The kernel ``name`` (a name expression such as ``'adam<float>'`` for templates).

        Raises:
            KeyError: the module was compiled with ``name_expressions`` and ``name`` is not among them.
        """
        if self.name_expressions is not None and name not in self.name_expressions:
            raise KeyError(f"{name!r} was not compiled: this module's name_expressions are {self.name_expressions}")
        self.compile()
        return _Function(self._module.get_function(name), name)


class RawKernel:
    """One kernel of CUDA C++ source, compiled for the host (CuPy's ``RawKernel``).

    Args:
        code: CUDA C++ source.
        name: the kernel's name.
        options, backend, translate_cucomplex, enable_cooperative_groups, jitify: see :class:`RawModule`.
    """

    def __init__(self, code: str, name: str, options: tuple = (), backend: str = "nvrtc",
                 translate_cucomplex: bool = False, *, enable_cooperative_groups: bool = False,
                 jitify: Any = None) -> None:
        self.code, self.name, self.options = code, name, tuple(options)
        self._module = RawModule(code=code, options=self.options)
        self._function: _Function | None = None

    def compile(self, log_stream: Any = None) -> None:
        """Compile now."""
        if self._function is None:
            self._function = self._module.get_function(self.name)

    def __call__(self, grid: Any, block: Any, args: Any, **kwargs: Any) -> None:
        """Launch: ``kernel(grid, block, args, shared_mem=0, stream=None)``."""
        self.compile()
        self._function(grid, block, args, **kwargs)

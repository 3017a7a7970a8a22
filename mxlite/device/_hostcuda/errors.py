"""The host build's errors, the description of a kernel parameter, and the paths and format tag its parts share."""

from __future__ import annotations

import os
from typing import NamedTuple

_FORMAT = "hostcuda-2"  # part of every cache key: bump when the generated code or the cache layout changes
_HERE = os.path.dirname(os.path.abspath(__file__))
_HEADER = os.path.join(_HERE, "cuda_host.h")
_RUNTIMES = {False: os.path.join(_HERE, "runtime_fibers.cpp"), True: os.path.join(_HERE, "runtime_serial.cpp")}
_COMPILE_LINES = 40  # lines of g++ output quoted in a build error


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

"""Loading ``kernels/*.cu`` as CuPy RawModules, compiled once per (file, device) and cached.

The CUDA sources live in the repository's top-level ``kernels/`` folder, installed with the
package as ``mxlite/kernels``. ``cupy.RawModule(path=...)`` only takes cubin/PTX, so the loader
reads the text and compiles it with NVRTC, naming every template instantiation it will look up
(``name_expressions``) so that mangled names resolve.

NVRTC options: ``--fmad=false`` keeps every ``a*b + c`` two roundings, as in the NumPy twins,
instead of one fused multiply-add; see the header of ``kernels/optimizers.cu`` for why the
kernels follow their twins operation by operation rather than the twins following an error bound.
"""

from __future__ import annotations

import functools
import importlib.resources
import os
from typing import Any

from .device import Device

__all__ = ["kernel_source", "get_kernel"]

_REPO_KERNELS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels")
# C++17 for the kernels' templates and lambdas; --fmad=false: no a*b + c contraction (module docstring).
_NVRTC_OPTIONS = ("-std=c++17", "--fmad=false")


@functools.cache
def kernel_source(filename: str) -> str:
    """The text of ``kernels/<filename>`` (installed package data, else the source checkout).

    Raises:
        FileNotFoundError: no such kernel file.
    """
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
def _module(filename: str, device_id: int, name_expressions: tuple[str, ...]) -> Any:
    import cupy  # noqa: PLC0415 - GPU only

    with cupy.cuda.Device(device_id):
        module = cupy.RawModule(code=kernel_source(filename), options=_NVRTC_OPTIONS,
                                name_expressions=name_expressions)
        module.compile()
    return module


@functools.cache
def _function(filename: str, name_expression: str, device_id: int, all_names: tuple[str, ...]) -> Any:
    return _module(filename, device_id, all_names).get_function(name_expression)


def get_kernel(filename: str, name_expression: str, device: Device, all_names: tuple[str, ...]) -> Any:
    """The RawKernel ``name_expression`` (e.g. ``'adam_update<float>'``) of ``filename`` on ``device``.

    ``all_names`` lists every instantiation the file is compiled for, so one NVRTC compilation
    per (file, device) serves them all. The kernel object is made once per (file, name, device)
    and reused by every launch.

    Raises:
        ValueError: ``name_expression`` is not in ``all_names``.
    """
    all_names = tuple(all_names)
    if name_expression not in all_names:
        raise ValueError(f"{name_expression!r} is not among the compiled names {all_names}")
    return _function(filename, name_expression, device.device_id, all_names)

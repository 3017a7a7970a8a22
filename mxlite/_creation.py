"""Tensor creation: ``array``, ``zeros``, ``ones``, ``full``, ``empty``, ``arange``, DLPack import."""

from __future__ import annotations

from typing import Any

import numpy as np

from .autograd.tensor import Tensor, _transfer
from .device import Device, as_device, cpu, device_of

__all__ = ["array", "zeros", "ones", "full", "empty", "arange", "from_dlpack", "from_numpy"]

_DEFAULT_DTYPE = np.dtype(np.float32)


def _dtype(dtype: Any, default: np.dtype = _DEFAULT_DTYPE) -> np.dtype:
    if dtype is None:
        return default
    try:
        return np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"unknown dtype {dtype!r}") from exc


def array(data: Any, device: Device | str | None = None, dtype: Any = None) -> Tensor:
    """A new tensor holding a copy of ``data`` on ``device`` (default: the current device).

    The dtype is ``dtype`` if given; else a NumPy/CuPy array's or Tensor's own dtype; else
    float32 for Python numbers and lists (MXNet's rule).

    Raises:
        TypeError: ``data`` cannot be converted to a numeric array.
    """
    dev = as_device(device)
    if isinstance(data, Tensor):
        src, src_dev = data._data, data._device
    elif isinstance(data, np.ndarray):
        src, src_dev = data, cpu(0)
    elif hasattr(data, "__cuda_array_interface__"):
        src, src_dev = data, device_of(data)
    else:
        arr = np.asarray(data)
        if arr.dtype == object or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise TypeError(f"array: cannot build a numeric tensor from {type(data).__name__} (dtype {arr.dtype})")
        src, src_dev = arr, cpu(0)
        if dtype is None:
            dtype = _DEFAULT_DTYPE
    out = _transfer(src, src_dev, dev, copy=True)
    if dtype is not None and out.dtype != np.dtype(dtype):
        with dev.use():
            out = out.astype(_dtype(dtype))
    return Tensor(out, dev)


def from_numpy(ndarray: np.ndarray, zero_copy: bool = False) -> Tensor:
    """A CPU tensor from a NumPy array, sharing memory when ``zero_copy``."""
    return Tensor(ndarray if zero_copy else ndarray.copy(), cpu(0))


def _fill(fn_name: str, shape: Any, device: Any, dtype: Any, *args: Any) -> Tensor:
    dev = as_device(device)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(int(n) < 0 for n in shape):
        raise ValueError(f"{fn_name}: negative dimension in shape {shape}")
    with dev.use():
        data = getattr(dev.xp, fn_name)(shape, *args, dtype=_dtype(dtype))
    return Tensor(data, dev)


def zeros(shape: Any, device: Device | str | None = None, dtype: Any = None) -> Tensor:
    """A tensor of zeros (float32 by default)."""
    return _fill("zeros", shape, device, dtype)


def ones(shape: Any, device: Device | str | None = None, dtype: Any = None) -> Tensor:
    """A tensor of ones (float32 by default)."""
    return _fill("ones", shape, device, dtype)


def empty(shape: Any, device: Device | str | None = None, dtype: Any = None) -> Tensor:
    """An uninitialised tensor (float32 by default)."""
    return _fill("empty", shape, device, dtype)


def full(shape: Any, val: float, device: Device | str | None = None, dtype: Any = None) -> Tensor:
    """A tensor filled with ``val`` (float32 by default)."""
    return _fill("full", shape, device, dtype, val)


def arange(start: float, stop: float | None = None, step: float = 1.0, device: Device | str | None = None,
           dtype: Any = None) -> Tensor:
    """Evenly spaced values in ``[start, stop)`` (float32 by default, as MXNet)."""
    dev = as_device(device)
    if step == 0:
        raise ValueError("arange: step must not be 0")
    with dev.use():
        data = dev.xp.arange(start, stop, step, dtype=_dtype(dtype))
    return Tensor(data, dev)


def from_dlpack(capsule_or_array: Any) -> Tensor:
    """A tensor sharing memory with a DLPack producer (an object with ``__dlpack__``).

    CPU producers become ``cpu(0)`` tensors (NumPy), CUDA producers ``gpu(i)`` tensors (CuPy).
    """
    kind = capsule_or_array.__dlpack_device__()[0] if hasattr(capsule_or_array, "__dlpack_device__") else 1
    if kind == 1:  # kDLCPU
        return Tensor(np.from_dlpack(capsule_or_array), cpu(0))
    import cupy  # noqa: PLC0415 - CUDA producers need CuPy

    data = cupy.from_dlpack(capsule_or_array)
    return Tensor(data, device_of(data))

"""Tensor creation: ``array``, ``zeros``, ``ones``, ``full``, ``empty``, ``arange``, DLPack import."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..autograd.tensor import Tensor
from ..device import Device, as_device, cpu, device_of
from ..device.copy import copy_between

__all__ = ["as_dtype", "array", "zeros", "ones", "full", "empty", "arange", "from_dlpack", "from_numpy"]

_DEFAULT_DTYPE = np.dtype(np.float32)


def as_dtype(dtype: Any, default: np.dtype = _DEFAULT_DTYPE) -> np.dtype:
    """``dtype`` as a NumPy dtype; None gives ``default`` (float32, MXNet's default).

    Raises:
        TypeError: not a dtype NumPy knows (names the value).
    """
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
        src, src_dev = data._data, data.device
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
    out = copy_between(src, src_dev, dev, copy=True)
    if dtype is not None and out.dtype != np.dtype(dtype):
        with dev.use():
            out = out.astype(as_dtype(dtype))
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
        data = getattr(dev.xp, fn_name)(shape, *args, dtype=as_dtype(dtype))
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
        data = dev.xp.arange(start, stop, step, dtype=as_dtype(dtype))
    return Tensor(data, dev)


# DLPack's device types (dlpack.h: DLDeviceType) and the capsule names of its Python protocol.
_KDLCPU = 1
_LEGACY_CAPSULE, _VERSIONED_CAPSULE = b"dltensor", b"dltensor_versioned"
# Byte offset of DLTensor.device.device_type in the capsule's struct (dlpack.h): DLManagedTensor
# starts with its DLTensor, whose `void *data` comes first; DLManagedTensorVersioned puts a
# DLPackVersion (2 x uint32), manager_ctx, deleter and uint64 flags before it.
_DEVICE_TYPE_OFFSET = {_LEGACY_CAPSULE: 8, _VERSIONED_CAPSULE: 8 + 8 + 8 + 8 + 8}


class _Capsule:
    """Hands a CPU DLPack capsule to ``numpy.from_dlpack``, which only takes producers."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_KDLCPU, 0)


def _capsule_device_type(capsule: Any) -> int:
    """The DLDeviceType of an unconsumed DLPack ``PyCapsule`` (legacy or versioned).

    Raises:
        ValueError: a capsule that is not a DLPack tensor, or was already consumed.
    """
    # Private prototypes: setting argtypes on ctypes.pythonapi's functions would change them for everyone.
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
    get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
        ("PyCapsule_GetPointer", ctypes.pythonapi))
    name = get_name(capsule)
    if name not in _DEVICE_TYPE_OFFSET:
        shown = name.decode(errors="replace") if name is not None else None
        raise ValueError(f"from_dlpack: a PyCapsule named {shown!r} is not an unconsumed DLPack tensor "
                         f"(expected 'dltensor' or 'dltensor_versioned'; a capsule can be imported only once)")
    pointer = get_pointer(capsule, name)
    return ctypes.c_int32.from_address(pointer + _DEVICE_TYPE_OFFSET[name]).value


def from_dlpack(capsule_or_array: Any) -> Tensor:
    """A tensor sharing memory with a DLPack producer (an object with ``__dlpack__``) or capsule.

    A legacy DLPack ``PyCapsule`` (what ``toDlpack()``/``to_dlpack()`` return) is accepted too,
    and its device read from the capsule itself. CPU data becomes a ``cpu(0)`` tensor (NumPy),
    CUDA data a ``gpu(i)`` tensor (CuPy). NumPy marks the memory of a legacy CPU capsule
    read-only (the capsule cannot say whether writing is allowed): copy such a tensor to update it.

    Raises:
        TypeError: neither a DLPack producer nor a capsule.
        ValueError: a capsule that is not an unconsumed DLPack tensor.
    """
    if hasattr(capsule_or_array, "__dlpack__"):
        if not hasattr(capsule_or_array, "__dlpack_device__"):
            raise TypeError(f"from_dlpack: {type(capsule_or_array).__name__} has __dlpack__ but no "
                            "__dlpack_device__, so its device is unknown")
        kind = int(capsule_or_array.__dlpack_device__()[0])
        producer = capsule_or_array
    elif type(capsule_or_array).__name__ == "PyCapsule":
        kind = _capsule_device_type(capsule_or_array)
        producer = _Capsule(capsule_or_array) if kind == _KDLCPU else capsule_or_array
    else:
        raise TypeError(f"from_dlpack: expected an object with __dlpack__ or a DLPack PyCapsule, got "
                        f"{type(capsule_or_array).__name__}")
    if kind == _KDLCPU:
        return Tensor(np.from_dlpack(producer), cpu(0))
    import cupy  # noqa: PLC0415 - CUDA producers need CuPy

    data = cupy.from_dlpack(producer)  # CuPy takes producers and (for backward compatibility) raw capsules
    return Tensor(data, device_of(data))

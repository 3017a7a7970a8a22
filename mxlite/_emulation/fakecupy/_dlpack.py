"""DLPack export/import of device arrays: capsules report kDLCUDA and the emulated device id.

NumPy refuses such capsules (so device memory cannot silently become a host array); :func:`from_dlpack`
maps their data pointer back to the live allocation (zero copy).
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from . import _memory, _ndarray
from ._errors import EmulatedGPUError

__all__ = ["to_capsule", "from_dlpack", "fromDlpack"]

_KDLCPU, _KDLCUDA = 1, 2


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

_alive: dict[int, Any] = {}  # address of a DLManagedTensor -> what keeps its memory alive
_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}
_KINDS = {v: k for k, v in _CODES.items()}


@_DELETER
def _deleter(managed: Any) -> None:
    _alive.pop(ctypes.addressof(managed.contents), None)


def to_capsule(arr: _ndarray.ndarray) -> Any:
    """A ``dltensor`` capsule viewing ``arr`` (device type kDLCUDA, id = its emulated device)."""
    a = arr._a
    shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
    strides = (ctypes.c_int64 * max(a.ndim, 1))(*(s // a.itemsize for s in a.strides))
    managed = _DLManagedTensor()
    t = managed.dl_tensor
    t.data = a.__array_interface__["data"][0]
    t.device = _DLDevice(_KDLCUDA, arr._mem.device_id)
    t.ndim = a.ndim
    kind = "b" if a.dtype == np.bool_ else a.dtype.kind
    t.dtype = _DLDataType(_CODES[kind], a.dtype.itemsize * 8, 1)
    t.shape = shape
    t.strides = strides
    t.byte_offset = 0
    managed.deleter = _deleter
    address = ctypes.addressof(managed)
    # No capsule destructor (a Python callback there can clobber a pending exception): an unconsumed capsule
    # leaks these few bytes; the memory itself is not kept alive (consuming a capsule of a freed array raises).
    _alive[address] = (managed, shape, strides)
    return _api.PyCapsule_New(address, b"dltensor", None)


def _from_capsule(capsule: Any) -> _ndarray.ndarray:
    address = _api.PyCapsule_GetPointer(capsule, b"dltensor")
    managed = _DLManagedTensor.from_address(address)
    t = managed.dl_tensor
    if t.device.device_type != _KDLCUDA:
        raise EmulatedGPUError(f"from_dlpack: the tensor is on DLPack device type {t.device.device_type}, not "
                               "CUDA (kDLCUDA); copy host data with cupy.asarray()")
    kind = _KINDS[t.dtype.code]
    dtype = np.dtype(bool) if kind == "b" else np.dtype(f"{kind}{t.dtype.bits // 8}")
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] * dtype.itemsize for i in range(t.ndim)) if t.strides else None
    data = t.data + t.byte_offset
    alloc, offset = _memory.resolve(data, 0, t.device.device_id)
    _api.PyCapsule_SetName(capsule, b"used_dltensor")
    a = np.ndarray(shape, dtype, buffer=alloc.block.buf, offset=offset, strides=strides)
    _alive.pop(address, None)
    return _ndarray.ndarray._make(a, alloc)


def from_dlpack(array: Any, *, device: Any = None, copy: Any = None) -> _ndarray.ndarray:
    """A zero-copy view of a DLPack producer on an emulated GPU (objects with ``__dlpack__``, or capsules).

    Raises:
        EmulatedGPUError: the producer is not on an emulated GPU.
    """
    if isinstance(array, _ndarray.ndarray):
        out = array
    elif hasattr(array, "__dlpack__"):
        kind, dev = array.__dlpack_device__()
        if kind != _KDLCUDA:
            raise EmulatedGPUError(f"from_dlpack: the producer is on DLPack device type {kind}, not CUDA; "
                                   "copy host data with cupy.asarray()")
        out = _from_capsule(array.__dlpack__())
    else:
        out = _from_capsule(array)
    return out


def fromDlpack(dltensor: Any) -> _ndarray.ndarray:  # noqa: N802 - CuPy's legacy name
    """Legacy: a zero-copy view of a ``dltensor`` capsule."""
    return from_dlpack(dltensor)

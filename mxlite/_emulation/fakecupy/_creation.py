"""Array creation on the current device, and host <-> device copies (``asarray``, ``asnumpy``)."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import _core, _counters, _ndarray, _state, _streams

__all__ = ["asarray", "array", "asanyarray", "ascontiguousarray", "asfortranarray", "asnumpy", "empty", "zeros",
           "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "copy"]

_POISON = 0xFF  # fresh memory reads as NaN / -1: uninitialised data shows up instead of passing as zeros


def _shape(shape: Any) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(n) for n in shape)


def _filled(shape: Any, dtype: Any, byte: int | None, value: Any = None, order: str = "C") -> _ndarray.ndarray:
    device_id = _state.current_device_id()
    stream = _streams.get_current_stream(device_id)
    capture = None
    if stream._capture is not None or _streams.active_captures:
        from . import _graph  # noqa: PLC0415 - cycle

        capture = _graph.issue(stream, "fill")
    arr = _core.new_array(_shape(shape), np.float64 if dtype is None else dtype, device_id, order)
    target = arr._a.view() if value is not None else arr._mem.view_bytes()

    def fill() -> None:
        target[...] = value if value is not None else byte

    if value is not None or byte is not None:
        fill()
    _core.record_access(stream, (), (arr,))
    if capture is not None:
        if byte != _POISON:  # empty() allocates only: no work to record
            capture.add("fill", fill, (), (arr,))
        return arr
    c = _counters.counters[device_id]
    c.ops["fill"] += 1
    if byte != _POISON:  # empty() allocates only; a fill is a kernel writing every byte
        c.op_launches["fill"] += 1
        c.op_bytes["fill"] += arr.nbytes
    return arr


def empty(shape: Any, dtype: Any = float, order: str = "C") -> _ndarray.ndarray:
    """An uninitialised array on the current device (its bytes are 0xFF: NaN for floats)."""
    return _filled(shape, dtype, _POISON, order=order)


def zeros(shape: Any, dtype: Any = float, order: str = "C") -> _ndarray.ndarray:
    """Zeros on the current device."""
    return _filled(shape, dtype, 0, order=order)


def ones(shape: Any, dtype: Any = float, order: str = "C") -> _ndarray.ndarray:
    """Ones on the current device."""
    return _filled(shape, dtype, None, 1, order=order)


def full(shape: Any, fill_value: Any, dtype: Any = None, order: str = "C") -> _ndarray.ndarray:
    """``fill_value`` everywhere, on the current device (dtype inferred from the value when None)."""
    if isinstance(fill_value, _ndarray.ndarray):
        out = empty(shape, fill_value.dtype if dtype is None else dtype, order)
        _core.apply("full", np.copyto, (out, fill_value), {}, write_args=(0,))
        return out
    if dtype is None:
        dtype = np.asarray(fill_value).dtype
    return _filled(shape, dtype, None, fill_value, order=order)


def _like(a: Any, dtype: Any, shape: Any) -> tuple[Any, Any]:
    dtype = a.dtype if dtype is None else dtype
    shape = a.shape if shape is None else shape
    return dtype, shape


def empty_like(prototype: Any, dtype: Any = None, order: str = "K", subok: Any = None,
               shape: Any = None) -> _ndarray.ndarray:
    """An uninitialised array shaped like ``prototype`` on the current device."""
    dtype, shape = _like(prototype, dtype, shape)
    return empty(shape, dtype)


def zeros_like(a: Any, dtype: Any = None, order: str = "K", subok: Any = None, shape: Any = None) -> _ndarray.ndarray:
    """Zeros shaped like ``a`` on the current device."""
    dtype, shape = _like(a, dtype, shape)
    return zeros(shape, dtype)


def ones_like(a: Any, dtype: Any = None, order: str = "K", subok: Any = None, shape: Any = None) -> _ndarray.ndarray:
    """Ones shaped like ``a`` on the current device."""
    dtype, shape = _like(a, dtype, shape)
    return ones(shape, dtype)


def full_like(a: Any, fill_value: Any, dtype: Any = None, order: str = "K", subok: Any = None,
              shape: Any = None) -> _ndarray.ndarray:
    """``fill_value`` shaped like ``a`` on the current device."""
    dtype, shape = _like(a, dtype, shape)
    return full(shape, fill_value, dtype)


def _contains_device(obj: Any) -> bool:
    if isinstance(obj, _ndarray.ndarray):
        return True
    if type(obj) in (list, tuple):
        return any(_contains_device(x) for x in obj)
    return False


def array(obj: Any, dtype: Any = None, copy: bool = True, order: str = "K", subok: bool = False,
          ndmin: int = 0, *, blocking: bool = False) -> _ndarray.ndarray:
    """A device array on the current device from a device array (copied; across devices: a peer copy),
    a host NumPy array or nested sequences (a host -> device copy)."""
    device_id = _state.current_device_id()
    if isinstance(obj, _ndarray.ndarray):
        if obj._mem.device_id != device_id:
            out = _core.peer_copy(obj, device_id, dtype)
        elif not copy and (dtype is None or np.dtype(dtype) == obj.dtype):
            out = obj
        else:
            out = _core.apply("array", np.array, (obj,), {"dtype": dtype, "order": order})
        while out.ndim < ndmin:
            out = out[None]
        return out
    if _contains_device(obj):
        return _core.apply("array", np.array, (obj,), {"dtype": dtype, "ndmin": ndmin})
    if isinstance(obj, np.ndarray) and obj.dtype.hasobject:
        raise ValueError("Unsupported dtype object")
    host = np.array(obj, dtype=dtype, order="C" if order == "K" else order, ndmin=ndmin)
    return _core.from_host(host, device_id)


def asarray(a: Any, dtype: Any = None, order: str | None = None, *, copy: Any = None,
            blocking: bool = False) -> _ndarray.ndarray:
    """``a`` itself when it is a device array of the current device with the right dtype, else :func:`array`."""
    if (isinstance(a, _ndarray.ndarray) and a._mem.device_id == _state.current_device_id()
            and (dtype is None or np.dtype(dtype) == a.dtype) and copy is not True):
        return a
    return array(a, dtype, copy=True, order=order or "K", blocking=blocking)


def asanyarray(a: Any, dtype: Any = None, order: str | None = None, *, blocking: bool = False) -> _ndarray.ndarray:
    """Same as :func:`asarray`."""
    return asarray(a, dtype, order, blocking=blocking)


def ascontiguousarray(a: Any, dtype: Any = None) -> _ndarray.ndarray:
    """``a`` as a C-contiguous device array (itself when it already is)."""
    a = asarray(a, dtype)
    if a._a.flags.c_contiguous:
        return a
    return _core.apply("ascontiguousarray", np.ascontiguousarray, (a,), {})


def asfortranarray(a: Any, dtype: Any = None) -> _ndarray.ndarray:
    """``a`` as an F-contiguous device array."""
    a = asarray(a, dtype)
    if a._a.flags.f_contiguous:
        return a
    return _core.apply("asfortranarray", np.asfortranarray, (a,), {})


def copy(a: Any, order: str = "K") -> _ndarray.ndarray:
    """A copy of ``a`` on the current device."""
    return array(a, copy=True, order=order)


def asnumpy(a: Any, stream: Any = None, order: str = "C", out: Any = None, *, blocking: bool = True) -> np.ndarray:
    """A host NumPy array of ``a`` (device arrays: a synchronised copy, see ``ndarray.get``)."""
    if isinstance(a, _ndarray.ndarray):
        return a.get(stream=stream, order=order, out=out, blocking=blocking)
    if isinstance(a, (list, tuple)) and _contains_device(a):
        return np.array([asnumpy(x) for x in a])
    result = np.asarray(a, order=order)
    if out is not None:
        np.copyto(out, result)
        return out
    return result

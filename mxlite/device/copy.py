"""Copies between devices and to the host, ordered on CUDA streams (the device layer's data movement).

Every module that moves an array from one device to another (autograd's ``Tensor.to``, the
communicators, the kvstores, tensor creation) goes through :func:`copy_between`, and every
device-to-host read through :func:`as_host`, so the stream ordering lives in one place.

A copy between two GPUs (:func:`copy_between`), step by step:

1. the source is made contiguous on the source device, on its current stream (a non-contiguous
   view needs a packed temporary, and that packing is work the copy must wait for);
2. an event recorded on the source's current stream, waited on by the destination's current
   stream: the copy starts after everything queued on the source so far;
3. the destination array is allocated and the peer copy queued, both on the destination's stream;
4. an event recorded on the destination's stream, waited on by the source's current stream: later
   work on the source device (overwriting the source, or the memory pool handing a freed
   temporary's memory to the next allocation) starts after the copy has read it;
5. only then is the packed temporary released.

A device-to-host read runs under the source device, whose current stream CuPy's ``get()``
synchronises, so it sees every write queued there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .devices import Device, device_of

__all__ = ["copy_between", "as_host"]


def copy_between(data: Any, src: Device, dst: Device, copy: bool) -> Any:
    """``data`` (a raw array on ``src``) as an array on ``dst``; copies only when needed unless ``copy``.

    Same device: ``data`` itself, or a copy with ``copy``. Two CPU devices share host memory
    (virtual devices). GPU to host: a NumPy copy. Host to GPU: a CuPy copy on the destination.
    GPU to GPU: a C-contiguous copy ordered on both devices' streams (see the module docstring).
    """
    if src == dst:
        if not copy:
            return data
        with dst.use():
            return data.copy()
    if not src.is_gpu and not dst.is_gpu:  # virtual CPU devices share host memory
        return np.array(data, copy=True) if copy else data
    if src.is_gpu and not dst.is_gpu:
        with src.use():
            return data.get()
    if not src.is_gpu:
        with dst.use():
            return dst.xp.asarray(data)  # host -> device
    return _peer_copy(data, src, dst)


def _peer_copy(data: Any, src: Device, dst: Device) -> Any:
    """GPU ``src`` -> GPU ``dst``: the five steps of the module docstring."""
    cupy = src.xp
    with src.use():
        src_stream = cupy.cuda.get_current_stream()
        source = cupy.ascontiguousarray(data)  # step 1: may be a temporary, packed on src_stream
        ready = cupy.cuda.Event(disable_timing=True)
        ready.record(src_stream)  # step 2
    with dst.use():
        dst_stream = cupy.cuda.get_current_stream()
        dst_stream.wait_event(ready)
        out = cupy.empty(source.shape, source.dtype)  # step 3
        if source.nbytes:
            cupy.cuda.runtime.memcpyPeerAsync(out.data.ptr, dst.device_id, source.data.ptr, src.device_id,
                                              source.nbytes, dst_stream.ptr)
        copied = cupy.cuda.Event(disable_timing=True)
        copied.record(dst_stream)  # step 4
    with src.use():
        src_stream.wait_event(copied)
    del source  # step 5: freed on src_stream, which now waits for the copy
    return out


def as_host(value: Any) -> np.ndarray:
    """A Tensor's, CuPy array's or NumPy array's values as a NumPy array.

    Device data is copied to the host after every write queued on its device's current stream
    (the read runs under that device); a NumPy array is returned as it is (not copied).
    Anything else with a ``get()`` (a device array of another library) is read with it, and
    the rest goes through ``numpy.asarray``.
    """
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "asnumpy"):
        return value.asnumpy()
    if hasattr(value, "__cuda_array_interface__"):
        with device_of(value).use():
            return value.get()
    if hasattr(value, "get"):
        return value.get()
    return np.asarray(value)

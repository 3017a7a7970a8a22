"""How every array operation runs: unwrap device arrays, check the rules, run NumPy, wrap the results.

Rule 1 (device): every device array an operation touches must live on the current device.
Rule 2 (streams): each read/write is checked against the allocation's access history on the current
stream, then recorded (see :mod:`._streams` for the ordering model).
Host NumPy arrays are refused as operands (TypeError, as CuPy does); Python and NumPy scalars are fine.
On a capturing stream, work is recorded into a CUDA graph as well as run (see :mod:`._graph`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import _counters, _memory, _ndarray, _state, _streams
from ._errors import EmulatedGPUError

__all__ = ["apply", "check_access", "record_access", "wrap", "new_array", "from_host", "describe"]

def describe(arr: Any) -> str:
    """``float32[3, 4] (alloc #7 on gpu(0))``: how errors name an array."""
    shape = ", ".join(str(n) for n in arr._a.shape)
    return f"{arr._a.dtype}[{shape}] (alloc #{arr._mem.id} on gpu({arr._mem.device_id}))"


def _unsupported(x: Any) -> TypeError:
    return TypeError(f"Unsupported type {type(x)}: a host NumPy array cannot be an operand of a device operation; "
                     "copy it with cupy.asarray() first")


def check_device(arrays: Iterable[Any], device_id: int, what: str) -> None:
    """Rule 1: raise when one of ``arrays`` lives on another device than ``device_id``."""
    for arr in arrays:
        if arr._mem.device_id != device_id:
            raise EmulatedGPUError(f"{what}: {describe(arr)} lives on gpu({arr._mem.device_id}) but the current "
                                   f"device is gpu({device_id}); switch with `with cupy.cuda.Device"
                                   f"({arr._mem.device_id}):` or copy it with cupy.asarray() on the current device")


def check_access(stream: _streams.Stream, reads: Iterable[Any], writes: Iterable[Any], what: str,
                 collective: bool = False) -> None:
    """Rule 2: raise when ``stream`` reads/writes memory whose last access by another stream is not ordered before.

    ``collective``: an NCCL call (which may use buffers of collectives still waiting for other ranks).
    While a stream captures, the capture claims what its streams touch, and other streams may not touch it.
    """
    if stream._capture is not None or _streams.active_captures:
        from . import _graph  # noqa: PLC0415 - cycle

        _graph.before_access(stream, reads, writes, what, collective)
    for arr in reads:
        _check_one(stream, arr, False, what, collective)
    for arr in writes:
        _check_one(stream, arr, True, what, collective)


def _name(arr: Any) -> str:
    if isinstance(arr, _ndarray.ndarray):
        return describe(arr)
    return repr(arr[0] if type(arr) is tuple else arr)  # an allocation, or (allocation, start, end)


def _byte_range(x: Any) -> tuple[Any, int, int]:
    """``(allocation, first byte, end byte)`` that an access of ``x`` may touch.

    ``x`` is a device array (the bytes its view spans), an allocation (all of it), or an
    ``(allocation, start, end)`` triple (a pointer range, as NCCL and memcpy calls give).
    """
    if isinstance(x, _ndarray.ndarray):
        a, mem = x._a, x._mem
        if a.size == 0:
            return mem, 0, 0
        lo = hi = a.__array_interface__["data"][0] - mem.ptr
        for n, stride in zip(a.shape, a.strides):
            if stride > 0:
                hi += stride * (n - 1)
            else:
                lo += stride * (n - 1)
        return mem, lo, hi + a.itemsize
    if type(x) is tuple:
        return x
    return x, 0, max(x.size, 1)


def _check_one(stream: _streams.Stream, arr: Any, write: bool, what: str, collective: bool = False) -> None:
    mem, lo, hi = _byte_range(arr)
    if _memory.pending_collective and not collective and mem.id in _memory.pending_collective:
        raise EmulatedGPUError(f"{what}: {_name(arr)} takes part in the NCCL collective "
                               f"{_memory.pending_collective[mem.id]}, which waits for the calls of its other "
                               "ranks (issue them all, or end the group) before the buffer may be used")
    # Accesses are tracked per byte range: disjoint slices of one buffer (a gradient bucket being reduced
    # while backward writes the next parameter's gradient) do not conflict, as on a GPU.
    for start, end, writer, seq in mem.writes:
        if start < hi and lo < end and not _streams.completed(stream, writer, seq):
            kind = "write-after-write" if write else "read-after-write"
            raise EmulatedGPUError(
                f"{what}: {kind} race on {_name(arr)}: {stream!r} {'writes' if write else 'reads'} bytes "
                f"[{lo}, {hi}), but bytes [{start}, {end}) were last written by op #{seq} of {writer!r}, and "
                "nothing orders that before (record an Event on the writer and wait_event it on this stream, or "
                "synchronize the writer)")
    if write:
        for start, end, reader, seq in mem.reads:
            if start < hi and lo < end and not _streams.completed(stream, reader, seq):
                raise EmulatedGPUError(
                    f"{what}: write-after-read race on {_name(arr)}: {stream!r} writes bytes [{lo}, {hi}), but op "
                    f"#{seq} of {reader!r} reads bytes [{start}, {end}) and nothing orders that read before this "
                    "write (record an Event on the reader and wait_event it on this stream, or synchronize the "
                    "reader)")


_PRUNE_AT = 64  # access records per allocation before finished ones are dropped


def _prune(records: list[tuple[int, int, Any, int]]) -> list[tuple[int, int, Any, int]]:
    """Drop records of work the host knows complete (they can conflict with nothing any more)."""
    return [r for r in records if _streams.host_known.get(r[2], 0) < r[3]]


def record_access(stream: _streams.Stream, reads: Iterable[Any], writes: Iterable[Any]) -> int:
    """Record one operation of ``stream`` reading/writing the given arrays (or allocations); returns its seq."""
    seq = stream._next()
    for x in reads:
        mem, lo, hi = _byte_range(x)
        # A later read of the same bytes by the same stream supersedes an earlier one.
        mem.reads = [r for r in mem.reads if not (r[2] is stream and lo <= r[0] and r[1] <= hi)]
        mem.reads.append((lo, hi, stream, seq))
        if len(mem.reads) > _PRUNE_AT:
            mem.reads = _prune(mem.reads)
    for x in writes:
        mem, lo, hi = _byte_range(x)
        # A write (checked against every earlier access first) supersedes all access to the bytes it covers.
        mem.writes = [r for r in mem.writes if not (lo <= r[0] and r[1] <= hi)]
        mem.writes.append((lo, hi, stream, seq))
        mem.reads = [r for r in mem.reads if not (lo <= r[0] and r[1] <= hi)]
        if len(mem.writes) > _PRUNE_AT:
            mem.writes = _prune(mem.writes)
    return seq


class _Collector:
    """Replaces device arrays by their NumPy views, remembering which are read and which written."""

    __slots__ = ("reads", "writes", "meta", "host_ok", "host")

    def __init__(self, host_ok: bool) -> None:
        self.reads: list[Any] = []
        self.writes: list[Any] = []
        self.meta: list[Any] = []
        self.host_ok = host_ok
        self.host = False  # a host array was given (a host -> device copy)

    def __call__(self, x: Any, write: bool | None = False) -> Any:
        """``write``: True written, False read, None only looked at (shape/dtype: no access)."""
        if isinstance(x, _ndarray.ndarray):
            (self.meta if write is None else self.writes if write else self.reads).append(x)
            return x._a
        if isinstance(x, np.ndarray):
            if self.host_ok:
                self.host = True
                return x
            raise _unsupported(x)
        if type(x) is list or type(x) is tuple:
            return type(x)(self(item, write) for item in x)
        return x


def apply(name: str, func: Callable[..., Any], args: tuple, kwargs: dict[str, Any], *,
          write_args: tuple[int, ...] = (), meta_args: tuple[int, ...] = (), host_ok: bool = False,
          sync: bool = False) -> Any:
    """Run NumPy's ``func`` on the unwrapped arguments on the current device and stream; wrap what it returns.

    Args:
        name: the operation's name (errors, counters).
        write_args: positions of arguments the operation writes (besides ``out=``).
        meta_args: positions of arguments whose data is not accessed (shape and dtype only).
        host_ok: accept host NumPy arrays as arguments (host -> device copies).
        sync: the result's size depends on the data (CuPy synchronizes the stream to learn it).
    """
    device_id = _state.current_device_id()
    collect = _Collector(host_ok)
    nargs = [collect(a, None if i in meta_args else i in write_args) for i, a in enumerate(args)]
    nkwargs = {k: collect(v, k == "out") for k, v in kwargs.items()} if kwargs else {}
    # A view (slice, reshape, transpose) only reads metadata: CuPy makes one on any device. Anything that
    # touches data, including a reshape that had to copy, must run on the array's own device.
    accessed = collect.reads + collect.writes
    if accessed:
        check_device(accessed, device_id, name)
    stream = _streams.get_current_stream(device_id)
    capture = None
    if stream._capture is not None or _streams.active_captures:
        from . import _graph  # noqa: PLC0415 - cycle

        capture = _graph.issue(stream, name)
        if capture is not None:
            _graph.check_capturable(stream, name, args, collect.host, sync)
    check_access(stream, collect.reads, collect.writes, name)
    result = func(*nargs, **nkwargs)
    if collect.meta and not _is_view(result, collect.meta):  # e.g. a reshape that had to copy: a read after all
        check_device(collect.meta, device_id, name)
        check_access(stream, collect.meta, (), name)
        collect.reads += collect.meta
    touched = collect.reads + collect.writes + collect.meta
    record_access(stream, collect.reads, collect.writes)
    fresh = isinstance(result, np.ndarray) and _view_source(result, touched) is None
    if capture is None:  # captured work counts when a graph launch runs it
        counters = _counters.counters[device_id]
        counters.ops[name] += 1
        if collect.reads or collect.writes or fresh:  # a kernel on a GPU; a view or a metadata query is not
            counters.op_launches[name] += 1
            counters.op_bytes[name] += sum(x._a.nbytes for x in collect.reads + collect.writes) + (
                result.nbytes if fresh else 0)
    if sync:
        _streams.host_sync(stream)
    out = kwargs.get("out") if kwargs else None
    if out is not None:
        value = out
    elif collect.writes and result is None:
        value = None
    else:
        value = wrap(result, device_id, touched)
    if capture is not None:
        _graph.record_apply(capture, stream, name, func, nargs, nkwargs, result, value, list(collect.reads),
                            list(collect.writes), touched)
    return value


def _view_source(result: np.ndarray, sources: list[Any]) -> Any:
    if result.base is not None and result.size:
        address = result.__array_interface__["data"][0]
        for src in sources:
            mem = src._mem
            if mem.ptr <= address < mem.ptr + mem.block.size:
                return mem
    return None


def _is_view(result: Any, sources: list[Any]) -> bool:
    """False for array results that copied data (so their sources were read); True for views and non-arrays."""
    if type(result) is list or type(result) is tuple:
        return all(_is_view(r, sources) for r in result)
    if isinstance(result, np.generic):
        return False
    return not isinstance(result, np.ndarray) or _view_source(result, sources) is not None


def wrap(result: Any, device_id: int, sources: list[Any]) -> Any:
    """Device arrays for NumPy results: views of a source's memory stay views, anything else is copied in."""
    if isinstance(result, np.ndarray):
        mem = _view_source(result, sources)
        if mem is not None:
            return _ndarray.ndarray._make(result, mem)
        return from_host(result, device_id, count=False)
    if isinstance(result, np.generic):
        return from_host(np.asarray(result), device_id, count=False)
    if type(result) is tuple or type(result) is list:
        return type(result)(wrap(r, device_id, sources) for r in result)
    return result


def new_array(shape: tuple[int, ...], dtype: Any, device_id: int | None = None, order: str = "C") -> Any:
    """An uninitialised device array on ``device_id`` (default: current), allocated on its current stream."""
    dtype = np.dtype(dtype)
    shape = tuple(int(n) for n in shape)
    nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
    mem = _memory.alloc(nbytes, device_id)
    a = np.ndarray(shape, dtype, buffer=mem.view_bytes(), order="F" if order == "F" else "C")
    return _ndarray.ndarray._make(a, mem)


def from_host(host: np.ndarray, device_id: int, count: bool = True) -> Any:
    """A new device array holding a copy of ``host`` (a host -> device copy when ``count``).

    ``count=False``: the result of a device computation, moved in (no transfer).
    """
    if host.dtype.hasobject:
        raise TypeError(f"Unsupported dtype {host.dtype}: device arrays hold numbers only")
    if count and _streams.active_captures:
        from . import _graph  # noqa: PLC0415 - cycle

        _graph.refuse_transfer(_streams.get_current_stream(device_id), "H2D", "a host -> device copy")
    order = "F" if host.flags.f_contiguous and not host.flags.c_contiguous else "C"
    arr = new_array(host.shape, host.dtype, device_id, order)
    np.copyto(arr._a, host, casting="unsafe")
    stream = _streams.get_current_stream(device_id)
    record_access(stream, (), (arr,))
    if count:
        c = _counters.counters[device_id]
        c.h2d_copies += 1
        c.h2d_bytes += host.nbytes
    return arr


def peer_copy(src: Any, device_id: int, dtype: Any = None, order: str = "K") -> Any:
    """A copy of device array ``src`` (of any device) on ``device_id``, ordered on that device's current stream."""
    stream = _streams.get_current_stream(device_id)
    capture = None
    if stream._capture is not None or _streams.active_captures:
        from . import _graph  # noqa: PLC0415 - cycle

        capture = _graph.issue(stream, "peer copy")
    check_access(stream, (src,), (), "peer copy")
    a = src._a if dtype is None else src._a.astype(dtype)
    out = from_host(np.asarray(a, order="C" if order in ("C", "A", "K") and not a.flags.f_contiguous else "F"),
                    device_id, count=False)
    record_access(stream, (src,), ())
    if capture is not None:
        source, target = src._a.view(), out._a.view()

        def run() -> None:
            np.copyto(target, source if dtype is None else source.astype(dtype), casting="unsafe")

        capture.add("peer copy", run, (src,), (out,))
        return out
    c = _counters.counters[device_id]
    if src._mem.device_id != device_id:
        c.p2p_copies += 1
        c.p2p_bytes += src._a.nbytes
    return out


def host_read(arr: Any, what: str, stream: _streams.Stream | None = None) -> np.ndarray:
    """Rule 4: a blocking device -> host copy of ``arr`` on ``stream`` (default: its device's current stream).

    The last writer must be that stream or known complete; the host then knows the stream complete.
    Returns a host copy.
    """
    device_id = arr._mem.device_id
    if stream is None:
        stream = _streams.get_current_stream(device_id)
    if stream._capture is not None or _streams.active_captures:
        from . import _graph  # noqa: PLC0415 - cycle

        _graph.refuse_transfer(stream, "D2H", what)
    check_access(stream, (arr,), (), what)
    record_access(stream, (arr,), ())
    _streams.host_sync(stream)
    c = _counters.counters[device_id]
    c.d2h_copies += 1
    c.d2h_bytes += arr._a.nbytes
    return np.array(arr._a, copy=True)

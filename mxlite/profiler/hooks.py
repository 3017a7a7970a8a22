"""Where operator and layer calls meet the profiler: one test of :data:`recording` per call while it is off.

The operator dispatch (``ops/core.py``: the ``_op`` decorator and the binary ops) tests ``recording``
and, when set, runs the call through :func:`record_op`; ``Block.__call__`` does the same with
:func:`layer_scope`. Everything else here runs only while the profiler records.

An operator called inside another (a composite op built from primitives) is part of the outer one, as
MXNet's operators are atomic: only the outermost call on a thread is recorded. Operators are named as
MXNet names them (``FullyConnected``, ``Convolution``, ``broadcast_add``; :data:`MXNET_NAMES`), others by
their ``mx.np`` name (``exp``, ``sum``, ``transpose``).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..device import Device
from ._session import LAYER, OPERATOR, SESSION, DeviceOp, TraceEvent, host_process, now_us

__all__ = ["recording", "set_recording", "record_op", "layer_scope", "open_layer", "SCOPE", "UNKNOWN_SCOPE",
           "MXNET_NAMES"]

# True while the profiler records operator calls (state 'run', not paused, operators enabled by set_config).
recording = False

UNKNOWN_SCOPE = "<unk>:"  # MXNet's scope outside any profiler.scope()
SCOPE: contextvars.ContextVar[str] = contextvars.ContextVar("mxlite_profiler_scope", default=UNKNOWN_SCOPE)

# mxlite's primitive names -> MXNet's operator names, where they differ.
MXNET_NAMES = {
    "fully_connected": "FullyConnected", "conv": "Convolution", "conv2d": "Convolution",
    "conv_transpose": "Deconvolution", "max_pool": "Pooling", "avg_pool": "Pooling", "max_pool2d": "Pooling",
    "avg_pool2d": "Pooling", "batch_norm": "BatchNorm", "layer_norm": "LayerNorm", "dropout": "Dropout",
    "embedding": "Embedding", "recurrence": "RNN", "stack_recurrence": "RNN", "bidirectional_recurrence": "RNN",
    "add": "broadcast_add", "subtract": "broadcast_sub", "multiply": "broadcast_mul", "divide": "broadcast_div",
    "power": "broadcast_power", "maximum": "broadcast_maximum", "minimum": "broadcast_minimum",
    "mod": "broadcast_mod", "hypot": "broadcast_hypot", "matmul": "dot", "reshape": "Reshape",
    "concat": "Concat", "astype": "Cast", "getitem": "slice",
}


def set_recording(on: bool) -> None:
    """Switch operator and layer recording on or off (the profiler's API calls this on every state change)."""
    global recording
    recording = bool(on)


class _Nesting(threading.local):
    def __init__(self) -> None:
        self.depth = 0  # 1 while this thread runs a recorded operator
        self.layers: list[Any] = []  # the blocks whose calls are open on this thread, outermost first


_NESTING = _Nesting()


def record_op(name: str, runner: Callable[..., Any], fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Return ``runner(name, fn, args, kwargs)`` (an operator's checked call), recorded as operator ``name``.

    The host time of the call becomes an ``operator`` event; on a GPU, CUDA events on the current stream
    around the call also give its device time (read at the next dump; not inside a CUDA graph capture).
    An exception from the call propagates and records nothing.
    """
    nesting = _NESTING
    if nesting.depth:  # inside another recorded operator: part of it
        return runner(name, fn, args, kwargs)
    label = MXNET_NAMES.get(name, name)
    device = _device_in(args)
    nesting.depth = 1
    try:
        if device is not None and device.is_gpu:
            return _record_on_gpu(label, device, runner, (name, fn, args, kwargs))
        begin = now_us()
        out = runner(name, fn, args, kwargs)
        _add_host_event(label, OPERATOR, device, begin, now_us())
        return out
    finally:
        nesting.depth = 0


def _record_on_gpu(label: str, device: Device, runner: Callable[..., Any], call: tuple) -> Any:
    with device.use():
        stream = device.xp.cuda.get_current_stream()
        timed = not stream.is_capturing()
        if timed:
            anchor = SESSION.anchor(device, stream)
            start, stop = device.xp.cuda.Event(), device.xp.cuda.Event()
        begin = now_us()  # the host span encloses the events, as it encloses the device's work
        if timed:
            start.record(stream)
        out = runner(*call)
        if timed:
            stop.record(stream)
        end = now_us()
    args = _scope_args()
    _add_host_event(label, OPERATOR, device, begin, end, args)
    if timed:
        SESSION.add_device_op(DeviceOp(label, device, f"stream {stream.ptr:#x}", anchor, start, stop, args))
    return out


def _add_host_event(name: str, category: str, device: Device | None, begin: float, end: float,
                    args: dict[str, Any] | None = None) -> None:
    if args is None:
        args = _scope_args()
    SESSION.add(TraceEvent("X", name, category, host_process(device), threading.get_ident(), begin, end - begin,
                           args))


def _scope_args() -> dict[str, Any] | None:
    scope = SCOPE.get()
    return None if scope == UNKNOWN_SCOPE else {"scope": scope}


def _device_in(args: tuple) -> Device | None:
    """The device of the first array among ``args`` (one level into lists and tuples), else None."""
    for a in args:
        if isinstance(a, (list, tuple)):
            found = _device_in(tuple(x for x in a if not isinstance(x, (list, tuple))))
        else:
            found = getattr(a, "device", None)
        if isinstance(found, Device):
            return found
    return None


def open_layer() -> Any:
    """The block whose call this thread is inside, innermost (None outside every block)."""
    layers = _NESTING.layers
    return layers[-1] if layers else None


@contextmanager
def layer_scope(block: Any, args: tuple) -> Iterator[None]:
    """Record the call of Gluon ``block`` on ``args`` as a ``layer`` event, and name it in the profiler scope
    of the operators it runs (``sequential:dense:``), as MXNet 2.x's ``Block.__call__`` does."""
    name = str(getattr(block, "name", type(block).__name__.lower()))
    outer = SCOPE.get()
    token = SCOPE.set((outer if outer != UNKNOWN_SCOPE else "") + name + ":")
    _NESTING.layers.append(block)
    begin = now_us()
    try:
        yield
    finally:
        end = now_us()
        _NESTING.layers.pop()
        SCOPE.reset(token)
        _add_host_event(name, LAYER, _device_in(args), begin, end, None if outer == UNKNOWN_SCOPE else {"scope": outer})

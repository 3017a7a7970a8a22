"""Streams, events and the logical ordering between them (strictness rule 2).

Work executes eagerly in NumPy; what is tracked is the order CUDA would guarantee. Every operation on a
stream gets the next sequence number of that stream. A stream knows, per other stream, a watermark: the
last sequence number of that stream it is ordered after (raised by ``wait_event``, transitively: an event
carries what its stream knew when it was recorded). The host has the same kind of watermarks, raised by
``synchronize`` calls and blocking reads; once the host knows work is complete, everything it enqueues
later, on any stream, is ordered after it.

Simplification (stricter than CUDA): streams made with ``non_blocking=False`` are not implicitly ordered
with the legacy default stream; every stream behaves as a non-blocking one (except that the legacy stream
may not be used while a blocking stream of its device captures, as in CUDA).

Stream capture (``begin_capture`` ... ``end_capture``, CUDA graphs) lives in :mod:`._graph`; a stream and an
event know the capture they take part in (``_capture``).
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from typing import Any

from . import _counters, _state
from ._errors import EmulatedGPUError, cuda_error

__all__ = ["Stream", "Event", "get_current_stream", "get_elapsed_time", "stream_from_ptr", "host_known", "host_sync",
           "completed", "synchronize_device", "active_captures"]

_ids = itertools.count(1)
_tls = threading.local()
# What the host knows is complete: {stream: last completed sequence number}.
host_known: dict[Any, int] = {}
_by_ptr: weakref.WeakValueDictionary[int, Stream] = weakref.WeakValueDictionary()
_per_device: dict[int, weakref.WeakSet[Stream]] = {}
_null: dict[int, Stream] = {}
# Stream captures in progress (:class:`._graph.Capture`), in the order they began.
active_captures: list[Any] = []


class Stream:
    """A CUDA stream of an emulated GPU (on the device current when it is made).

    Args:
        null: the legacy default stream of the current device (``ptr`` 0).
        non_blocking: accepted for compatibility; every emulated stream is non-blocking.
        ptds: accepted for compatibility.
        priority: accepted for compatibility.

    ``with stream:`` makes it the current stream of its device; ``ptr`` is a unique fake handle.
    """

    def __init__(self, null: bool = False, non_blocking: bool = False, ptds: bool = False,
                 priority: int | None = None) -> None:
        self.device_id = _state.current_device_id()
        _state.check_device_id(self.device_id)
        self._uid = next(_ids)
        self._seq = 0
        self._known: dict[Stream, int] = {}
        self._stack: list[Stream] = []
        self._capture: Any = None  # the capture this stream takes part in (see ._graph)
        self.non_blocking = bool(non_blocking)
        self.priority = 0 if priority is None else priority
        if null:
            self.ptr = 0
        else:
            self.ptr = 0x5EA0_0000_0000 + self._uid * 0x100
            _by_ptr[self.ptr] = self
        _per_device.setdefault(self.device_id, weakref.WeakSet()).add(self)

    def __repr__(self) -> str:
        kind = "null stream" if self.ptr == 0 else f"stream {self._uid} (ptr {self.ptr:#x})"
        return f"<{kind} of emulated gpu({self.device_id}), op #{self._seq}>"

    def __hash__(self) -> int:
        return self._uid

    def __eq__(self, other: object) -> bool:
        return self is other

    # -- current stream ------------------------------------------------------------------------
    def __enter__(self) -> Stream:
        self._stack.append(_current(self.device_id))
        _set_current(self.device_id, self)
        return self

    def __exit__(self, *exc: object) -> None:
        _set_current(self.device_id, self._stack.pop())

    def use(self) -> Stream:
        """Make this stream the current stream of its device; returns itself."""
        _set_current(self.device_id, self)
        return self

    # -- ordering ------------------------------------------------------------------------------
    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def record(self, event: Event | None = None) -> Event:
        """Record ``event`` (a new one when None) on this stream; returns it."""
        if event is None:
            event = Event()
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        """Order this stream's later work after the work ``event`` captured.

        During a stream capture, waiting on an event recorded in the capture forks this stream into it;
        a capturing stream may not wait on an event recorded outside its capture (CUDARuntimeError).
        """
        if not isinstance(event, Event):
            raise TypeError(f"wait_event expects an Event, got {type(event).__name__}")
        if event._capture is not None or self._capture is not None:
            from . import _graph  # noqa: PLC0415 - cycle

            _graph.wait_event(self, event)
        for stream, seq in event._known.items():
            if stream is not self and seq > self._known.get(stream, 0):
                self._known[stream] = seq

    def synchronize(self) -> None:
        """Block the host until this stream's work is done (the host then knows it complete).

        Raises:
            CUDARuntimeError: the stream is capturing (cudaErrorStreamCaptureUnsupported; the capture is
                invalidated, as in CUDA).
        """
        _host_wait(self, "Stream.synchronize()")
        host_sync(self)

    @property
    def done(self) -> bool:
        """Whether the stream's work is done (always True; no ordering is learnt). Refused while it captures."""
        _host_wait(self, "Stream.done")
        return True

    def add_callback(self, callback: Any, arg: Any) -> None:
        """Call ``callback(stream, 0, arg)`` (the work already ran). Refused while the stream captures."""
        _host_wait(self, "Stream.add_callback()")
        callback(self, 0, arg)

    # -- capture (CUDA graphs) -----------------------------------------------------------------
    def begin_capture(self, mode: int | None = None) -> None:
        """Begin a stream capture: the work issued on this stream is recorded into a graph instead of run.

        Args:
            mode: ``cupy.cuda.runtime.streamCaptureModeGlobal`` / ``ThreadLocal`` / ``Relaxed`` (default:
                relaxed, as CuPy). Outside relaxed mode, a new ``cudaMalloc`` (a pool growing) is refused.

        Raises:
            RuntimeError: the legacy null stream.
            CUDARuntimeError: an unknown mode, or the stream already captures.
        """
        from . import _graph  # noqa: PLC0415 - cycle

        _graph.begin(self, mode)

    def end_capture(self) -> Any:
        """End the capture begun on this stream and return its ``cupy.cuda.graph.Graph``.

        The stream (and every stream forked into the capture) leaves capture mode, also when this raises.

        Raises:
            CUDARuntimeError: not capturing (cudaErrorIllegalState), a stream other than the one that began the
                capture (cudaErrorStreamCaptureUnmatched), the capture was invalidated by an earlier error
                (cudaErrorStreamCaptureInvalidated), or a forked stream was not joined back
                (cudaErrorStreamCaptureUnjoined).
        """
        from . import _graph  # noqa: PLC0415 - cycle

        return _graph.end(self)

    def is_capturing(self) -> bool:
        """Whether the stream is capturing.

        Raises:
            RuntimeError: the capture was invalidated by an error (as CuPy's).
            CUDARuntimeError: the legacy null stream while a blocking stream captures.
        """
        if self._capture is None and not active_captures:
            return False
        from . import _graph  # noqa: PLC0415 - cycle

        return _graph.is_capturing(self)


class Event:
    """A CUDA event: captures a stream's position (and what that stream knew) at ``record``.

    Args:
        block, interprocess: accepted for compatibility.
        disable_timing: the event keeps no time, so :func:`get_elapsed_time` refuses it (as CUDA's).

    Work runs when it is issued, so the host clock at ``record`` is when the stream reached the event.
    """

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
        self._timing = not disable_timing
        self._time: float | None = None  # perf_counter() at the last record outside a capture
        self._known: dict[Stream, int] = {}
        self._stream: Stream | None = None
        self._capture: Any = None  # the capture it was last recorded in
        self.ptr = 0x5EB0_0000_0000 + next(_ids) * 0x100

    def __repr__(self) -> str:
        return f"<event on {self._stream!r}>" if self._stream else "<unrecorded event>"

    def record(self, stream: Stream | None = None) -> None:
        """Capture ``stream``'s work so far (default: the current stream)."""
        if stream is None:
            stream = get_current_stream()
        if stream._capture is not None or active_captures:
            from . import _graph  # noqa: PLC0415 - cycle

            _graph.issue(stream, "Event.record()")
        self._capture = stream._capture
        self._time = time.perf_counter() if stream._capture is None else None
        self._stream = stream
        self._known = dict(stream._known)
        self._known[stream] = stream._seq

    def synchronize(self) -> None:
        """Block the host until the captured work is done (refused for an event recorded in a capture)."""
        if self._capture is not None:
            _event_wait(self, "Event.synchronize()")
        if self._stream is not None:
            _counters.counters[self._stream.device_id].host_syncs += 1
        _merge_host(self._known)

    @property
    def done(self) -> bool:
        """Whether the captured work is done (always True; refused for an event recorded in a capture)."""
        if self._capture is not None:
            _event_wait(self, "Event.done")
        return True


def get_elapsed_time(start_event: Event, end_event: Event) -> float:
    """Milliseconds between two recorded events (CuPy's ``cupy.cuda.get_elapsed_time``).

    Raises:
        CUDARuntimeError: an event made with ``disable_timing=True`` or never recorded
            (cudaErrorInvalidResourceHandle), one last recorded in a stream capture (cudaErrorCapturedEvent), or
            one whose work the host has not waited for (cudaErrorNotReady: synchronize it first).
    """
    for role, event in (("start_event", start_event), ("end_event", end_event)):
        if not isinstance(event, Event):
            raise TypeError(f"get_elapsed_time: {role} must be an Event, got {type(event).__name__}")
        if event._capture is not None:
            raise cuda_error(907, f"get_elapsed_time: {role} {event!r} was recorded in a stream capture")
        if not event._timing or event._time is None:
            why = "made with disable_timing=True" if not event._timing else "never recorded"
            raise cuda_error(400, f"get_elapsed_time: {role} {event!r} was {why}")
        stream = event._stream
        if stream is not None and host_known.get(stream, 0) < event._known.get(stream, 0):
            raise cuda_error(600, f"get_elapsed_time: {role} {event!r} has not completed as far as the host "
                                  "knows; synchronize it first")
    return (end_event._time - start_event._time) * 1e3


def _host_wait(stream: Stream, what: str) -> None:
    if stream._capture is not None or active_captures:
        from . import _graph  # noqa: PLC0415 - cycle

        _graph.host_wait(stream, what)


def _event_wait(event: Event, what: str) -> None:
    from . import _graph  # noqa: PLC0415 - cycle

    _graph.event_wait(event, what)


def _merge_host(known: dict[Stream, int]) -> None:
    for stream, seq in known.items():
        if seq > host_known.get(stream, 0):
            host_known[stream] = seq


def host_sync(stream: Stream) -> None:
    """The host waited for ``stream``: it knows its work (and what it waited for) complete."""
    _counters.counters[stream.device_id].host_syncs += 1
    _merge_host(stream._known)
    _merge_host({stream: stream._seq})


def synchronize_device(device_id: int) -> None:
    """The host waited for every stream of ``device_id`` (refused while one of them captures)."""
    if active_captures:
        from . import _graph  # noqa: PLC0415 - cycle

        _graph.device_wait(device_id, "device synchronize")
    _counters.counters[device_id].host_syncs += 1
    for stream in list(_per_device.get(device_id, ())):
        _merge_host(stream._known)
        _merge_host({stream: stream._seq})


def completed(observer: Stream, stream: Stream, seq: int) -> bool:
    """Whether work ``seq`` of ``stream`` is ordered before new work of ``observer``."""
    return stream is observer or observer._known.get(stream, 0) >= seq or host_known.get(stream, 0) >= seq


def _null_stream(device_id: int) -> Stream:
    stream = _null.get(device_id)
    if stream is None:
        saved = _state.current_device_id()
        try:
            _state._tls.device = device_id
            stream = _null[device_id] = Stream(null=True)
        finally:
            _state._tls.device = saved
    return stream


def _current(device_id: int) -> Stream:
    current = getattr(_tls, "streams", None)
    if current is None:
        current = _tls.streams = {}
    stream = current.get(device_id)
    return stream if stream is not None else _null_stream(device_id)


def _set_current(device_id: int, stream: Stream) -> None:
    if getattr(_tls, "streams", None) is None:
        _tls.streams = {}
    _tls.streams[device_id] = stream


def get_current_stream(device_id: int = -1) -> Stream:
    """The current stream of ``device_id`` (default: the current device) in this thread."""
    if device_id == -1:
        device_id = _state.current_device_id()
    return _current(_state.check_device_id(device_id))


def stream_from_ptr(ptr: int, device_id: int) -> Stream:
    """The stream whose handle is ``ptr`` (0: ``device_id``'s null stream); EmulatedGPUError otherwise."""
    if ptr == 0:
        return _null_stream(device_id)
    stream = _by_ptr.get(int(ptr))
    if stream is None:
        raise EmulatedGPUError(f"stream handle {int(ptr):#x} is not a live stream of the emulated GPUs")
    if stream.device_id != device_id:
        raise EmulatedGPUError(f"{stream!r} belongs to gpu({stream.device_id}), not to gpu({device_id})")
    return stream


def reset() -> None:
    """Forget all ordering state (used by install)."""
    host_known.clear()
    active_captures.clear()
    _null.clear()
    _per_device.clear()
    _tls.streams = {}

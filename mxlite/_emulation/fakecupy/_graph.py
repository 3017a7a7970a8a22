"""CUDA graph capture on the emulated GPUs: ``Stream.begin_capture`` / ``end_capture`` and ``Graph.launch``.

While a stream captures, the work issued on it (array operations, RawKernel launches, device copies and
fills, the emulated cuBLAS GEMMs) is recorded as graph nodes: closures over NumPy views of the emulated
device memory, so that a launch computes on the buffers' contents at launch time, in the recorded order,
with the output buffers allocated once, at capture. To learn the shapes and dtypes of results, each piece
of work also runs once at capture on the current contents; when the capture ends every byte that run
changed is put back: buffers that existed before the capture get their contents and access histories back,
buffers allocated during it are filled with 0xFF (uninitialised, as on a GPU, until the graph is launched).

What CUDA (or CuPy) refuses during a capture raises here too, with CUDA's error where it has one, and the
double adds checks for what a GPU would get silently wrong (see docs/gpu-emulation.md):

* host synchronisation of a capturing stream or its device: ``CUDARuntimeError``
  (cudaErrorStreamCaptureUnsupported), which invalidates the capture, as in CUDA;
* device -> host and host -> device copies on a capturing stream (``get``, ``asnumpy``, ``float``, ``bool``,
  ``item``, ``asarray(numpy array)``, ``set``, operations whose result size depends on the data):
  ``RuntimeError`` before anything is issued, as CuPy raises it (the capture stays valid);
* cuBLAS through CuPy (``matmul``, ``dot``, ``@``, ...): ``NotImplementedError``, CuPy's message;
  cuRAND (``cupy.random``): likewise;
* an allocation from CuPy's default memory pool: ``EmulatedGPUError`` (allocate graph memory from a
  ``cupy.cuda.MemoryPool()`` of the graph's own, through ``cupy.cuda.using_allocator``);
* a stream that was not joined into the capture by an event, touching the capture's buffers, or feeding
  them with work done during the capture: ``EmulatedGPUError``;
* at launch, a buffer the graph uses that was freed since, when its memory now holds another array or was
  released, or when the graph reads it before writing it: ``EmulatedGPUError``.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import _core, _counters, _memory, _ndarray, _streams
from ._errors import EmulatedGPUError, cuda_error

__all__ = ["Capture", "Graph", "begin", "end", "is_capturing", "issue", "before_access", "wait_event",
           "event_wait", "host_wait", "device_wait", "refuse_transfer", "check_capturable", "record_apply",
           "check_unsafe_call", "default_pool_error"]

MODE_GLOBAL, MODE_THREAD_LOCAL, MODE_RELAXED = 0, 1, 2
_MODE_NAMES = {MODE_GLOBAL: "global", MODE_THREAD_LOCAL: "thread-local", MODE_RELAXED: "relaxed"}
_graph_ids = itertools.count(1)
# Operations CuPy runs through cuBLAS for floating-point operands (CuPy refuses cuBLAS during capture).
_CUBLAS = frozenset(("matmul", "dot", "tensordot", "inner", "vdot", "einsum", "__matmul__", "__rmatmul__",
                     "__imatmul__"))
_POISON = 0xFF


class _Saved:
    """What a buffer that existed before the capture held when the capture first used it."""

    __slots__ = ("allocation", "writes", "reads", "data")

    def __init__(self, allocation: _memory.Allocation, data: np.ndarray | None) -> None:
        self.allocation = allocation  # kept alive until the capture ends (its contents are put back then)
        self.writes, self.reads, self.data = allocation.writes, allocation.reads, data


class _Fresh:
    """A buffer allocated on a capturing stream (weakly held: the capture may free it, as CuPy's would)."""

    __slots__ = ("ref", "stream", "new_block")

    def __init__(self, allocation: _memory.Allocation, stream: _streams.Stream, new_block: bool) -> None:
        self.ref, self.stream, self.new_block = weakref.ref(allocation), stream, new_block


class _Buffer:
    """An allocation the graph's nodes use: the byte ranges they read and write, and which comes first."""

    __slots__ = ("ref", "id", "block", "pool", "label", "reads", "writes", "first_read")

    def __init__(self, allocation: _memory.Allocation, first_read: bool) -> None:
        self.ref = weakref.ref(allocation)
        self.id, self.block, self.pool, self.label = allocation.id, allocation.block, allocation.pool, repr(allocation)
        self.reads: list[tuple[int, int]] = []
        self.writes: list[tuple[int, int]] = []
        self.first_read = first_read


class Capture:
    """A capture sequence in progress: the streams in it, the nodes recorded, and what to put back at the end.

    Attributes:
        origin: the stream ``begin_capture`` was called on (only it can end the capture).
        mode: the cudaStreamCaptureMode (0 global, 1 thread-local, 2 relaxed).
        joined: every stream in the capture -> (its op count and what it knew of other streams when it joined).
        error: the message of the error that invalidated the capture (None while it is valid).
    """

    def __init__(self, origin: _streams.Stream, mode: int) -> None:
        self.origin = origin
        self.device_id = origin.device_id
        self.mode = mode
        self.thread = threading.get_ident()
        self.joined: dict[_streams.Stream, tuple[int, dict[_streams.Stream, int]]] = {}
        # Every stream's op count at the start: later work of a stream outside the capture ran during it.
        self.started = {s: s._seq for streams in list(_streams._per_device.values()) for s in list(streams)}
        self.nodes: list[tuple[str, Callable[[], None]]] = []
        self.buffers: dict[int, _Buffer] = {}
        self.saved: dict[int, _Saved] = {}
        self.fresh: dict[int, _Fresh] = {}
        self.freed: list[Any] = []  # blocks of buffers allocated and freed during the capture
        self.error: str | None = None
        self.join(origin)

    def __repr__(self) -> str:
        state = "invalidated" if self.error else "active"
        return f"<{state} capture on {self.origin!r}, {len(self.nodes)} node(s)>"

    def join(self, stream: _streams.Stream) -> None:
        """Make ``stream`` part of the capture (``begin_capture``, or a wait on an event recorded in it)."""
        self.joined[stream] = (stream._seq, dict(stream._known))
        stream._capture = self

    def invalidate(self, message: str) -> None:
        """Mark the capture failed (the first error is kept); ``end_capture`` then raises."""
        if self.error is None:
            self.error = message

    @property
    def blocking(self) -> bool:
        """Whether a stream of the capture was made without ``non_blocking=True`` (the legacy stream must wait)."""
        return any(not s.non_blocking for s in self.joined)

    # -- buffers -----------------------------------------------------------------------------------
    def register(self, allocation: _memory.Allocation, stream: _streams.Stream, new_block: bool) -> None:
        """An allocation made on a stream of this capture."""
        allocation.capture = self
        self.fresh[allocation.id] = _Fresh(allocation, stream, new_block)

    def touch(self, x: Any, write: bool, what: str) -> None:
        """The capture uses ``x`` (array, allocation or byte range): from now on it is the capture's until the end."""
        mem = _core._byte_range(x)[0]
        owner = mem.capture
        if owner is self:
            saved = self.saved.get(mem.id)
            if write and saved is not None and saved.data is None:
                saved.data = mem.view_bytes().copy()
            return
        if owner is not None:
            raise EmulatedGPUError(f"{what}: {_core._name(x)} is used by another capture, {owner!r}; one buffer "
                                   "cannot take part in two captures at once")
        for _start, _end, writer, seq in mem.writes:
            during = seq > self.started.get(writer, 0) and (writer not in self.joined or seq <= self.joined[writer][0])
            if during and (writer, seq) != mem.born:
                raise EmulatedGPUError(
                    f"{what}: {_core._name(x)} was written by op #{seq} of {writer!r} while {self.origin!r} was "
                    "capturing, but that stream was not part of the capture: its work ran once, now, and a launch "
                    "of the graph will not repeat it. Fork the stream into the capture (record an Event on the "
                    "capturing stream and wait_event it on the other stream before the work, then join back), or "
                    "do that work before begin_capture()")
        self.saved[mem.id] = _Saved(mem, mem.view_bytes().copy() if write else None)
        mem.writes, mem.reads = [], []
        mem.capture = self

    def add(self, name: str, run: Callable[[], None], reads: Iterable[Any], writes: Iterable[Any]) -> None:
        """Record node ``name``: ``run()`` redoes the work; ``reads``/``writes`` are what it accesses."""
        self.nodes.append((name, run))
        for items, write in ((reads, False), (writes, True)):
            for x in items:
                mem, lo, hi = _core._byte_range(x)
                buf = self.buffers.get(mem.id)
                if buf is None:
                    buf = self.buffers[mem.id] = _Buffer(mem, first_read=not write)
                (buf.writes if write else buf.reads).append((lo, hi))

    # -- the end -----------------------------------------------------------------------------------
    def unjoined(self) -> list[_streams.Stream]:
        """Streams forked into the capture whose work the origin stream has not waited for."""
        origin = self.origin
        return [s for s, (seq, _) in self.joined.items()
                if s is not origin and s._seq > seq and origin._known.get(s, 0) < s._seq]

    def teardown(self) -> None:
        """Leave capture mode: streams, buffers and the pool as if the captured work had never run."""
        if self in _streams.active_captures:
            _streams.active_captures.remove(self)
        for stream, (_seq, known) in self.joined.items():
            stream._capture = None
            stream._known = known  # waits inside the capture ordered nothing outside it
        for saved in self.saved.values():
            mem = saved.allocation
            if saved.data is not None:
                mem.view_bytes()[...] = saved.data
            mem.writes, mem.reads = saved.writes, saved.reads
            mem.capture = None
        for fresh in self.fresh.values():
            mem = fresh.ref()
            if mem is None:
                continue
            mem.capture = None
            mem.view_bytes()[...] = _POISON
            mem.reads = []
            # A reused block may still be in use by work its stream issued before joining the capture.
            mem.writes = [] if fresh.new_block else [(0, max(mem.size, 1), fresh.stream, self.joined[fresh.stream][0])]
        for block in self.freed:
            block.hazards = []  # the accesses that made them were captured, not run
        self.saved.clear()
        self.fresh.clear()


# -- entry points used by the rest of the double ---------------------------------------------------------
def issue(stream: _streams.Stream, what: str) -> Capture | None:
    """The capture that records work issued on ``stream`` (None: the work runs now).

    Raises:
        CUDARuntimeError: the capture was invalidated (cudaErrorStreamCaptureInvalidated), or ``stream`` is
            the legacy null stream while a blocking stream of its device captures (cudaErrorStreamCaptureImplicit).
    """
    cap = stream._capture
    if cap is not None:
        if cap.error is not None:
            raise cuda_error(901, f"{what} on {stream!r}: the capture was invalidated by: {cap.error}")
        return cap
    if stream.ptr == 0:
        for other in list(_streams.active_captures):
            if other.device_id == stream.device_id and other.blocking:
                message = (f"{what} on the legacy null stream while {other.origin!r} (a blocking stream) captures; "
                           "capture on a cupy.cuda.Stream(non_blocking=True), or issue the work on another stream")
                other.invalidate(message)
                raise cuda_error(906, message)
    return None


def before_access(stream: _streams.Stream, reads: Iterable[Any], writes: Iterable[Any], what: str,
                  collective: bool) -> None:
    """Called by ``_core.check_access`` while some capture is active: claim or guard the capture's buffers."""
    cap = stream._capture
    if cap is not None:  # an NCCL call too: cuda/nccl.py records it (and refuses what it cannot capture)
        for x in reads:
            cap.touch(x, False, what)
        for x in writes:
            cap.touch(x, True, what)
        return
    for x in itertools.chain(reads, writes):
        owner = _core._byte_range(x)[0].capture
        if owner is not None:
            raise EmulatedGPUError(
                f"{what}: {_core._name(x)} is used by the capture on {owner.origin!r}, but {stream!r} is not part of "
                "that capture (its work would run now, on contents the captured work has not produced). Fork the "
                "stream into the capture with an Event (record on the capturing stream, wait_event on this one), "
                "or use the buffer after end_capture()")


def refuse_transfer(stream: _streams.Stream, kind: str, what: str) -> None:
    """Raise CuPy's RuntimeError for a host <-> device copy (``kind`` 'D2H' or 'H2D') on a capturing stream."""
    if stream._capture is not None or _streams.active_captures:
        if issue(stream, what) is not None:
            raise RuntimeError(f"the current stream is capturing, so {kind} transfers are disallowed ({what} on "
                               f"{stream!r}: a graph cannot move data to or from the host; copy before "
                               "begin_capture() or after end_capture())")


def host_wait(stream: _streams.Stream, what: str) -> None:
    """The host is about to wait for (or query) ``stream``: refused while it captures (the capture is invalidated)."""
    cap = stream._capture
    if cap is not None:
        message = f"{what} on {stream!r} while it captures: captured work does not run, there is nothing to wait for"
        cap.invalidate(message)
        raise cuda_error(900, message)
    if stream.ptr == 0 and _streams.active_captures:
        issue(stream, what)


def device_wait(device_id: int, what: str) -> None:
    """The host is about to wait for a whole device: refused while a stream of it captures."""
    for cap in list(_streams.active_captures):
        if cap.device_id == device_id:
            message = f"{what} on gpu({device_id}) while {cap.origin!r} captures"
            cap.invalidate(message)
            raise cuda_error(900, message)


def event_wait(event: _streams.Event, what: str) -> None:
    """The host is about to wait for (or query) ``event``."""
    cap = event._capture
    if cap is None:
        return
    if cap in _streams.active_captures:
        raise cuda_error(907, f"{what}: the event was recorded on {event._stream!r} during its capture")
    raise EmulatedGPUError(f"{what}: the event was last recorded during a stream capture (now ended), so it marks no "
                           "work that runs; record it again after Graph.launch() to wait for a launch")


def wait_event(stream: _streams.Stream, event: _streams.Event) -> None:
    """``stream.wait_event(event)`` under capture: fork ``stream`` into the event's capture, or refuse."""
    ecap, scap = event._capture, stream._capture
    if ecap is not None:
        if ecap not in _streams.active_captures:
            event_wait(event, f"{stream!r}.wait_event()")
        if scap is None:
            issue(stream, "wait_event")
            ecap.join(stream)
        elif scap is not ecap:
            message = (f"{stream!r} (capturing into {scap!r}) waits on an event recorded in another capture, "
                       f"{ecap!r}")
            scap.invalidate(message)
            ecap.invalidate(message)
            raise cuda_error(902, message)
        elif ecap.error is not None:
            raise cuda_error(901, f"wait_event on {stream!r}: the capture was invalidated by: {ecap.error}")
    elif scap is not None and event._stream is not None:
        message = (f"{stream!r} is capturing and waits on an event recorded outside the capture (on "
                   f"{event._stream!r}); a graph cannot depend on uncaptured work: order that work before "
                   "begin_capture() (e.g. synchronize it)")
        scap.invalidate(message)
        raise cuda_error(905, message)


def check_unsafe_call(what: str) -> None:
    """A potentially unsafe CUDA call (``cudaMalloc``) is made: refused in global and thread-local capture modes."""
    me = threading.get_ident()
    for cap in list(_streams.active_captures):
        if (cap.thread == me and cap.mode != MODE_RELAXED) or (cap.thread != me and cap.mode == MODE_GLOBAL):
            message = (f"{what} while {cap.origin!r} captures in {_MODE_NAMES[cap.mode]} mode; such calls are "
                       "allowed only in relaxed mode (cupy's default), or allocate the memory before the capture")
            cap.invalidate(message)
            raise cuda_error(900, message)


def default_pool_error(stream: _streams.Stream, size: int) -> EmulatedGPUError:
    """The error for an allocation from CuPy's default pool on a capturing stream."""
    return EmulatedGPUError(
        f"allocation of {size} bytes from CuPy's default memory pool while {stream!r} is capturing: the graph "
        "keeps the address, and once the array is freed the default pool hands the block to other arrays, which "
        "every launch of the graph would then overwrite. Allocate graph memory from a pool of the graph's own: "
        "pool = cupy.cuda.MemoryPool(); with cupy.cuda.using_allocator(pool.malloc): ... (around the capture, "
        "and keep that pool for the graph's captures only)")


def check_capturable(stream: _streams.Stream, name: str, args: tuple, host: bool, sync: bool) -> None:
    """Raise as CuPy does for an array operation that cannot be captured."""
    if name in _CUBLAS and _uses_cublas(name, args):
        raise NotImplementedError("calling cuBLAS API during stream capture is currently unsupported")
    if host:
        refuse_transfer(stream, "H2D", name)
    if sync:
        raise RuntimeError(f"the current stream is capturing, so D2H transfers are disallowed ({name} on "
                           f"{stream!r} needs the size of its result on the host, which needs the data)")


def _uses_cublas(name: str, args: tuple) -> bool:
    """Whether CuPy would call cuBLAS: floating operands, none 0-d (a 0-d operand is a plain multiplication)."""
    arrays = [a for a in args if isinstance(a, _ndarray.ndarray)]
    if name == "einsum":
        return len(arrays) >= 2 and all(a.dtype.kind in "fc" for a in arrays)
    operands = [a for a in args[:2]]
    if not arrays or any(np.ndim(a) == 0 for a in operands):
        return False
    dtype = np.result_type(*[a.dtype if isinstance(a, _ndarray.ndarray) else a for a in operands])
    return dtype.kind in "fc"


def _freeze(x: Any) -> Any:
    """Arguments as a node keeps them: NumPy views of their own (later changes of an array's shape don't leak in)."""
    if type(x) is np.ndarray:
        return x.view()
    if type(x) is list or type(x) is tuple:
        return type(x)(_freeze(v) for v in x)
    if type(x) is dict:
        return {k: _freeze(v) for k, v in x.items()}
    return x


def record_apply(cap: Capture, stream: _streams.Stream, name: str, func: Callable[..., Any], nargs: tuple,
                 nkwargs: dict[str, Any], result: Any, value: Any, reads: list[Any], writes: list[Any],
                 sources: list[Any]) -> None:
    """Record an array operation run by ``_core.apply``: ``func`` again, its fresh results copied into ``value``."""
    source_ids = {x._mem.id for x in sources}
    targets: list[tuple[tuple[int, ...], np.ndarray]] = []
    pending = [(result, value, ())]
    while pending:
        r, v, path = pending.pop()
        if isinstance(r, (np.ndarray, np.generic)):
            if isinstance(v, _ndarray.ndarray) and v._mem.id not in source_ids:
                targets.append((path, v._a.view()))
                writes.append(v)
        elif type(r) is tuple or type(r) is list:
            pending += [(item, v[i], (*path, i)) for i, item in enumerate(r)]
        elif r is not None and (reads or writes):
            raise RuntimeError(f"the current stream is capturing, so D2H transfers are disallowed ({name} on "
                               f"{stream!r} returns a host value, {type(r).__name__}, that needs the data)")
    if not (reads or writes):
        return  # no data touched and nothing computed: a view or a metadata query
    cap.add(name, _Replay(func, _freeze(nargs), _freeze(nkwargs), targets), reads, writes)


class _Replay:
    """A recorded array operation: ``func`` on the frozen arguments, fresh results copied into their buffers."""

    __slots__ = ("func", "args", "kwargs", "targets")

    def __init__(self, func: Callable[..., Any], args: tuple, kwargs: dict[str, Any],
                 targets: list[tuple[tuple[int, ...], np.ndarray]]) -> None:
        self.func, self.args, self.kwargs, self.targets = func, args, kwargs, targets

    def __call__(self) -> None:
        out = self.func(*self.args, **self.kwargs)
        for path, target in self.targets:
            item = out
            for i in path:
                item = item[i]
            np.copyto(target, item, casting="unsafe")


# -- the stream API ------------------------------------------------------------------------------------------
def begin(stream: _streams.Stream, mode: int | None) -> None:
    """``Stream.begin_capture``."""
    if stream.ptr == 0:
        raise RuntimeError("cannot capture on the default (legacy) stream")
    mode = MODE_RELAXED if mode is None else mode
    if mode not in _MODE_NAMES:
        raise cuda_error(1, f"begin_capture(mode={mode!r}): the mode must be cupy.cuda.runtime.streamCaptureMode"
                            "Global (0), ThreadLocal (1) or Relaxed (2)")
    if stream._capture is not None:
        raise cuda_error(401, f"begin_capture() on {stream!r}, which is already capturing ({stream._capture!r})")
    _streams.active_captures.append(Capture(stream, mode))


def end(stream: _streams.Stream) -> Graph:
    """``Stream.end_capture``: the graph of the work captured since ``begin_capture``."""
    cap = stream._capture
    if cap is None:
        raise cuda_error(401, f"end_capture() on {stream!r}, which is not capturing")
    if cap.origin is not stream:
        message = f"end_capture() on {stream!r}, but the capture began on {cap.origin!r}"
        cap.invalidate(message)
        raise cuda_error(903, message)
    if cap.mode == MODE_THREAD_LOCAL and cap.thread != threading.get_ident():
        raise cuda_error(908, f"end_capture() on {stream!r} from another thread than the one that began it")
    try:
        if cap.error is not None:
            raise cuda_error(901, f"end_capture() on {stream!r}: the capture was invalidated by: {cap.error}")
        unjoined = cap.unjoined()
        if unjoined:
            raise cuda_error(904, f"end_capture() on {stream!r}: the work of {', '.join(map(repr, unjoined))} was "
                                  "not joined back (record an Event after it and wait_event it on the capturing "
                                  "stream before end_capture())")
        graph = Graph._from_capture(cap)
    finally:
        cap.teardown()
    return graph


def is_capturing(stream: _streams.Stream) -> bool:
    """``Stream.is_capturing``."""
    cap = stream._capture
    if cap is not None:
        if cap.error is not None:
            raise RuntimeError("the stream was capturing, but an error has invalidated the capture sequence")
        return True
    if stream.ptr == 0:
        for other in list(_streams.active_captures):
            if other.device_id == stream.device_id and other.blocking:
                raise cuda_error(906, f"is_capturing() of the legacy null stream while {other.origin!r} (a blocking "
                                      "stream) captures")
    return False


class Graph:
    """A CUDA graph made by a stream capture (CuPy's ``cupy.cuda.graph.Graph``): ``launch`` replays its work.

    Graphs cannot be made directly: ``stream.begin_capture()`` ... ``graph = stream.end_capture()``.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("currently this class cannot be initiated by the user and must be created via "
                                  "stream capture")

    @classmethod
    def _from_capture(cls, cap: Capture) -> Graph:
        graph = object.__new__(cls)
        graph._device_id = cap.device_id
        graph._nodes = list(cap.nodes)
        graph._buffers = dict(cap.buffers)
        for buf in graph._buffers.values():
            buf.reads, buf.writes = _merge(buf.reads), _merge(buf.writes)
        uid = next(_graph_ids)
        graph._graph, graph._exec = 0x6A00_0000_0000 + uid * 0x100, 0x6B00_0000_0000 + uid * 0x100
        return graph

    def __repr__(self) -> str:
        return f"<CUDA graph of emulated gpu({self._device_id}), {len(self._nodes)} node(s)>"

    @property
    def graph(self) -> int:
        """The ``cudaGraph_t`` handle (a unique fake value)."""
        return self._graph

    @property
    def graphExec(self) -> int:  # noqa: N802 - CuPy's name
        """The ``cudaGraphExec_t`` handle (a unique fake value)."""
        return self._exec

    @property
    def host_funcargs(self) -> list[Any]:
        """Host callbacks kept alive for the graph (none: the double captures no host functions)."""
        return []

    def _stream(self, stream: Any, what: str) -> _streams.Stream:
        if stream is None:
            stream = _streams.get_current_stream()
        elif not isinstance(stream, _streams.Stream):
            raise TypeError(f"Graph.{what}(stream=...) expects a cupy.cuda.Stream, got {type(stream).__name__}")
        if stream.device_id != self._device_id:
            raise EmulatedGPUError(f"Graph.{what}() on {stream!r}, but the graph was captured on gpu({self._device_id})"
                                   f"; launch it on a stream of gpu({self._device_id})")
        return stream

    def upload(self, stream: Any = None) -> None:
        """Prepare the graph for launches on ``stream`` (default: the current stream); nothing to do here."""
        self._stream(stream, "upload")

    def launch(self, stream: Any = None) -> None:
        """Replay the captured work on ``stream`` (default: the current stream), in the recorded order.

        The replay reads and writes the buffers' contents now, counts one ``graph_launches`` (and its nodes in
        ``graph_nodes``) and, for the stream rules, is one operation of ``stream`` touching every buffer of
        the graph.

        Raises:
            EmulatedGPUError: a buffer of the graph was freed and its memory now belongs to another array, was
                released to the driver, or is read by the graph before it writes it; a race with another
                stream; a stream of another device; a launch inside a capture (child graphs are not emulated).
        """
        stream = self._stream(stream, "launch")
        what = f"launch of {self!r}"
        if issue(stream, what) is not None:
            raise EmulatedGPUError(f"{what} on {stream!r}, which is capturing: graphs inside a capture (child graph "
                                   "nodes) are not emulated; capture the work itself")
        reads, writes, dead = self._resolve(what)
        _core.check_access(stream, reads, writes, what)
        seq = _core.record_access(stream, reads, writes)
        for buf in dead:  # memory back in its pool: a later allocation elsewhere must wait for this launch
            buf.block.hazards.append((buf.label, stream, seq))
            if buf.block not in buf.pool.hazardous:
                buf.pool.hazardous.append(buf.block)
        for _name, run in self._nodes:
            run()
        counters = _counters.counters[self._device_id]
        counters.graph_launches += 1
        counters.graph_nodes += len(self._nodes)

    def _resolve(self, what: str) -> tuple[list[Any], list[Any], list[_Buffer]]:
        reads: list[Any] = []
        writes: list[Any] = []
        dead: list[_Buffer] = []
        for buf in self._buffers.values():
            mem = buf.ref()
            if mem is not None:
                reads += [(mem, lo, hi) for lo, hi in buf.reads]
                writes += [(mem, lo, hi) for lo, hi in buf.writes]
                continue
            freed = f"{what}: the graph uses {buf.label}, which was freed after the capture"
            if buf.block.released:
                raise EmulatedGPUError(f"{freed} and its memory released (free_all_blocks); keep the graph's buffers "
                                       "alive, or their pool unreleased, while the graph may be launched")
            occupant = _memory.occupant(buf.block)
            if occupant is not None and occupant.id not in self._buffers:
                raise EmulatedGPUError(f"{freed}; the pool has since given that memory to {occupant!r}, which the "
                                       "launch would overwrite. Keep the graph's inputs and outputs alive, and "
                                       "allocate its memory from a pool only its captures use")
            if buf.first_read:
                raise EmulatedGPUError(f"{freed}, and the graph reads it before writing it (an input): keep the arrays "
                                       "a graph reads alive while it may be launched")
            dead.append(buf)
        return reads, writes, dead

    def debug_dot_str(self, flags: int = 0) -> str:
        """The graph in DOT: one node per captured operation, in launch order."""
        lines = [f'digraph "emulated_cuda_graph_{self._graph:#x}" {{']
        for i, (name, _run) in enumerate(self._nodes):
            lines.append(f'  node{i} [label="{i}: {name}"];')
            if i:
                lines.append(f"  node{i - 1} -> node{i};")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Overlapping or touching byte ranges merged into one."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out

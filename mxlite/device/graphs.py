"""CUDA graphs on mxlite's GPUs: capture a piece of work once, replay it with one launch.

A capture (:func:`capture`) runs a Python function while a stream of the GPU records, instead of running,
the work it issues; :meth:`Graph.launch` then replays that work on the current stream with one call from
the host. The replay reads and writes the buffers the capture used, at launch time: inputs enter a graph
by being copied into its input buffers, results leave it in its output buffers.

Each graph gets memory of its own: a ``cupy.cuda.MemoryPool()`` used only while it is captured
(``cupy.cuda.using_allocator``). The arrays a capture allocates keep their addresses in the graph, so no
other array may ever be given their memory: with CuPy's default pool, an array freed after the capture
would go back to the pool, be handed to some other array, and be overwritten by every launch. The pool
lives as long as the graph; :func:`info` lists the graphs held and the memory they hold, :func:`clear`
(or dropping the object that holds a graph, e.g. ``block.hybridize(False)``) releases them.

GEMMs inside a capture must go through :mod:`mxlite.device.blas` (cuBLAS through nvmath-python): CuPy's
own cuBLAS calls are refused during a capture. Without nvmath-python, :func:`capture` raises
:class:`GraphUnavailableError`.

Captures run on a non-blocking stream of the device's own, ordered after the current stream's work by an
event; the graph is launched on whatever stream is current at launch.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import blas
from .devices import Device

__all__ = ["CaptureError", "Graph", "GraphUnavailableError", "capture", "capturing", "clear", "info"]


class GraphUnavailableError(RuntimeError):
    """CUDA graphs cannot be made here: a CPU device, or GEMMs that cannot be captured (no nvmath-python)."""


class CaptureError(RuntimeError):
    """The work could not be captured; ``cause`` says why in a few words (the original error is chained)."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(f"{cause}: {detail}")
        self.cause = cause


_lock = threading.Lock()
_streams: dict[int, Any] = {}  # device id -> the non-blocking stream captures run on
_live: weakref.WeakSet[Graph] = weakref.WeakSet()
_ids = itertools.count(1)
_tls = threading.local()
# How the GPU stack refuses work inside a capture: the error types of CUDA and its libraries (CuPy's, and the
# emulated GPUs' own checks), and the words of CuPy's refusals (cuBLAS, cuRAND, host transfers: NotImplementedError,
# RuntimeError). Raised inside a capture, such a type is most likely the capture's doing (cudaErrorStreamCapture*);
# were it not, the eager call would raise it again.
_GPU_ERRORS = frozenset({"CUDARuntimeError", "CUDADriverError", "CUBLASError", "CURANDError", "NcclError",
                         "cuBLASError", "EmulatedGPUError"})
_REFUSAL_WORDS = ("stream capture", "is capturing", "transfers are disallowed", "StreamCapture")


class Graph:
    """One captured CUDA graph and the memory pool its buffers came from.

    Attributes:
        device: the GPU it runs on.
        label: what it is (``'Sequential forward (64, 100) float32'``), for :func:`info`.
        launches: how many times it was launched.
    """

    def __init__(self, device: Device, graph: Any, pool: Any, label: str) -> None:
        self.device = device
        self.label = label
        self.launches = 0
        self.id = next(_ids)
        self._graph = graph
        self._pool = pool
        _live.add(self)

    @property
    def alive(self) -> bool:
        """False once :meth:`drop` (or :func:`clear`) released it."""
        return self._graph is not None

    @property
    def nbytes(self) -> int:
        """Bytes its memory pool holds on the device (buffers in use plus free blocks kept for it)."""
        if self._pool is None:
            return 0
        with self.device.use():
            return int(self._pool.total_bytes())

    def launch(self) -> None:
        """Replay the captured work on the device's current stream (one call; no host synchronisation).

        Raises:
            RuntimeError: the graph was dropped.
        """
        if self._graph is None:
            raise RuntimeError(f"graph {self.label!r} was dropped (mx.device.graphs.clear() or hybridize(False)); "
                               "capture it again")
        with self.device.use():
            self._graph.launch(stream=self.device.xp.cuda.get_current_stream())
        self.launches += 1

    def drop(self) -> None:
        """Release the graph; its pool's blocks go back to the device once the arrays using them are freed."""
        self._graph = None
        _live.discard(self)

    def __repr__(self) -> str:
        state = "" if self.alive else ", dropped"
        return f"<CUDA graph #{self.id} {self.label!r} on {self.device}, {self.nbytes} bytes{state}>"


def _forget() -> None:
    """Drop every graph and forget the capture streams (the GPU emulation calls this when it is installed again)."""
    clear()
    with _lock:
        _streams.clear()


def _stream(device: Device) -> Any:
    with _lock:
        stream = _streams.get(device.device_id)
        if stream is None:
            with device.use():
                stream = _streams[device.device_id] = device.xp.cuda.Stream(non_blocking=True)
        return stream


def capturing() -> bool:
    """Whether this thread is inside :func:`capture` (work issued now is recorded, not run)."""
    return getattr(_tls, "depth", 0) > 0


@contextmanager
def _depth() -> Iterator[None]:
    _tls.depth = getattr(_tls, "depth", 0) + 1
    try:
        yield
    finally:
        _tls.depth -= 1


def capture(device: Device, fn: Callable[[], Any], label: str) -> tuple[Graph, Any]:
    """Capture the GPU work of ``fn()`` on ``device`` as a CUDA graph; returns ``(graph, what fn returned)``.

    Nothing runs: the arrays ``fn`` returns hold their values only after ``graph.launch()`` (on the
    emulated GPUs they read as NaN until then). Allocations made by ``fn`` come from the graph's own
    pool. Work issued by ``fn`` on the current stream before it (copies into the graph's inputs) is
    ordered before the graph's launches as usual.

    Raises:
        GraphUnavailableError: ``device`` is not a GPU, or GEMMs cannot be captured (no nvmath-python).
        CaptureError: ``fn`` did something a capture cannot record (a read by the host, a host
            synchronisation, a copy from the host, random numbers from cuRAND, cuBLAS through CuPy); the
            capture is abandoned and the GPU's state is as before.
        Exception: whatever else ``fn`` raises (its own error, not a refusal by the capture), unchanged,
            after the capture was abandoned in the same way.
    """
    if not device.is_gpu:
        raise GraphUnavailableError(f"CUDA graphs need a GPU; {device} is a CPU device")
    stream = _stream(device)
    if not blas.prepare(device.device_id, stream):
        raise GraphUnavailableError(f"GEMMs cannot be captured: {blas.backend()[1]}; install nvmath-python "
                                    "(pip install 'nvmath-python[cu12]' or [cu13])")
    cupy = device.xp
    with device.use():
        current = cupy.cuda.get_current_stream()
        stream.wait_event(current.record())  # the capture's inputs were written on the current stream
        pool = cupy.cuda.MemoryPool()
        try:
            with _depth(), stream, cupy.cuda.using_allocator(pool.malloc):
                stream.begin_capture()
                try:
                    result = fn()
                except BaseException as exc:
                    _abandon(stream)
                    if not _refused(exc):
                        raise  # fn's own error: the caller gets it as fn raised it
                    raise _capture_error(exc) from exc
                try:
                    graph = stream.end_capture()
                except Exception as exc:  # the capture was invalidated (a synchronisation inside it)
                    raise _capture_error(exc) from exc
        finally:
            current.wait_event(stream.record())
    return Graph(device, graph, pool, label), result


def _abandon(stream: Any) -> None:
    """End a capture that failed, discarding it (it may have been invalidated already)."""
    try:
        stream.end_capture()
    except Exception:  # invalidated, or no longer capturing: the stream is usable again either way
        pass


def _refused(exc: BaseException) -> bool:
    """Whether ``exc``, raised while ``fn`` was being captured, is the GPU stack refusing work a capture cannot record
    (CUDA, CuPy, cuBLAS, cuRAND, NCCL or the emulated GPUs: their refusals name the capture or the host transfer
    refused) rather than an error of ``fn``'s own, which must reach the caller unchanged."""
    if not isinstance(exc, Exception) or isinstance(exc, (CaptureError, GraphUnavailableError)):
        return False  # KeyboardInterrupt and the like; errors already in words
    text = str(exc)
    return type(exc).__name__ in _GPU_ERRORS or any(words in text for words in _REFUSAL_WORDS)


def _capture_error(exc: BaseException) -> CaptureError:
    """A refusal of the capture (see :func:`_refused`) as a :class:`CaptureError` naming its cause in words."""
    text = str(exc)
    if "cuBLAS" in text:
        cause = "a cuBLAS call through CuPy (cupy.matmul, dot or @ on GPU arrays; mxlite's own GEMMs go " \
                "through mxlite.device.blas)"
    elif "cuRAND" in text or "random" in text.lower():
        cause = "random numbers drawn by cuRAND (mx.random inside forward; Dropout is captured): a graph would " \
                "replay the same draw"
    elif "D2H" in text:
        cause = "a read of GPU data by the host (asnumpy, item, float(), Python control flow on values, " \
                "a metric)"
    elif "H2D" in text:
        cause = "a copy from the host to the GPU (a NumPy array or Python value turned into a GPU array)"
    elif "StreamCapture" in text or "synchroni" in text:
        cause = "a synchronisation with the host (stream or device synchronize)"
    else:
        cause = f"{type(exc).__name__}"
    return CaptureError(cause, f"{type(exc).__name__}: {text}")


def info() -> list[dict[str, Any]]:
    """The CUDA graphs held now: one dict each with ``id``, ``label``, ``device``, ``bytes`` (their memory
    pool's, in bytes) and ``launches``, oldest first."""
    graphs = sorted((g for g in list(_live) if g.alive), key=lambda g: g.id)
    return [{"id": g.id, "label": g.label, "device": str(g.device), "bytes": g.nbytes, "launches": g.launches}
            for g in graphs]


def clear() -> int:
    """Drop every CUDA graph held (their owners capture again when next called); returns how many."""
    graphs = [g for g in list(_live) if g.alive]
    for g in graphs:
        g.drop()
    return len(graphs)

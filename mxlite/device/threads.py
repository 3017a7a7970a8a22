"""How many CPU threads mxlite's work on CPU devices may use: the BLAS behind NumPy and the host-built kernels.

Purpose: one setting for the two thread pools a CPU training step runs on, PyTorch's
``set_num_threads`` / ``get_num_threads`` (MXNet has no call for it; it reads ``OMP_NUM_THREADS``):

* the BLAS that NumPy's ``matmul`` calls (OpenBLAS in NumPy's wheels; MKL or BLIS where NumPy was
  built with them), set through ``threadpoolctl``;
* the serial host build of ``kernels/*.cu`` (optimizer updates, im2col/col2im, recurrent cells), whose
  launches spread their blocks over up to this many threads (``_hostcuda/runtime_serial.cpp``), with
  the same bits whatever the count.

Default: ``OMP_NUM_THREADS`` when it holds a whole number >= 1 (what MXNet and PyTorch read), else the
cores this process may run on (``os.sched_getaffinity``: a container's or ``taskset``'s share, not
the machine's). Applied to the BLAS only by :func:`set_num_threads` (until then NumPy's BLAS keeps
the count it chose when it was loaded, which follows the same variables and affinity), and to the
host kernels when the first one is built.

Example::

    import mxlite as mx
    mx.set_num_threads(1)      # e.g. in each of several processes sharing a machine
    mx.get_num_threads()       # 1

Small products stay on one thread: the per-step GEMMs of a recurrent layer (``h @ W_h^T``, batch rows
by a few hundred columns) run with the BLAS limited to one thread (:func:`blas_threads_limited`),
since a pool that wakes for a 100 us product costs more than it saves, and on a busy machine a
static split across threads waits for the slowest (benchmarks/bench_rnn.py, bench_busy.py).

Warnings: the BLAS count is process-wide (every thread of the process shares it) and a forked child
inherits it; ``threadpoolctl`` is needed to change it (a dependency of mxlite), and a BLAS it does not
know keeps its own count.
"""

from __future__ import annotations

import contextlib
import operator
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["blas_threads_limited", "default_num_threads", "get_num_threads", "set_num_threads", "threads_status"]

THREADS_ENV = "OMP_NUM_THREADS"
_lock = threading.Lock()
_num_threads: int | None = None  # None: the default, not yet chosen
_explicit = False  # set by set_num_threads
_blas: list[Any] | None = None  # threadpoolctl's controllers of the BLAS libraries loaded (None: not yet looked up)


def default_num_threads() -> int:
    """``OMP_NUM_THREADS`` if it holds a whole number >= 1, else the number of cores this process may use."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


def get_num_threads() -> int:
    """The threads mxlite's CPU work may use (:func:`set_num_threads`, else :func:`default_num_threads`)."""
    global _num_threads
    if _num_threads is None:
        with _lock:
            if _num_threads is None:
                _num_threads = default_num_threads()
    return _num_threads


def set_num_threads(n: int) -> None:
    """Use at most ``n`` threads for CPU work: NumPy's BLAS and the host-built kernels (module docstring).

    Args:
        n: a whole number >= 1. Results do not depend on it (the kernels give the same bits for any
            ``n``; a BLAS may round a product differently with another split, as any BLAS does).

    Raises:
        ValueError: ``n`` is not an integer >= 1.
    """
    global _num_threads, _explicit
    try:
        count = operator.index(n)
    except TypeError:
        count = 0
    if isinstance(n, bool) or count < 1:
        raise ValueError(f"set_num_threads takes a whole number of threads >= 1, got {n!r}")
    with _lock:
        _num_threads, _explicit = count, True
    for controller in _blas_controllers():
        controller.set_num_threads(count)
    _apply_to_host_kernels()


def _apply_to_host_kernels() -> None:
    """Hand the count to the host build, if it is loaded (mxlite.device.kernels calls this when it loads it)."""
    launch = sys.modules.get("mxlite.device._hostcuda.launch")
    if launch is not None:
        launch.set_threads(get_num_threads())


def _blas_controllers() -> list[Any]:
    """threadpoolctl's controller of every BLAS library loaded in this process ([] without threadpoolctl)."""
    global _blas
    if _blas is None:
        try:
            import threadpoolctl  # noqa: PLC0415 - looked up once, on first use
        except ImportError:
            _blas = []
        else:
            _blas = list(threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers)
    return _blas


@contextlib.contextmanager
def blas_threads_limited(n: int = 1) -> Iterator[None]:
    """Run the block with NumPy's BLAS on at most ``n`` threads, then restore its count (about 1 us each way).

    For runs of small products (a recurrent layer's per-step GEMMs). Process-wide while it lasts: another
    Python thread's products in the meantime are limited too.
    """
    controllers = _blas_controllers()
    before = [c.get_num_threads() for c in controllers]
    for c, count in zip(controllers, before):
        if count is not None and count > n:
            c.set_num_threads(n)
    try:
        yield
    finally:
        for c, count in zip(controllers, before):
            if count is not None and count > n:
                c.set_num_threads(count)


def threads_status() -> str:
    """One line for ``mxlite info``: the thread count, where it comes from, and each BLAS's own count."""
    n = get_num_threads()
    if _explicit:
        source = "set by mx.set_num_threads"
    elif os.environ.get(THREADS_ENV, "").strip().isdigit():
        source = f"from {THREADS_ENV}"
    else:
        source = "the cores this process may use"
    blas = "; ".join(f"{c.internal_api} {c.version or ''} with {c.get_num_threads()} threads"
                     for c in _blas_controllers()) or "none found by threadpoolctl"
    return f"{n} ({source}); BLAS: {blas}; host kernels: up to {n}"

"""How many CPU threads mxlite's work on CPU devices may use: the BLAS behind NumPy and the host-built kernels.

Purpose: one setting for the two thread pools a CPU training step runs on, PyTorch's
``set_num_threads`` / ``get_num_threads`` (MXNet has no call for it; it reads ``OMP_NUM_THREADS``):

* the BLAS that NumPy's ``matmul`` calls (OpenBLAS in NumPy's wheels; MKL or BLIS where NumPy was
  built with them), set through ``threadpoolctl``, for the user's own NumPy calls: mxlite's own
  products run the BLAS on one thread and spread their pieces over mxlite's threads instead
  (:mod:`mxlite.device.parallel`, ``blas.matmul``);
* the serial host build of ``kernels/*.cu`` (optimizer updates, im2col/col2im, recurrent cells), whose
  launches spread their blocks over up to this many threads (``_hostcuda/runtime_serial.cpp``), with
  the same bits whatever the count;
* the threads that run the pieces of mxlite's products and convolutions (:func:`usable_threads` of them).

Default: ``OMP_NUM_THREADS`` when it holds a whole number >= 1 (what MXNet and PyTorch read), else the
cores this process may run on (``os.sched_getaffinity``: a container's or ``taskset``'s share, not
the machine's). Applied to the host kernels when the first one is built, and to the BLAS by
:func:`set_num_threads` or, for the default, by :func:`adapt_to_load` (below); until then NumPy's BLAS
keeps the count it chose when it was loaded, which follows the same variables and affinity.

Example::

    import mxlite as mx
    mx.set_num_threads(1)      # e.g. in each of several processes sharing a machine
    mx.get_num_threads()       # 1

A busy machine: while the count is the default (no :func:`set_num_threads` call), the BLAS uses only
the cores other processes leave: at most every ``ADAPT_INTERVAL_S``, at a host-kernel launch (the
optimizer update of every step, convolutions, recurrent cells), :func:`adapt_to_load` reads how much
CPU the whole machine used since the last look (``/proc/stat``) less what this process used
(``os.times``), and gives the BLAS the cores left (rounded, at least 1, at most the default), for the
user's own NumPy calls; mxlite's own pieces keep the full count (:func:`usable_threads` says why). OpenBLAS
splits each product statically over its threads and waits for the slowest, so a thread on a core that
another process holds stalls every product: on the 2-core VM at a load average of 5 from other
processes a small CNN's step took 1.2 s with two BLAS threads and 0.14 s with one. The host kernels
need no such care: their pool takes blocks dynamically, and a thread that does not get a core holds
nothing up. libgomp's ``OMP_DYNAMIC`` does the same from the load average, which counts this process's
own threads and reacts over a minute.

Small products stay on one thread: the per-step GEMMs of a recurrent layer (``h @ W_h^T``, batch rows
by a few hundred columns) are never cut into pieces and run with the BLAS limited to one thread
(:func:`blas_threads_limited`), since a pool that wakes for a 100 us product costs more than it saves,
and on a busy machine a static split across threads waits for the slowest (benchmarks/bench_rnn.py,
bench_busy.py).

Warnings: the BLAS count is process-wide (every thread of the process shares it) and a forked child
inherits it; ``threadpoolctl`` is needed to change it (a dependency of mxlite), and a BLAS it does not
know keeps its own count. A BLAS may round a product differently on another number of its own threads
(OpenBLAS 0.3.31 does for a 1000 x 1000 x 1000 SGEMM), and may round a piece of a product differently from
the whole (OpenBLAS's Haswell kernels, which it also runs on AMD's Zen, do for rows or columns cut at any
multiple of 16); mxlite's products do not depend on either: a large product is cut into as many pieces as
the process has cores (:func:`cores`, fixed for the process), whatever the thread count, and each piece runs
on one BLAS thread, the pieces side by side or one after another (``blas._host_matmul``). So a product, and
everything built on it, gives the same bits for any thread count, any load and inside or outside
:mod:`mxlite.device.parallel`'s pieces; a process limited to another number of cores (``taskset``, a
container's CPU set) may cut it differently. The host kernels give the same bits for any count.
"""

from __future__ import annotations

import contextlib
import operator
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["adapt_to_load", "blas_count", "blas_threads_limited", "cores", "default_num_threads", "get_num_threads",
           "set_num_threads", "threads_status", "usable_threads"]

# How often (s) the BLAS count follows the machine's load (adapt_to_load): long enough that /proc/stat's
# 10 ms ticks give a usable average (25 ticks per core), short enough to follow a neighbour that starts
# or stops within a second; each look costs about 20 us.
ADAPT_INTERVAL_S = 0.25

THREADS_ENV = "OMP_NUM_THREADS"
_lock = threading.Lock()
_num_threads: int | None = None  # None: the default, not yet chosen
_explicit = False  # set by set_num_threads
_blas: list[Any] | None = None  # threadpoolctl's controllers of the BLAS libraries loaded (None: not yet looked up)
_blas_count: int | None = None  # the count mxlite last gave every BLAS (None: not known)


def default_num_threads() -> int:
    """``OMP_NUM_THREADS`` if it holds a whole number >= 1, else the number of cores this process may use."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    return _usable_cores()


def _usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


_cores: list[int] = []


def cores() -> int:
    """The cores this process could run on when it first asked (``os.sched_getaffinity``), fixed for the process.

    What a large product is cut by (``blas._host_matmul``): a number that no thread setting, load or nesting
    changes, so that the product's bits do not depend on them.
    """
    if not _cores:
        with _lock:
            if not _cores:
                _cores.append(_usable_cores())
    return _cores[0]


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
    _set_blas(count)
    _apply_to_host_kernels()


class _Load:
    """What adapt_to_load saw last: the time, the machine's busy CPU seconds and this process's, the count set."""

    def __init__(self) -> None:
        self.next_look = 0.0
        self.seen: tuple[float, float, float] | None = None  # (wall, machine busy s, own CPU s)
        self.blas: int | None = None  # the BLAS count adapt_to_load set last
        self.limited = 0  # blas_threads_limited blocks open: no adapting inside them
        self.ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


_load = _Load()


def _machine_busy_seconds() -> float | None:
    """CPU seconds the whole machine has been busy since boot (``/proc/stat``; steal counts as busy)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != b"cpu" or len(fields) < 5:
        return None
    values = [int(v) for v in fields[1:9]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    return (sum(values) - idle) / _load.ticks


def adapt_to_load(now: float | None = None) -> int | None:
    """Give NumPy's BLAS the cores other processes leave (module docstring); the count set, or None.

    Does nothing (returns None) when :func:`set_num_threads` chose the count, inside
    :func:`blas_threads_limited`, more often than every ``ADAPT_INTERVAL_S``, when the process may not
    run on every core of the machine (``/proc/stat`` counts them all), or without ``/proc/stat``.
    """
    now = time.monotonic() if now is None else now
    if now < _load.next_look or _explicit or _load.limited:
        return None
    _load.next_look = now + ADAPT_INTERVAL_S
    cores = os.cpu_count() or 1
    allowed = get_num_threads()
    if allowed <= 1 or default_num_threads() != cores:
        return None
    busy = _machine_busy_seconds()
    if busy is None:
        return None
    times = os.times()
    seen, _load.seen = _load.seen, (now, busy, times.user + times.system)
    if seen is None or now - seen[0] < ADAPT_INTERVAL_S / 2:
        return None
    others = ((busy - seen[1]) - (_load.seen[2] - seen[2])) / (now - seen[0])  # cores other processes used
    count = max(1, min(allowed, int(cores - others + 0.5)))
    if count != _load.blas:
        _set_blas(count)
        _load.blas = count
    return count


def usable_threads() -> int:
    """The threads mxlite's own CPU work spreads over: :func:`get_num_threads`, whatever the machine's load.

    Unlike the BLAS's count (:func:`adapt_to_load`), this one does not shrink on a busy machine: mxlite's
    threads take pieces as they come free and sleep when idle, so a thread without a core holds nothing up,
    and fewer threads only give the process a smaller share of the cores. Measured beside one busy process
    per core (benchmarks/bench_busy.py, 2-core VM): the LSTM word LM's step 129-141 ms with the pieces
    following the load, 99-112 ms without; the small CNN's 52 against 41-46 ms.
    """
    return get_num_threads()


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


def _set_blas(count: int) -> None:
    """Give every BLAS ``count`` threads, and remember it."""
    global _blas_count
    for controller in _blas_controllers():
        controller.set_num_threads(count)
    _blas_count = count


@contextlib.contextmanager
def blas_threads_limited(n: int = 1) -> Iterator[None]:
    """Run the block with NumPy's BLAS on at most ``n`` threads, then restore its count (about 1 us each way).

    For runs of small products (a recurrent layer's per-step GEMMs). Process-wide while it lasts: another
    Python thread's products in the meantime are limited too.
    """
    global _blas_count
    controllers = _blas_controllers()
    before = [c.get_num_threads() for c in controllers]
    known = _blas_count
    for c, count in zip(controllers, before):
        if count is not None and count > n:
            c.set_num_threads(n)
    _blas_count = min(n, max((count for count in before if count is not None), default=n))
    _load.limited += 1
    try:
        yield
    finally:
        _load.limited -= 1
        for c, count in zip(controllers, before):
            if count is not None and count > n:
                c.set_num_threads(count)
        _blas_count = known


def blas_count() -> int:
    """The threads a BLAS that splits a product statically over its own threads should use now: the count
    mxlite last gave NumPy's BLAS (following the machine's load while the count is the default, one inside
    :func:`blas_threads_limited`), else :func:`get_num_threads`. MKL's products take this many
    (:mod:`mxlite.device.mkl`)."""
    return _blas_count if _blas_count is not None else get_num_threads()


def blas_on_one_thread() -> bool:
    """Whether mxlite knows every BLAS is on one thread now (inside :func:`blas_threads_limited`, or after
    ``set_num_threads(1)``): a small product then needs no call into threadpoolctl."""
    return _blas_count == 1


def threads_status() -> str:
    """One line for ``mxlite info``: the thread count, where it comes from, and each BLAS's own count."""
    n = get_num_threads()
    adaptive = "" if _explicit else ", BLAS following the cores other processes leave"
    if _explicit:
        source = "set by mx.set_num_threads"
    elif os.environ.get(THREADS_ENV, "").strip().isdigit():
        source = f"from {THREADS_ENV}"
    else:
        source = "the cores this process may use"
    blas = "; ".join(f"{c.internal_api} {c.version or ''} with {c.get_num_threads()} threads"
                     for c in _blas_controllers()) or "none found by threadpoolctl"
    return f"{n} ({source}{adaptive}); BLAS: {blas}; host kernels: up to {n}"

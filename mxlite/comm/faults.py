"""A rank that fails ends the whole MPI job, instead of leaving the others waiting forever.

Purpose: when one rank of ``mpiexec -n N`` dies while the others wait for it in a collective
(an all-reduce of gradients, a barrier), the job must stop at once with a non-zero status and
say which rank failed; a hung job holds its machines until a wall-clock limit kills it.

What the mpich wheel's Hydra ``mpiexec`` (5.0, ``mxlite launch``) does by default, measured with
rank 1 failing while rank 0 waits in ``MPI_Allreduce``:

* rank 1 raises an uncaught exception, or calls ``sys.exit(2)``: Python prints the traceback and
  exits; mpi4py's exit handler calls ``MPI_Finalize``, which waits for rank 0, which waits in
  the all-reduce for rank 1: **the job hangs** (until killed from outside);
* rank 1 leaves without ``MPI_Finalize`` (``os._exit(3)``, a signal, the OOM killer): Hydra
  kills the other ranks and ``mpiexec`` exits with that status (3; 15 for SIGTERM, 9 for
  SIGKILL) within a second. Nothing to add.

:func:`install` closes the first case (:class:`~mxlite.comm.MpiCommunicator` calls it):

* an uncaught exception: ``sys.excepthook`` writes ``mxlite rank R of N failed:`` and the
  traceback to stderr, flushes stdout and stderr, and calls ``COMM_WORLD.Abort(1)``; Hydra then
  kills the other ranks and ``mpiexec`` exits with status 1. The stack has already unwound when
  the hook runs, so ``finally`` blocks and ``with`` exits have run; exit handlers (``atexit``) do
  not run.
* ``sys.exit(status)`` with a non-zero status, from the main thread: the exit proceeds as usual
  (unwinding, non-daemon threads joined), then an exit handler writes
  ``mxlite rank R of N exited with status S`` and calls ``COMM_WORLD.Abort(S)``.

Warnings:

* ``raise SystemExit(2)`` and the ``exit()``/``quit()`` builtins do not go through ``sys.exit``,
  and Python offers no hook that sees the status of a ``SystemExit``: they still hang the job as
  above. Use ``sys.exit``, or run the script as ``python -m mpi4py script.py``, whose runner
  aborts on every unhandled ``SystemExit``.
* A ``sys.exit(non-zero)`` that the program catches (``except SystemExit``) and survives is still
  remembered: the job then ends with that status when the rank exits (unless a later
  ``sys.exit(0)`` replaces it).
* With one process (``COMM_WORLD`` of size 1) nothing changes: Python's own hook runs and exit
  statuses are Python's.
* No SIGTERM handler is installed, on purpose: the default action already ends the job (above),
  while a Python handler runs only between bytecodes, so a rank blocked inside an MPI call would
  never run it and would ignore SIGTERM.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import traceback
import weakref
from types import TracebackType
from typing import Any

from ..device import env
from ..device.topology import mpi_module

__all__ = ["install", "is_installed", "failure_message", "collective_timeout", "wait", "watch", "attach",
           "watch_communicator", "TIMEOUT_ENV"]

TIMEOUT_ENV = "MXLITE_COLLECTIVE_TIMEOUT"
TIMEOUT_STATUS = 124  # as coreutils' timeout

_installed = False
_previous_hook: Any = None
_original_exit: Any = None
_exit_status = 0  # the status of the last sys.exit call on the main thread
_aborting = False  # set by the NCCL watchdog when it ends the job: the main thread's errors are then its doing


def collective_timeout() -> float | None:
    """Seconds a collective may wait for the other ranks (``MXLITE_COLLECTIVE_TIMEOUT``), or None (no limit:
    unset, empty or ``inf``).

    Raises:
        ValueError: the variable is set to something other than a positive number.
    """
    return env.seconds(TIMEOUT_ENV)


def wait(request: Any, rank: int, size: int, what: str, timeout: float | None) -> None:
    """Wait for a non-blocking MPI request; past ``MXLITE_COLLECTIVE_TIMEOUT``, end the job (status 124).

    With ``timeout`` None this is ``request.Wait()``. Otherwise the request is polled (spinning
    first, then sleeping 0.5 ms between polls) and, when the time is up, this rank writes
    ``mxlite rank R of N: WHAT did not complete within T s`` and aborts the job: a rank that
    hangs (alive, but never reaching the collective) then ends the job instead of holding it.
    The ranks that report are the ones that waited; the hung rank is the one that does not.
    """
    if timeout is None:
        request.Wait()
        return
    deadline = time.monotonic() + timeout
    polls = 0
    while not request.Test():
        polls += 1
        if polls > 2000:
            time.sleep(0.0005)
        if time.monotonic() > deadline:
            _abort(_world(), f"mxlite rank {rank} of {size}: {what} did not complete within {timeout:g} s "
                             f"({TIMEOUT_ENV}); a rank that has not reported this has stopped or hangs\n",
                   TIMEOUT_STATUS)


# -- the NCCL watchdog ---------------------------------------------------------------------------------
#
# NCCL collectives are queued on a stream and return at once; the host blocks later, in some
# synchronisation with no deadline (or, in the emulation and in NCCL's own set-up, inside the call).
# As PyTorch's ProcessGroupNCCL watchdog does with blocking communicators, a daemon thread watches
# every collective: each is registered *before* it is issued (so a call that blocks is covered),
# then given the completion events recorded after it; the thread polls those events (cudaEventQuery,
# no host synchronisation) and, every second, each communicator's asynchronous error. A collective
# past its deadline, or an asynchronous error, aborts every registered communicator (which frees a
# GPU spinning in an NCCL kernel and a host thread blocked in a synchronisation) and ends the job:
# status 124 for a timeout (as on the MPI path), 1 for an NCCL error. Nothing runs while
# MXLITE_COLLECTIVE_TIMEOUT is unset.

_ASYNC_CHECK_PERIOD = 1.0  # seconds between check_async_error() polls of the registered communicators
_POLL_PERIOD_MAX = 0.1  # seconds between polls of the watched events (at most; timeout / 10 when shorter)


class _Watched:
    __slots__ = ("what", "rank", "size", "timeout", "deadline", "events")

    def __init__(self, what: str, rank: int, size: int, timeout: float, deadline: float) -> None:
        self.what, self.rank, self.size, self.timeout, self.deadline = what, rank, size, timeout, deadline
        self.events: list[Any] | None = None  # None: the call has not returned yet


class _Watchdog:
    """The process-wide watchdog thread (started by the first :func:`watch`)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: list[_Watched] = []
        self.communicators: list[Any] = []
        self.period = _POLL_PERIOD_MAX
        self.thread: threading.Thread | None = None

    def start(self, timeout: float) -> None:
        self.period = min(self.period, timeout / 10)
        if self.thread is None:
            self.thread = threading.Thread(target=self.run, name="mxlite-nccl-watchdog", daemon=True)
            self.thread.start()

    def run(self) -> None:
        next_check = time.monotonic() + _ASYNC_CHECK_PERIOD
        while True:
            time.sleep(self.period)
            now = time.monotonic()
            with self.lock:
                entries = list(self.entries)
            done = {id(e) for e in entries if e.events is not None and _all_done(e.events)}
            if done:
                with self.lock:
                    self.entries = [e for e in self.entries if id(e) not in done]
            late = next((e for e in entries if id(e) not in done and now > e.deadline), None)
            if late is not None:
                self.fire(f"mxlite rank {late.rank} of {late.size}: {late.what} did not complete within "
                          f"{late.timeout:g} s ({TIMEOUT_ENV}); a rank that has not reported this has stopped or "
                          "hangs\n", TIMEOUT_STATUS)
                return
            if now >= next_check:
                next_check = now + _ASYNC_CHECK_PERIOD
                error = self.async_error()
                if error is not None:
                    self.fire(error, 1)
                    return

    def async_error(self) -> str | None:
        for owner in self.owners():
            for handle in owner.handles:
                try:
                    handle.check_async_error()
                except Exception as exc:  # noqa: BLE001 - NcclError: the communicator failed
                    return f"mxlite rank {owner.rank} of {owner.size}: NCCL reported an asynchronous error: {exc}\n"
        return None

    def owners(self) -> list[Any]:
        """The live communicators registered by :func:`watch_communicator` (dropping the collected ones)."""
        with self.lock:
            alive = [(ref, ref()) for ref in self.communicators]
            self.communicators = [ref for ref, owner in alive if owner is not None]
        return [owner for _, owner in alive if owner is not None]

    def fire(self, text: str, status: int) -> None:
        """End the job: abort every communicator (unblocking this process), write ``text``, exit with ``status``."""
        global _aborting
        _aborting = True
        for owner in self.owners():
            for handle in owner.handles:
                try:
                    handle.abort()
                except Exception:  # noqa: BLE001 - aborting a failed communicator may fail too; go on
                    pass
        world = _world()
        mpi = sys.modules.get("mpi4py.MPI")
        if world is not None and mpi is not None and mpi.Query_thread() >= mpi.THREAD_MULTIPLE:
            _abort(world, text, status)
        # MPI_Abort is not allowed from this thread (or there is no MPI job): leave without finalizing,
        # which makes the launcher end the other ranks with this status.
        _abort(None, text, status)
        os._exit(status)


def _all_done(events: list[Any]) -> bool:
    try:
        return all(event.done for event in events)
    except Exception:  # noqa: BLE001 - an event that cannot be queried (a failed device): the deadline decides
        return False


_watchdog = _Watchdog()


def watch(what: str, rank: int, size: int, timeout: float | None) -> _Watched | None:
    """Register a collective about to be issued; past ``timeout`` seconds the job ends (status 124).

    Returns a token for :func:`attach`, or None when ``timeout`` is None (nothing is watched). Call it
    before issuing the collective, so a call that blocks (NCCL's set-up, the emulation) is covered.
    """
    if timeout is None:
        return None
    entry = _Watched(what, rank, size, timeout, time.monotonic() + timeout)
    with _watchdog.lock:
        _watchdog.entries.append(entry)
    _watchdog.start(timeout)
    return entry


def attach(token: _Watched | None, events: list[Any]) -> None:
    """The collective of ``token`` was issued: it is complete when every event of ``events`` is (none: now)."""
    if token is None:
        return
    if not events:
        with _watchdog.lock:
            if token in _watchdog.entries:
                _watchdog.entries.remove(token)
        return
    token.events = list(events)


def watch_communicator(owner: Any) -> None:
    """Poll the asynchronous errors of ``owner.handles`` (CuPy NCCL communicators) and abort them when the
    watchdog fires. ``owner`` (with ``rank``, ``size`` and ``handles``) is held by a weak reference."""
    with _watchdog.lock:
        _watchdog.communicators.append(weakref.ref(owner))


def failure_message(rank: int, size: int, exc_type: type[BaseException], exc: BaseException,
                    tb: TracebackType | None) -> str:
    """The text the exception hook writes: ``mxlite rank R of N failed:`` then the traceback.

    One string (written with one ``write``), so the lines of two failing ranks do not interleave.
    """
    body = "".join(traceback.format_exception(exc_type, exc, tb))
    return f"mxlite rank {rank} of {size} failed:\n{body}"


def install() -> None:
    """Make an uncaught exception or a non-zero ``sys.exit`` on any rank end the whole MPI job.

    Installs (once per process) the exception hook, the ``sys.exit`` wrapper and the exit
    handler described in the module docstring. Calling it again does nothing.

    Raises:
        RuntimeError: mpi4py is not installed.
    """
    global _installed, _previous_hook, _original_exit
    if _installed:
        return
    mpi_module()  # RuntimeError (how to install mpi4py) when it is missing
    _previous_hook, _original_exit = sys.excepthook, sys.exit
    sys.excepthook = _excepthook
    sys.exit = _exit
    atexit.register(_abort_after_exit)  # mpi4py calls MPI_Finalize after every atexit handler has run
    _installed = True


def is_installed() -> bool:
    """Whether :func:`install` has run in this process."""
    return _installed


def _world() -> Any:
    """COMM_WORLD when MPI is running with more than one process, else None."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized():
        return None
    world = mpi.COMM_WORLD
    return world if world.Get_size() > 1 else None


def _abort(world: Any, text: str, status: int) -> None:
    """Flush, write ``text`` to stderr and ``world.Abort(status)`` (``world`` None: only write)."""
    for stream in (sys.stdout, sys.stderr):  # Abort kills the process: nothing buffered survives it
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not stop the abort
            pass
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except Exception:  # noqa: BLE001
        pass
    # The launcher forwards each rank's output through a pipe; Abort makes it tear the job down,
    # and without a pause it sometimes does so before reading the message just written.
    if world is None:
        return
    time.sleep(0.2)
    world.Abort(status)


def _excepthook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
    if _aborting:  # the watchdog is ending the job; this error is what its abort() caused
        while True:
            time.sleep(1)
    world = _world()
    if world is None:
        _previous_hook(exc_type, exc, tb)
        return
    _abort(world, failure_message(world.Get_rank(), world.Get_size(), exc_type, exc, tb), 1)


def _status_of(code: Any) -> int:
    """The process exit status Python gives ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1  # a message: Python prints it and exits with 1


def _exit(status: Any = None) -> None:
    global _exit_status
    if threading.current_thread() is threading.main_thread():
        _exit_status = _status_of(status)  # the last call wins: a sys.exit(0) after a caught one clears it
    _original_exit(status)


def _abort_after_exit() -> None:
    world = _world()
    if _exit_status == 0 or world is None:
        return
    _abort(world, f"mxlite rank {world.Get_rank()} of {world.Get_size()} exited with status {_exit_status}; "
                  "ending the job so that the other ranks do not wait for it\n", _exit_status)

"""The DataLoader's worker pools: processes or threads that read and batchify whole batches.

Both pools have one shape: the loader ``submit``s a batch (its indices and its number in the
epoch) and gets a ticket; ``result(ticket, timeout)`` waits for that batch; ``abandon`` forgets
tickets whose batches the loop no longer wants (a ``break``); ``close`` ends the workers.

Each worker holds at most one task. Tasks wait in this process until a worker is idle, so an
abandoned task that has not started is simply dropped, and a worker stuck in a read never holds
more than the one batch it is reading. Nothing here is joined at interpreter exit:

* processes are daemonic ``multiprocessing`` processes, one pipe each, with no feeder threads;
  multiprocessing terminates daemonic children when the interpreter exits, so a worker stuck in a
  read cannot hold the program. A worker that dies is seen through its sentinel and reported as a
  RuntimeError naming its pid, the batch and how it ended (exit status or signal);
* threads are daemon threads, which the interpreter does not wait for.

Worker processes limit the BLAS/OpenMP thread pools of their libraries to one thread each (as
PyTorch's DataLoader does): ``num_workers`` processes each starting one BLAS thread per core would
oversubscribe the machine. The limit is set twice, because neither way alone covers both start
methods: the usual environment variables are set in the parent around ``Process.start()`` (a
spawned child imports NumPy from scratch and reads them; a forked child inherits them for the
libraries it loads later), and in the child :mod:`threadpoolctl` limits the libraries already
loaded (a forked child shares the parent's initialised OpenBLAS, which no longer reads its
environment).
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from multiprocessing import connection
from typing import Any

# The variables that bound the thread pools of OpenMP, OpenBLAS, MKL, Accelerate and numexpr.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
                    "NUMEXPR_NUM_THREADS")
# close(): how long idle workers get to leave on their own, then busy ones to end after SIGTERM (seconds).
_CLOSE_GRACE = 1.0
# A worker process waiting for a task checks this often that its parent still exists (seconds).
_PARENT_CHECK = 1.0


class _RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker, attached as the re-raised exception's cause."""

    def __str__(self) -> str:
        return self.args[0]


def _exception_facts(exc: BaseException) -> tuple[str, str, str]:
    """What always travels back for an exception raised in a worker: its type name, message and traceback."""
    return type(exc).__name__, str(exc), "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _raise_from_worker(facts: tuple[str, str, str], exc: Any) -> None:
    """Re-raise an exception of a worker process here, its traceback as the cause (a RuntimeError when
    the exception itself could not travel)."""
    name, message, text = facts
    if not isinstance(exc, BaseException):
        exc = RuntimeError(f"DataLoader: a worker raised {name}: {message}")
    raise exc from _RemoteTraceback(f'\n"""\n{text}"""')


def _batch_text(number: int | None) -> str:
    return f"batch {number}" if number is not None else "no batch (it was idle)"


class _Pool:
    """What both pools share: tickets, the tasks waiting for an idle worker, the finished results."""

    def __init__(self, size: int) -> None:
        self._busy: list[int | None] = [None] * size  # the ticket each worker holds
        self._waiting: collections.deque[tuple[int, list[Any]]] = collections.deque()
        self._numbers: dict[int, int] = {}  # ticket -> batch number, for messages
        self._done: dict[int, tuple[bool, Any]] = {}
        self._abandoned: set[int] = set()
        self._next_ticket = 0
        self.closed = False

    def submit(self, indices: list[Any], number: int) -> int:
        """Queue one batch; returns its ticket."""
        ticket = self._next_ticket
        self._next_ticket += 1
        self._numbers[ticket] = number
        self._waiting.append((ticket, indices))
        self._dispatch()
        return ticket

    def abandon(self, tickets: list[int]) -> None:
        """Forget these batches: drop those not started, discard the others' results when they come."""
        dropped = set(tickets)
        self._waiting = collections.deque(t for t in self._waiting if t[0] not in dropped)
        for ticket in dropped:
            self._done.pop(ticket, None)
            self._numbers.pop(ticket, None)
            if ticket in self._busy:
                self._abandoned.add(ticket)

    def _dispatch(self) -> None:
        for worker, ticket in enumerate(self._busy):
            if not self._waiting:
                return
            if ticket is None:
                task = self._waiting.popleft()
                self._busy[worker] = task[0]
                self._send(worker, task)

    def _finished(self, worker: int, ticket: int, ok: bool, payload: Any) -> None:
        self._busy[worker] = None
        if ticket in self._abandoned:
            self._abandoned.discard(ticket)
        else:
            self._done[ticket] = (ok, payload)
        self._dispatch()

    def result(self, ticket: int, timeout: float | None) -> Any:
        """The batch of ``ticket``, waiting at most ``timeout`` seconds (None: no limit).

        Raises:
            TimeoutError: not ready in time.
            RuntimeError: a worker process died; the pool is closed then.
            Exception: what the dataset or batchify_fn raised in the worker.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while ticket not in self._done:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError
            self._collect(left)
        ok, payload = self._done.pop(ticket)
        self._numbers.pop(ticket, None)
        if not ok:
            self._reraise(payload)
        return payload

    # the pool kind's own part
    def _send(self, worker: int, task: tuple[int, list[Any]]) -> None:
        raise NotImplementedError

    def _collect(self, timeout: float | None) -> None:
        raise NotImplementedError

    def _reraise(self, payload: Any) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


# -- threads --------------------------------------------------------------------------------------

class ThreadPool(_Pool):
    """``size`` daemon threads running ``load(indices)``; results are the batches themselves."""

    def __init__(self, size: int, load: Callable[[list[Any]], Any]) -> None:
        super().__init__(size)
        self._results: queue.SimpleQueue[tuple[int, int, bool, Any]] = queue.SimpleQueue()
        self._inboxes: list[queue.SimpleQueue[tuple[int, list[Any]] | None]] = []
        for worker in range(size):
            inbox: queue.SimpleQueue[tuple[int, list[Any]] | None] = queue.SimpleQueue()
            thread = threading.Thread(target=_thread_main, args=(worker, inbox, self._results, load), daemon=True,
                                      name=f"mxlite-dataloader-{worker}")
            thread.start()
            self._inboxes.append(inbox)

    def _send(self, worker: int, task: tuple[int, list[Any]]) -> None:
        self._inboxes[worker].put(task)

    def _collect(self, timeout: float | None) -> None:
        try:
            worker, ticket, ok, payload = self._results.get(timeout=timeout)
        except queue.Empty:
            return
        self._finished(worker, ticket, ok, payload)

    def _reraise(self, payload: Any) -> None:
        raise payload

    def close(self) -> None:
        """Ask every thread to stop after its current batch; a thread stuck in a read is left (a daemon)."""
        if self.closed:
            return
        self.closed = True
        self._waiting.clear()
        for inbox in self._inboxes:
            inbox.put(None)


def _thread_main(worker: int, inbox: queue.SimpleQueue, results: queue.SimpleQueue,
                 load: Callable[[list[Any]], Any]) -> None:
    while True:
        task = inbox.get()
        if task is None:
            return
        ticket, indices = task
        try:
            outcome: tuple[bool, Any] = (True, load(indices))
        except BaseException as exc:  # noqa: BLE001 - handed to the loop, which re-raises it
            outcome = (False, exc)
        results.put((worker, ticket, *outcome))
        del task, outcome


# -- processes ------------------------------------------------------------------------------------

class ProcessPool(_Pool):
    """``size`` daemonic worker processes, one pipe each; see the module docstring."""

    def __init__(self, size: int, context: Any, dataset: Any, batchify_fn: Callable[[list[Any]], Any],
                 base_seed: int, init: Callable[[Any, Callable, int, int], None],
                 load: Callable[[list[Any]], Any]) -> None:
        super().__init__(size)
        self._processes: list[Any] = []
        self._conns: list[Any] = []
        saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
        try:
            os.environ.update({name: "1" for name in THREAD_VARIABLES})
            for worker in range(size):
                ours, theirs = context.Pipe()
                seed = (base_seed + 7919 * (worker + 1)) % 2**31
                process = context.Process(target=_process_main, name=f"mxlite-dataloader-{worker}", daemon=True,
                                          args=(theirs, os.getpid(), init, load, (dataset, batchify_fn, seed, worker)))
                self._processes.append(process)
                self._conns.append(ours)
                process.start()
                theirs.close()
        except BaseException:
            self.close()
            raise
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids."""
        return [p.pid for p in self._processes]

    def _send(self, worker: int, task: tuple[int, list[Any]]) -> None:
        try:
            self._conns[worker].send(task)
        except OSError:  # the worker is gone; its sentinel says how, in _collect
            pass

    def _collect(self, timeout: float | None) -> None:
        watched = {}
        for worker, process in enumerate(self._processes):
            watched[process.sentinel] = worker
            if self._busy[worker] is not None:
                watched[self._conns[worker]] = worker
        ready = connection.wait(list(watched), timeout)
        dead = set()
        for item in ready:
            worker = watched[item]
            ticket = self._busy[worker]
            if ticket is not None and (item is self._conns[worker] or self._conns[worker].poll(0)):
                # a result (even from a worker that sent its batch and then died), or the end of the pipe
                try:
                    ok, payload = self._conns[worker].recv()
                except (EOFError, OSError):
                    dead.add(worker)
                    continue
                except Exception as exc:  # noqa: BLE001 - the answer does not unpickle here
                    ok, payload = False, (_exception_facts(exc), None)
                self._finished(worker, ticket, ok, payload)
            else:
                dead.add(worker)
        for worker in sorted(dead):
            self._died(worker)

    def _died(self, worker: int) -> None:
        process = self._processes[worker]
        process.join(0.5)
        ticket = self._busy[worker]
        number = self._numbers.get(ticket) if ticket is not None else None
        code = process.exitcode
        if code is None:
            how = "closed its pipe"
        elif code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (the out-of-memory killer?)" if -code == signal.SIGKILL else ""
            how = f"was killed by {name}{hint}"
        else:
            how = f"exited with status {code} (os._exit or a crash)"
        self.close()
        raise RuntimeError(
            f"DataLoader: a worker process died while loading {_batch_text(number)}: worker pid {process.pid} "
            f"{how}; the pool was shut down. Check the dataset and batchify_fn, or run with num_workers=0 to see "
            "the error in this process")

    def _reraise(self, payload: Any) -> None:
        _raise_from_worker(*payload)

    def close(self) -> None:
        """End the workers: idle ones are asked to leave, busy ones terminated, stragglers killed."""
        if self.closed:
            return
        self.closed = True
        self._waiting.clear()
        for worker, process in enumerate(self._processes):
            if process.pid is None or not process.is_alive():
                continue
            if self._busy[worker] is None:
                try:
                    self._conns[worker].send(None)
                except OSError:
                    process.terminate()
            else:
                process.terminate()
        deadline = time.monotonic() + _CLOSE_GRACE
        for process in self._processes:
            if process.pid is not None:
                process.join(max(deadline - time.monotonic(), 0))
                if process.is_alive():
                    process.kill()
                    process.join(_CLOSE_GRACE)
        for conn in self._conns:
            conn.close()


def _limit_threads() -> None:
    """One BLAS/OpenMP thread in this worker process (see the module docstring)."""
    os.environ.update({name: "1" for name in THREAD_VARIABLES})  # for libraries loaded from now on
    try:
        import threadpoolctl  # noqa: PLC0415 - optional: limits the libraries already loaded
    except ImportError:
        return
    threadpoolctl.threadpool_limits(1)


def _process_main(conn: Any, parent: int, init: Callable[[Any, Callable, int, int], None],
                  load: Callable[[list[Any]], Any], setup: tuple[Any, Callable, int, int]) -> None:
    """A worker process: wait for ``(ticket, indices)``, answer ``(True, batch)`` or ``(False, (facts, exception))``.

    One task at a time, so the parent knows which batch an answer belongs to."""
    _limit_threads()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes the pool
    init(*setup)
    while True:
        try:
            while not conn.poll(_PARENT_CHECK):
                if os.getppid() != parent:  # the parent died without closing the pool
                    return
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        _, indices = task
        try:
            batch = load(indices)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:  # noqa: BLE001 - travels to the loop, which re-raises it
            if not _send_error(conn, exc):
                return
            continue
        try:
            conn.send((True, batch))  # pickled whole before anything is written
        except OSError:
            return
        except Exception as exc:  # noqa: BLE001 - a batch that does not pickle
            unsent = TypeError(f"DataLoader: a worker process cannot send its batch ({exc}); batchify_fn must return "
                               "picklable values (arrays, Tensors, tuples), or use thread_pool=True")
            if not _send_error(conn, unsent):
                return
        del task, batch


def _send_error(conn: Any, exc: BaseException) -> bool:
    """Send ``exc`` to the parent (its facts alone when it does not pickle); False when the pipe is gone."""
    facts = _exception_facts(exc)
    try:
        conn.send((False, (facts, exc)))
    except OSError:
        return False
    except Exception:  # noqa: BLE001 - the exception does not pickle: its facts travel
        try:
            conn.send((False, (facts, None)))
        except OSError:
            return False
    return True

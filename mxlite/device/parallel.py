"""Pieces of one CPU operation side by side on host threads: :func:`parallel_for`.

Purpose: a convolution over a batch on CPU devices is a few GEMMs and data-movement kernels per piece
of the batch, each piece independent of the others. Run one piece per thread at a time, each GEMM
on one BLAS thread and each kernel launch on its calling thread, and every core works on a piece of
its own, with its data in its own cache. Splitting each call instead (OpenBLAS's threads inside one
GEMM, the host-kernel pool inside one launch) scales worse: OpenBLAS splits a GEMM of one sample's
size poorly (about 1.4x on two threads for the CNN of ``benchmarks/bench_train.py``), and a launch
of a few hundred microseconds barely pays for waking a pool thread.

How: :func:`parallel_for` runs ``body(i)`` for every piece ``i``, on the calling thread and up to
``get_num_threads() - 1`` worker threads that sleep between calls. Each thread claims the next
unclaimed piece until none is left (a thread the system does not schedule holds nothing up: the
others take its pieces), and the call returns once every piece has run. NumPy's BLAS and the host
kernels release the GIL, so the pieces' heavy work overlaps; their Python glue does not.

Results do not depend on the number of threads as long as each piece writes only its own outputs
and anything summed over pieces is summed afterwards, in piece order, by the caller.

:func:`run_graph` runs tasks that wait for one another (a stack of recurrent layers: layer ``l`` runs a
chunk of time steps once layer ``l-1`` has) on the same threads: each thread takes the ready task of
the lowest index, runs it, and releases the tasks that waited for it.

Warnings: while a call runs, NumPy's BLAS is limited to one thread for the whole process (as
:func:`threads.blas_threads_limited`). A call made inside a piece runs its pieces inline. A forked
child (DataLoader workers) starts with no workers and makes them on demand.
"""

from __future__ import annotations

import heapq
import os
import threading
from collections.abc import Callable, Sequence

from . import threads as _threads
from ._hostcuda import launch as _launch

__all__ = ["inside_parallel_for", "parallel_for", "run_graph"]


class _Workers:
    """Daemon threads that run the pieces of one :func:`parallel_for` call at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # one call at a time uses the workers
        self.wake = threading.Condition()
        self.started = 0
        self.generation = 0
        self.task: _Task | None = None

    def run(self, task: _Task, helpers: int) -> None:
        with self.wake:
            while self.started < helpers:
                threading.Thread(target=self._serve, name=f"mxlite-piece-{self.started}", daemon=True).start()
                self.started += 1
            self.task = task
            self.generation += 1
            self.wake.notify(helpers)
        task.work()
        with self.wake:
            self.task = None
        task.wait()

    def _serve(self) -> None:
        seen = 0
        while True:
            with self.wake:
                while self.generation == seen:
                    self.wake.wait()
                seen, task = self.generation, self.task
            if task is not None:
                task.work()


class _Task:
    """One call's pieces: claimed in order by whichever thread is free; failures kept by piece."""

    def __init__(self, count: int, body: Callable[[int], None]) -> None:
        self.body, self.count = body, count
        self.claim = iter(range(count))  # next() on a range iterator is atomic under the GIL
        self.done = 0
        self.finished = threading.Condition()
        self.errors: dict[int, BaseException] = {}

    def work(self) -> None:
        _inside.active = True
        try:
            with _launch.on_this_thread():
                for i in self.claim:
                    try:
                        self.body(i)
                    except BaseException as exc:  # noqa: BLE001 - handed to the caller
                        self.errors[i] = exc
                    with self.finished:
                        self.done += 1
                        if self.done == self.count:
                            self.finished.notify_all()
        finally:
            _inside.active = False

    def wait(self) -> None:
        with self.finished:
            self.finished.wait_for(lambda: self.done == self.count)


_workers = _Workers()
_inside = threading.local()  # .active: this thread is running pieces


def _reset_in_child() -> None:
    global _workers
    _workers = _Workers()  # the parent's worker threads do not exist in the child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_in_child)


def inside_parallel_for() -> bool:
    """Whether this thread is running a piece of a :func:`parallel_for` call (its own calls then run inline)."""
    return getattr(_inside, "active", False)


def parallel_for(count: int, body: Callable[[int], None]) -> None:
    """Call ``body(i)`` for each ``i`` in ``range(count)``, side by side on up to ``mx.get_num_threads()`` threads.

    Args:
        count: the number of pieces (0 or more).
        body: called once per piece, from any of the threads, in no particular order; it must write only
            that piece's outputs. Its BLAS calls run on one thread and its host-kernel launches on the
            thread that makes them.

    Raises:
        Whatever ``body`` raised, for the lowest piece that raised, once every piece has run.
    """
    helpers = min(_threads.usable_threads(), count) - 1
    if helpers <= 0 or getattr(_inside, "active", False) or not _workers.lock.acquire(blocking=False):
        for i in range(count):  # one thread, a nested call, or another thread's call holds the workers
            body(i)
        return
    task = _Task(count, body)
    try:
        with _threads.blas_threads_limited(1):
            _workers.run(task, helpers)
    finally:
        _workers.lock.release()
    if task.errors:
        raise task.errors[min(task.errors)]


def run_graph(tasks: Sequence[Callable[[], None]], after: Sequence[Sequence[int]]) -> None:
    """Run ``tasks[i]()`` for every ``i`` once all of ``tasks[j]`` for ``j`` in ``after[i]`` have returned.

    The tasks run side by side on :func:`parallel_for`'s threads (as its pieces, with their BLAS on one
    thread and their launches on their own thread); a free thread takes the ready task of the lowest index,
    so the order of ``tasks`` is their priority. On one thread they run in that order, dependencies
    permitting. Results do not depend on the thread count as long as each task writes only its own
    outputs and reads only what the tasks it waits for (and those before the call) wrote.

    Args:
        tasks: the work, as calls without arguments.
        after: for each task, the indices of the tasks it waits for (any order; each must be another
            task's index, and the graph must have no cycle).

    Raises:
        ValueError: ``after`` is not one entry per task, names a task that does not exist, or has a cycle.
        Whatever a task raised, for the lowest task that raised; the tasks that wait for it do not run.
    """
    count = len(tasks)
    if len(after) != count:
        raise ValueError(f"run_graph: after must list the prerequisites of each of the {count} tasks, "
                         f"got {len(after)} entries")
    waiting = [0] * count
    dependents: list[list[int]] = [[] for _ in range(count)]
    for i, before in enumerate(after):
        for j in before:
            if not 0 <= j < count or j == i:
                raise ValueError(f"run_graph: task {i} waits for {j!r}, which is not another task's index")
            dependents[j].append(i)
            waiting[i] += 1
    state = _Graph(tasks, waiting, dependents)
    if not state.acyclic():
        raise ValueError("run_graph: the dependencies have a cycle")
    parallel_for(min(_threads.usable_threads(), count), state.serve)
    if state.errors:
        raise state.errors[min(state.errors)]


class _Graph:
    """The shared state of one :func:`run_graph` call: what is ready, what waits, what failed."""

    def __init__(self, tasks: Sequence[Callable[[], None]], waiting: list[int], dependents: list[list[int]]) -> None:
        self.tasks, self.waiting, self.dependents = tasks, waiting, dependents
        self.ready = [i for i, n in enumerate(waiting) if n == 0]  # a heap: the lowest index first
        self.running = 0
        self.errors: dict[int, BaseException] = {}
        self.changed = threading.Condition()

    def acyclic(self) -> bool:
        left, ready = list(self.waiting), list(self.ready)
        seen = 0
        while ready:
            i = ready.pop()
            seen += 1
            for d in self.dependents[i]:
                left[d] -= 1
                if left[d] == 0:
                    ready.append(d)
        return seen == len(self.tasks)

    def serve(self, _piece: int) -> None:
        """One thread's loop: take a ready task, run it, release the tasks waiting for it; return when none is
        left to run (or none can run any more, after a failure)."""
        while True:
            with self.changed:
                while not self.ready and self.running:
                    self.changed.wait()
                if not self.ready:
                    return  # every task ran, or the rest wait for one that failed
                i = heapq.heappop(self.ready)
                self.running += 1
            try:
                self.tasks[i]()
                failed = False
            except BaseException as exc:  # noqa: BLE001 - re-raised by run_graph
                self.errors[i] = exc
                failed = True
            with self.changed:
                self.running -= 1
                if not failed:
                    for d in self.dependents[i]:
                        self.waiting[d] -= 1
                        if self.waiting[d] == 0:
                            heapq.heappush(self.ready, d)
                self.changed.notify_all()

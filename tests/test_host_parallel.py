"""Pieces side by side on host threads: parallel_for, kernel launches from several threads, GEMMs in pieces.

``mxlite.device.parallel.parallel_for`` runs every piece once and hands back the first failure; launches of
one module from several threads each get their own result; a large CPU product (``blas.matmul``) is cut into
one piece per thread at multiples of 16 rows or columns, so its bits, and those of a convolution's forward
and backward (whose weight gradient is summed in blocks fixed by the shapes), are the same on one thread
and on several.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import blas, parallel, threads
from mxlite.device._hostcuda import launch
from mxlite.ops import _conv_kernels as ck


def test_parallel_for_runs_every_piece_once_on_several_threads(thread_count):
    thread_count(4)
    seen, names, lock = [], set(), threading.Lock()
    gate = threading.Barrier(2, timeout=10)

    def body(i):
        if i < 2:
            gate.wait()  # the first two pieces meet: they run on two threads at once
        with lock:
            seen.append(i)
            names.add(threading.current_thread().name)

    parallel.parallel_for(40, body)
    assert sorted(seen) == list(range(40))
    assert len(names) >= 2


def test_parallel_for_hands_back_the_lowest_failing_piece_after_all_ran(thread_count):
    thread_count(3)
    ran = []

    def body(i):
        ran.append(i)
        if i in (5, 17):
            raise ValueError(f"piece {i}")

    with pytest.raises(ValueError, match="piece 5"):
        parallel.parallel_for(30, body)
    assert sorted(ran) == list(range(30))


def test_parallel_for_inside_a_piece_runs_inline_and_keeps_blas_on_one_thread(thread_count):
    thread_count(2)
    inner = []

    def body(i):
        assert parallel.inside_parallel_for() or threading.current_thread() is threading.main_thread()
        assert all(c.get_num_threads() == 1 for c in threads._blas_controllers())
        caller = threading.current_thread()
        parallel.parallel_for(3, lambda j: inner.append((i, j, threading.current_thread() is caller)))

    parallel.parallel_for(4, body)
    assert sorted(inner) == [(i, j, True) for i in range(4) for j in range(3)]
    assert all(c.get_num_threads() == 2 for c in threads._blas_controllers())


def test_parallel_for_on_one_thread_runs_in_order_on_the_caller(thread_count):
    thread_count(1)
    order = []
    parallel.parallel_for(5, lambda i: order.append((i, threading.current_thread() is threading.main_thread())))
    assert order == [(i, True) for i in range(5)]


def test_a_forked_child_runs_pieces_with_workers_of_its_own(thread_count):
    thread_count(2)
    parallel.parallel_for(4, lambda i: None)  # the parent's workers exist
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its workers are made anew
        try:
            out = np.zeros(16)
            parallel.parallel_for(16, lambda i: out.__setitem__(i, i))
            os.write(write, b"ok" if np.array_equal(out, np.arange(16)) else b"bad")
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and os.read(read, 8) == b"ok"


def test_launches_of_one_module_from_two_threads_each_get_their_own_result(thread_count):
    """Two host threads run im2col of different geometries at the same time: each gets its own result."""
    thread_count(2)
    rng = np.random.default_rng(0)
    cases = []
    for n, c, size in ((6, 3, 11), (4, 5, 7)):
        x = rng.standard_normal((n, c, size, size)).astype(np.float32)
        geom = ck.geometry(n, c, (size, size), (3, 3), (1, 1), (1, 1), (size, size), (1, 1))
        cases.append((x, geom, ck.im2col(np, x, geom, "per_sample")))
    failures = []
    gate = threading.Barrier(2, timeout=10)

    def run(k):
        x, geom, want = cases[k]
        gate.wait()
        with launch.on_this_thread():
            for _ in range(200):
                got = ck.im2col(np, x, geom, "per_sample")
                if not np.array_equal(got, want):
                    failures.append(k)
                    return

    workers = [threading.Thread(target=run, args=(k,)) for k in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert failures == []


@pytest.mark.parametrize("a_shape, b_shape", [
    ((256, 2048), (2048, 2048)),  # columns cut
    ((2048, 96), (96, 256)),  # rows cut
    ((37, 1290), (1290, 1710)),  # odd sizes
    ((1000, 1000), (1000, 1000)),
    ((64, 1, 288, 256), (1, 256, 64)),  # stacked: the batch cut, b broadcast
    ((1, 64, 288), (96, 1, 288, 256)),  # a broadcast over the batch
])
def test_a_large_product_gives_the_same_bits_on_one_thread_and_on_four(a_shape, b_shape, thread_count):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    thread_count(1)
    one = blas.matmul(a, b)
    thread_count(4)
    four = blas.matmul(a, b)
    into = np.empty_like(four)
    assert blas.matmul(a, b, out=into) is into
    np.testing.assert_array_equal(four, one)
    np.testing.assert_array_equal(into, one)
    np.testing.assert_allclose(one, np.matmul(a, b), rtol=1e-4, atol=1e-3)


def test_host_products_keep_numpy_semantics_for_vectors_and_bad_shapes(thread_count):
    thread_count(2)
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(blas.matmul(a, np.ones(3)), a @ np.ones(3))
    with pytest.raises(ValueError):
        blas.matmul(a, np.ones((4, 2)))


def _assert_same_bits_on_one_thread_and_on_three(run, thread_count):
    """``run()``'s arrays with mxlite on one thread and on three: equal bit for bit."""
    thread_count(1)
    one = run()
    thread_count(3)
    for a, b in zip(one, run(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_convolutions_give_the_same_bits_on_one_thread_and_on_three(thread_count):
    """The per-sample GEMMs and column-gradient blocks of a convolution run side by side: no bit changes."""
    rng = np.random.default_rng(7)
    x_np = rng.standard_normal((20, 4, 12, 12)).astype(np.float32)
    net = mx.nn.Sequential(mx.nn.Conv2D(8, 3, padding=1, in_channels=4, activation="relu"), mx.nn.MaxPool2D(2),
                           mx.nn.Conv2D(6, 3, padding=1, in_channels=8))
    net.initialize(mx.init.Xavier(), device=mx.cpu(0))
    head = np.linspace(-1, 1, 20 * 6 * 6 * 6, dtype=np.float32).reshape(20, 6, 6, 6)

    def run():
        x = mx.array(x_np)
        x.attach_grad()
        with mx.autograd.record():
            y = net(x)
        y.backward(mx.array(head))
        return [y.asnumpy(), x.grad.asnumpy()] + [p.grad().asnumpy() for p in net.collect_params().values()]

    _assert_same_bits_on_one_thread_and_on_three(run, thread_count)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_grouped_and_transposed_convolutions_give_the_same_bits_on_one_thread_and_on_three(dtype, thread_count):
    from mxlite.ops import conv as nn_ops

    rng = np.random.default_rng(11)
    x_np = rng.standard_normal((24, 4, 10, 10)).astype(dtype)
    w_np = (0.3 * rng.standard_normal((6, 2, 3, 3))).astype(dtype)
    wt_np = (0.3 * rng.standard_normal((4, 3, 4, 4))).astype(dtype)

    def run():
        x, w, wt = mx.array(x_np), mx.array(w_np), mx.array(wt_np)
        for t in (x, w, wt):
            t.attach_grad()
        with mx.autograd.record():
            y = nn_ops.conv(x, w, padding=1, groups=2).sum() + nn_ops.conv_transpose(x, wt, stride=2, padding=1).sum()
        y.backward()
        return [y.asnumpy(), x.grad.asnumpy(), w.grad.asnumpy(), wt.grad.asnumpy()]

    _assert_same_bits_on_one_thread_and_on_three(run, thread_count)


# -- run_graph ----------------------------------------------------------------------------------------
def test_run_graph_runs_each_task_after_those_it_waits_for_on_several_threads(thread_count):
    thread_count(3)
    rng = np.random.default_rng(6)
    count = 60
    after = [sorted(set(rng.integers(0, i, size=min(i, 3)).tolist())) if i else [] for i in range(count)]
    finished, names, lock = [], set(), threading.Lock()
    gate = threading.Barrier(2, timeout=10)

    def task(i):
        def run():
            if i in (1, 2) and not after[1] and not after[2]:
                gate.wait()  # two tasks with nothing to wait for meet: they run on two threads at once
            with lock:
                assert all(j in finished for j in after[i]), (i, after[i], finished)
                finished.append(i)
                names.add(threading.current_thread().name)
        return run

    after[1] = after[2] = []
    parallel.run_graph([task(i) for i in range(count)], after)
    assert sorted(finished) == list(range(count))
    assert len(names) >= 2


def test_run_graph_on_one_thread_takes_the_lowest_ready_task_first(thread_count):
    thread_count(1)
    order = []
    after = [[3], [], [1], []]  # 1 and 3 are ready first; 2 waits for 1, 0 for 3
    parallel.run_graph([lambda i=i: order.append(i) for i in range(4)], after)
    assert order == [1, 2, 3, 0]


def test_run_graph_hands_back_the_lowest_failure_and_skips_what_waits_for_it(thread_count):
    thread_count(2)
    ran = []

    def task(i):
        def run():
            ran.append(i)
            if i in (2, 4):
                raise ValueError(f"task {i}")
        return run

    after = [[], [], [], [2], [], [3]]  # 3 and 5 wait (directly or not) for 2
    with pytest.raises(ValueError, match="task 2"):
        parallel.run_graph([task(i) for i in range(6)], after)
    assert sorted(ran) == [0, 1, 2, 4]


@pytest.mark.parametrize("after,message", [([[1], [0]], "cycle"), ([[5], []], "not another task"),
                                           ([[0], []], "not another task"), ([[]], "each of the 2 tasks")])
def test_run_graph_refuses_a_bad_graph_before_running_anything(after, message):
    ran = []
    with pytest.raises(ValueError, match=message):
        parallel.run_graph([lambda: ran.append(0), lambda: ran.append(1)], after)
    assert ran == []

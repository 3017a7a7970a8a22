"""CPU threads: the host-built kernels give the same bits on 1, 2 and 4 threads; the thread policy.

Every kernel file CPU devices run (``kernels/optimizers.cu``, ``conv.cu``, ``rnn.cu``) is run with
the serial runtime's thread budget at 1, 2 and 4, with spreading forced (``set_spread(0, 0)``: even
a small launch wakes the pool), and the results compared byte for byte; the pool's counters show the
blocks really ran on other threads. Kernels that reach an atomic (LAMB's and LARS's norm sums) run on
one thread whatever the budget; an atomic the launcher did not see traps. A forked child (DataLoader
workers) gets a working pool of its own. Then ``mx.set_num_threads`` / ``get_num_threads``: the
default, the BLAS count through threadpoolctl, the limit for small products, and ``mxlite info``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import _hostcuda, threads
from mxlite.device import kernels as _kernels
from mxlite.device._hostcuda import launch
from mxlite.ops import rnn_ops
from tests import test_cpu_kernels
from tests.test_cpu_kernels import _run
from tests.test_fused_rules import FUSED
from tests.test_optimizer_rules_a import _rule_id

COUNTS = (1, 2, 4)


@pytest.fixture
def spread_always(monkeypatch):
    """Every serial launch spreads over its whole budget; the policy and the constants come back after.

    NumPy's BLAS stays on one thread meanwhile: its count otherwise follows the machine's load between the
    runs, and a product may round differently on another count (docs/design.md, "CPU threads"), which
    would blame the kernels for the BLAS."""
    monkeypatch.setenv(_kernels.CPU_KERNELS_ENV, "compiled")
    before = launch.get_threads()
    launch.set_spread(0, 0)
    with threads.blas_threads_limited(1):
        yield
    launch.set_spread(-1, -1)
    launch.set_threads(before)


def _per_thread_count(run, attempts=5):
    """``run()``'s arrays with the host kernels' budget at 1, 2 and 4 threads, and the blocks pool threads ran.

    Whether a woken pool thread takes a block before the caller has claimed them all depends on the
    scheduler (on a loaded machine the caller often wins), so the runs with several threads are repeated,
    each compared, until pool threads have run blocks, at most ``attempts`` times."""
    run()  # builds the kernels first (loading them applies mx.get_num_threads())
    results = {}
    _, before = launch.spread_counts()
    for attempt in range(attempts):
        for n in COUNTS if attempt == 0 else COUNTS[1:]:
            launch.set_threads(n)
            results[n] = [np.array(a, copy=True) for a in run()]
        if attempt < attempts - 1 and launch.spread_counts()[1] == before:
            _assert_same_bits(results)
            continue
        break
    _, after = launch.spread_counts()
    return results, after - before


def _assert_same_bits(results):
    for n in COUNTS[1:]:
        assert len(results[n]) == len(results[1])
        for k, (a, b) in enumerate(zip(results[1], results[n])):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes(), f"array {k} differs between 1 and {n} threads"


# -- optimizers.cu ----------------------------------------------------------------------------------
ELEMENTWISE = [e for e in FUSED if e[0].lower() in ("sgd", "adam", "ftrl", "rmsprop")]
NORMS = [e for e in FUSED if e[0].lower() in ("lamb", "lars")]  # block norm sums: atomics, one thread


@pytest.mark.parametrize("entry", ELEMENTWISE + NORMS, ids=[_rule_id(e) for e in ELEMENTWISE + NORMS])
def test_optimizer_kernels_give_the_same_bits_on_1_2_and_4_threads(entry, spread_always, monkeypatch):
    name, kwargs, _ = entry
    # ten blocks of 65,536 elements besides the small ones: long enough for woken pool threads to join
    monkeypatch.setattr(test_cpu_kernels, "SHAPES", [(5, 13), (1,), (3, 3, 3), (600_001,)])

    def run():
        weights, states = _run(name, kwargs, np.float32, "compiled", monkeypatch, steps=3)
        return weights + states

    results, pool_blocks = _per_thread_count(run)
    _assert_same_bits(results)
    assert pool_blocks > 0, "the updates should have run blocks on pool threads"


def test_kernels_that_reach_an_atomic_run_on_one_thread():
    from mxlite.optimizer import _fused

    module = _kernels._host_module("optimizers.cu", _fused.all_kernel_names())
    names = module.name_expressions
    ordered = {n.split("<")[0] for n in names if module.get_function(n).ordered}
    assert ordered == {"lamb_phase1", "lars_norms"}  # block_sum_into adds each block's norms with an atomic


_ATOMIC_SOURCE = r"""
#define ADD_ONE(p) atomic##Add(p, 1.0f)
__device__ void bump(float *total) { atomicAdd(total, 1.0f); }
__global__ void seen(float *total) { bump(total); }
__global__ void hidden(float *total) { ADD_ONE(total); }
__global__ void plain(float *out) { out[blockIdx.x] = (float)blockIdx.x * 2.0f; }
"""


def test_an_atomic_is_found_through_calls_and_one_hidden_from_the_launcher_traps(spread_always):
    module = _hostcuda.HostModule(_ATOMIC_SOURCE, name="atomics.cu", serial=True)
    seen, hidden, plain = (module.get_function(n) for n in ("seen", "hidden", "plain"))
    assert (seen.ordered, hidden.ordered, plain.ordered) == (True, False, False)
    total = np.zeros(1, np.float32)
    seen((64,), (1,), (total,), threads=4)  # found: runs in order on one thread
    assert total[0] == 64
    out = np.zeros(64, np.float32)
    plain((64,), (1,), (out,), threads=4)
    np.testing.assert_array_equal(out, np.arange(64) * 2.0)
    with pytest.raises(_hostcuda.HostCudaLaunchError, match="an atomic in a launch spread over threads"):
        hidden((64,), (1,), (total,), threads=2)
    hidden((64,), (1,), (total,), threads=1)  # on one thread it is allowed
    assert total[0] == 128


# -- conv.cu ----------------------------------------------------------------------------------------
def test_convolution_kernels_give_the_same_bits_on_1_2_and_4_threads(spread_always):
    rng = np.random.default_rng(3)
    x_np = rng.standard_normal((16, 3, 48, 48)).astype(np.float32)  # several runs of planes per launch
    net = mx.nn.Sequential(mx.nn.Conv2D(6, 3, padding=1, in_channels=3), mx.nn.MaxPool2D(2),
                           mx.nn.Conv2D(4, 3, strides=2, in_channels=6))
    net.initialize(mx.init.Xavier(), device=mx.cpu(0))

    def run():
        x = mx.array(x_np)
        x.attach_grad()
        with mx.autograd.record():
            y = net(x)
        y.backward(mx.array(np.linspace(-1, 1, y.size, dtype=np.float32).reshape(y.shape)))
        return [y.asnumpy(), x.grad.asnumpy()] + [p.grad().asnumpy() for p in net.collect_params().values()]

    results, pool_blocks = _per_thread_count(run)
    _assert_same_bits(results)
    assert pool_blocks > 0


# -- rnn.cu -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn_tanh"])
def test_recurrent_kernels_give_the_same_bits_on_1_2_and_4_threads(mode, spread_always):
    """One layer-direction at a time (rnn_ops.recurrence), whose cell launches spread over the pool; the layers'
    stacks and direction pairs run their launches on their own task threads (tests/test_rnn_stack.py)."""
    rng = np.random.default_rng(4)
    # 512 rows of 128 units: cell steps large enough to be spread (rnn_ops._CPU_SPREAD_UNITS) and long
    # enough (tens of us) for woken pool threads to take rows
    rows, hidden, gates = 512, 128, rnn_ops.GATES[mode] * 128
    assert rows * hidden >= rnn_ops._CPU_SPREAD_UNITS
    x_np = rng.standard_normal((4, rows, 5)).astype(np.float32)
    states_np = [rng.standard_normal((rows, hidden)).astype(np.float32) * 0.5 for _ in range(rnn_ops.NUM_STATES[mode])]
    weights_np = [rng.uniform(-0.1, 0.1, shape).astype(np.float32)
                  for shape in ((gates, 5), (gates, hidden), (gates,), (gates,))]
    lengths = rng.integers(0, 5, rows)

    def run():
        results = []
        for reverse in (False, True):
            x, *rest = (mx.array(a) for a in [x_np, *states_np, *weights_np])
            leaves = [x, *rest]
            for t in leaves:
                t.attach_grad()
            states, weights = rest[:len(states_np)], rest[len(states_np):]
            with mx.autograd.record():
                out, finals = rnn_ops.recurrence(mode, x, states, weights, reverse=reverse,
                                                 valid_length=mx.array(lengths))
                loss = (out * out).sum() + sum((f * f).sum() for f in finals)
            loss.backward()
            results += [out.asnumpy(), *(f.asnumpy() for f in finals), *(t.grad.asnumpy() for t in leaves)]
        return results

    results, pool_blocks = _per_thread_count(run)
    _assert_same_bits(results)
    assert pool_blocks > 0


# -- fork -------------------------------------------------------------------------------------------
def test_a_forked_child_spreads_launches_with_a_pool_of_its_own(spread_always):
    x = np.random.default_rng(5).standard_normal((16, 3, 48, 48)).astype(np.float32)  # several runs of planes
    conv = mx.nn.Conv2D(4, 3, in_channels=3)
    conv.initialize(mx.init.Xavier(), device=mx.cpu(0))
    conv(mx.array(x))  # builds the kernels first (loading them applies mx.get_num_threads())
    launch.set_threads(4)
    want = conv(mx.array(x)).asnumpy()  # the parent's pool threads exist now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only the forking thread exists; its launches must not wait for the parent's pool
        try:
            before, _ = launch.spread_counts()
            got = conv(mx.array(x)).asnumpy()
            after, _ = launch.spread_counts()  # launches that woke the (child's own) pool
            ok = got.tobytes() == want.tobytes() and after > before
            os.write(write, b"ok" if ok else f"bad {got.tobytes() == want.tobytes()} {before} {after}".encode())
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 64)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    assert status == 0 and answer == b"ok"


# -- the policy ---------------------------------------------------------------------------------------
@pytest.fixture
def policy():
    """The thread policy as it was, restored after the test."""
    saved = (threads._num_threads, threads._explicit, launch.get_threads())
    blas = [c.get_num_threads() for c in threads._blas_controllers()]
    yield
    threads._num_threads, threads._explicit = saved[:2]
    launch.set_threads(saved[2])
    for c, n in zip(threads._blas_controllers(), blas):
        c.set_num_threads(n)


def test_the_default_is_omp_num_threads_else_the_cores_this_process_may_use(monkeypatch, policy):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.default_num_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "not a number")
    assert threads.default_num_threads() == len(os.sched_getaffinity(0))
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert threads.default_num_threads() == len(os.sched_getaffinity(0))
    threads._num_threads = None
    assert mx.get_num_threads() == len(os.sched_getaffinity(0))


def test_set_num_threads_sets_the_blas_and_the_host_kernels(policy):
    mx.set_num_threads(1)
    assert mx.get_num_threads() == 1 and launch.get_threads() == 1
    controllers = threads._blas_controllers()
    assert controllers, "NumPy's BLAS should be visible to threadpoolctl"
    assert all(c.get_num_threads() == 1 for c in controllers)
    mx.set_num_threads(np.int64(3))
    assert mx.get_num_threads() == 3 and launch.get_threads() == 3
    assert all(c.get_num_threads() == 3 for c in controllers)
    assert "3 (set by mx.set_num_threads)" in threads.threads_status()


@pytest.mark.parametrize("bad", [0, -2, 1.5, "2", True, None])
def test_set_num_threads_refuses_what_is_not_a_count(bad, policy):
    with pytest.raises(ValueError, match=r"whole number of threads >= 1, got"):
        mx.set_num_threads(bad)


def test_blas_threads_limited_restores_the_count(policy):
    mx.set_num_threads(2)
    controllers = threads._blas_controllers()
    with threads.blas_threads_limited(1):
        assert all(c.get_num_threads() == 1 for c in controllers)
    assert all(c.get_num_threads() == 2 for c in controllers)


def test_mxlite_info_shows_the_threads(capsys, policy):
    from mxlite.cli import info

    mx.set_num_threads(2)
    info()
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("CPU threads:"))
    assert "2 (set by mx.set_num_threads)" in line and "host kernels: up to 2" in line


class _FakeTimes:
    def __init__(self, own):
        self.user, self.system = own, 0.0


def test_the_default_blas_count_follows_the_cores_other_processes_leave(monkeypatch, policy):
    """adapt_to_load: the machine's busy seconds less this process's, over the time between two looks."""
    threads._explicit = False
    monkeypatch.setattr(threads, "default_num_threads", lambda: 4)
    monkeypatch.setattr(threads, "get_num_threads", lambda: 4)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 4)
    readings = iter([(0.0, 0.0), (1.0, 1.0), (4.0, 2.0), (7.8, 2.0), (8.0, 2.0)])  # (machine busy s, own s)
    current = {}

    def machine():
        current["busy"], current["own"] = next(readings)
        return current["busy"]

    monkeypatch.setattr(threads, "_machine_busy_seconds", machine)
    monkeypatch.setattr(threads.os, "times", lambda: _FakeTimes(current["own"]))
    set_counts = []
    monkeypatch.setattr(threads, "_blas_controllers", lambda: [type("C", (), {
        "set_num_threads": lambda self, n: set_counts.append(n), "get_num_threads": lambda self: 4})()])
    threads._load.__init__()
    assert threads.adapt_to_load(now=100.0) is None  # the first look only records
    assert threads.adapt_to_load(now=100.1) is None  # too soon for another look
    assert threads.adapt_to_load(now=101.0) == 4  # others used 0 cores
    assert threads.adapt_to_load(now=102.0) == 2  # 3 busy s, 1 of them ours: 2 cores taken by others
    assert threads.adapt_to_load(now=103.0) == 1  # 3.8 cores taken: at least one thread stays
    assert threads.usable_threads() == 4  # mxlite's own pieces keep the full count (their threads sleep when idle)
    with threads.blas_threads_limited(1):
        assert threads.adapt_to_load(now=104.0) is None  # not inside a limited block
    assert set_counts[:3] == [4, 2, 1]  # then blas_threads_limited's own 1 and 4
    threads._explicit = True
    assert threads.adapt_to_load(now=110.0) is None  # a count set by set_num_threads stays

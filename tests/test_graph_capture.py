"""CUDA graph capture on the emulated GPUs: Stream.begin_capture/end_capture, Graph.launch, what capture
refuses, and the emulated nvmath cuBLAS bindings (docs/gpu-emulation.md)."""

from __future__ import annotations

import gc
import importlib
import inspect

import numpy as np
import pytest

from mxlite._emulation import install as emu

pytestmark = pytest.mark.gpu
EmulatedGPUError = emu.EmulatedGPUError


@pytest.fixture
def env(cp):
    """The double, a non-blocking stream, a memory pool for graphs, and the counters zeroed."""
    stream = cp.cuda.Stream(non_blocking=True)
    pool = cp.cuda.MemoryPool()
    emu.reset_counters()
    return cp, stream, pool


def _capture(cp, stream, pool, fn, *args):
    """``fn(*args)`` captured on ``stream`` with graph memory from ``pool``: (graph, what fn returned)."""
    with stream, cp.cuda.using_allocator(pool.malloc):
        stream.begin_capture()
        try:
            out = fn(*args)
        finally:
            graph = stream.end_capture() if stream.is_capturing() else None
    return graph, out


def _bits(x):
    return x.get().tobytes()


def _elementwise(cp):
    def fn(x, y, acc):
        z = cp.exp(x) * 0.5 + y                         # ufuncs with scalars, and a temporary freed in the capture
        w = cp.where(x > y, z, -y).astype(np.float64)   # a comparison, a select, a cast
        s = w.sum(axis=1, keepdims=True)                # a reduction
        acc += x[:, ::2].mean()                         # an in-place update of a buffer that lives on
        v = cp.zeros((4, 8), np.float32)                # a fill
        cp.multiply(x, 3, out=v)                        # out=
        v[1:3] = y[1:3] * 2                             # basic slice assignment
        t = cp.concatenate([z, v], axis=0)[::-1]        # a copy, then a view of it
        return z, w, s, v, t
    return fn


def _inputs(cp, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32),
            np.float32(rng.standard_normal()))


def test_elementwise_replays_are_bit_identical_to_eager(env):
    cp, s, pool = env
    fn = _elementwise(cp)
    with s:
        x, y, acc = cp.empty((4, 8), np.float32), cp.empty((4, 8), np.float32), cp.empty((), np.float32)
        hx, hy, hacc = _inputs(cp, 0)
        x.set(hx)
        y.set(hy)
        acc.fill(hacc)
    graph, outs = _capture(cp, s, pool, fn, x, y, acc)
    with s:
        assert np.isnan(outs[0].get()).all() and np.isnan(outs[4].get()).all()  # nothing ran: uninitialised
        assert acc.item() == hacc  # the in-place update did not happen either
    for seed in range(1, 4):
        hx, hy, hacc = _inputs(cp, seed)
        with s:
            x.set(hx)
            y.set(hy)
            acc.fill(hacc)
            graph.launch(s)
            got = [_bits(o) for o in (*outs, acc)]
            ex, ey, eacc = cp.asarray(hx), cp.asarray(hy), cp.full((), hacc, np.float32)
            expected = [_bits(o) for o in (*fn(ex, ey, eacc), eacc)]
        assert got == expected, f"replay {seed} differs from eager execution"


def test_a_launch_counts_one_graph_launch_and_no_sync(env):
    cp, s, pool = env
    with s:
        x = cp.ones(16, np.float32)
    graph, y = _capture(cp, s, pool, lambda a: cp.sqrt(a * 4) + 1, x)
    emu.reset_counters()
    graph.launch(s)
    c = emu.counters()[0]
    assert (c["graph_launches"], c["graph_nodes"], c["host_syncs"]) == (1, 3, 0)
    assert c["op_launches"] == {} and c["kernel_launches"] == {} and c["allocations"] == 0
    graph.launch(s)
    assert emu.counters()[0]["graph_launches"] == 2 and emu.counters()[0]["graph_nodes"] == 6
    with s:
        assert y.get().tolist() == [3.0] * 16
    assert graph.debug_dot_str().count("->") == 2 and "sqrt" in graph.debug_dot_str()


def test_graph_can_launch_on_another_stream_once_ordered(env):
    cp, s, pool = env
    with s:
        x = cp.arange(8, dtype=np.float32)
    graph, y = _capture(cp, s, pool, lambda a: a * 2, x)
    other = cp.cuda.Stream(non_blocking=True)
    with pytest.raises(EmulatedGPUError, match="race"):
        graph.launch(other)  # x was written on s: nothing orders that before `other`
    other.wait_event(s.record())
    graph.launch(other)
    with other:
        assert y.get().tolist() == [2.0 * i for i in range(8)]
    with pytest.raises(EmulatedGPUError, match="captured on gpu\\(0\\)"), cp.cuda.Device(1):
        graph.launch()


def _twice_kernel(cp):
    hostcuda = pytest.importorskip("mxlite.device._hostcuda")
    src = ('extern "C" __global__ void twice_plus(const float* x, float* y, float b, int n) {'
           " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2.0f * x[i] + b; }")
    try:
        return cp.RawModule(code=src, options=("-std=c++17",)).get_function("twice_plus")
    except getattr(hostcuda, "HostCudaSetupError", RuntimeError) as exc:
        pytest.skip(f"no host CUDA build here: {exc}")


def test_rawkernel_launches_replay_on_new_inputs(env):
    cp, s, pool = env
    kernel = _twice_kernel(cp)
    n = 100

    def fn(x):
        y = cp.empty(n, np.float32)
        kernel((1,), (128,), (x, y, np.float32(0.5), np.int32(n)))
        return cp.tanh(y)

    with s:
        x = cp.empty(n, np.float32)
    graph, out = _capture(cp, s, pool, fn, x)
    assert emu.counters()[0]["kernel_launches"] == {}  # recorded, not launched
    rng = np.random.default_rng(3)
    for _ in range(3):
        host = rng.standard_normal(n).astype(np.float32)
        with s:
            x.set(host)
            graph.launch()
            assert _bits(out) == _bits(fn(cp.asarray(host)))
    assert emu.counters()[0]["kernel_launches"] == {"twice_plus": 3}  # the eager runs only
    with s, cp.cuda.using_allocator(pool.malloc):
        y = cp.empty(n, np.float32)
        s.begin_capture()
        with pytest.raises(EmulatedGPUError, match="raw addresses"):
            kernel((1,), (128,), (x, y.data.ptr, np.float32(0.5), np.int32(n)))
        s.end_capture()


# -- what capture refuses ------------------------------------------------------------------------------
def _runtime_error(cp):
    return cp.cuda.runtime.CUDARuntimeError


def _still_usable(cp, s):
    assert not s.is_capturing()
    s.synchronize()
    with s:
        assert (cp.arange(3) + 1).get().tolist() == [1, 2, 3]


@pytest.mark.parametrize("wait", ["stream", "device", "runtime", "done", "callback"])
def test_host_synchronisation_invalidates_the_capture(env, wait):
    cp, s, pool = env
    with s, cp.cuda.using_allocator(pool.malloc):
        x = cp.ones(4)
        s.begin_capture()
        x * 2
        with pytest.raises(_runtime_error(cp), match="cudaErrorStreamCaptureUnsupported"):
            {"stream": s.synchronize, "device": cp.cuda.Device().synchronize,
             "runtime": cp.cuda.runtime.deviceSynchronize, "done": lambda: s.done,
             "callback": lambda: s.add_callback(lambda *a: None, None)}[wait]()
        with pytest.raises(RuntimeError, match="invalidated the capture sequence"):
            s.is_capturing()
        with pytest.raises(_runtime_error(cp), match="cudaErrorStreamCaptureInvalidated"):
            x + 1
        with pytest.raises(_runtime_error(cp), match="cudaErrorStreamCaptureInvalidated"):
            s.end_capture()
    _still_usable(cp, s)
    with s:
        assert x.get().tolist() == [1.0] * 4


@pytest.mark.parametrize("read", ["get", "asnumpy", "item", "float", "bool", "tolist", "nonzero", "mask", "allclose"])
def test_host_reads_raise_and_leave_the_capture_valid(env, read):
    cp, s, pool = env
    with s:
        x = cp.arange(4, dtype=np.float32)
    with s, cp.cuda.using_allocator(pool.malloc):
        s.begin_capture()
        y = x * 2
        with pytest.raises(RuntimeError, match="stream is capturing, so D2H transfers are disallowed"):
            {"get": y.get, "asnumpy": lambda: cp.asnumpy(y), "item": lambda: y[0].item(), "float": lambda: float(y[1]),
             "bool": lambda: bool(y[2] > 0), "tolist": y.tolist, "nonzero": lambda: cp.nonzero(y),
             "mask": lambda: y[y > 1], "allclose": lambda: cp.allclose(y, x)}[read]()
        graph = s.end_capture()
    graph.launch(s)
    with s:
        assert y.get().tolist() == [0, 2, 4, 6]


@pytest.mark.parametrize("write", ["asarray", "set", "setitem", "list"])
def test_host_to_device_copies_raise(env, write):
    cp, s, pool = env
    host = np.ones(4, np.float32)
    with s:
        x = cp.zeros(4, np.float32)
    with s, cp.cuda.using_allocator(pool.malloc):
        s.begin_capture()
        with pytest.raises(RuntimeError, match="stream is capturing, so H2D transfers are disallowed"):
            {"asarray": lambda: cp.asarray(host), "set": lambda: x.set(host),
             "setitem": lambda: x.__setitem__(slice(None), host), "list": lambda: cp.array([1, 2])}[write]()
        s.end_capture()
    with s:
        assert x.get().tolist() == [0] * 4


@pytest.mark.parametrize("op", ["matmul", "at", "dot", "method_dot", "tensordot", "inner", "vdot", "einsum"])
def test_cublas_through_cupy_raises_during_capture_and_works_outside(env, op):
    cp, s, pool = env
    with s:
        a, b = cp.ones((3, 4), np.float32), cp.ones((4, 2), np.float32)
    call = {"matmul": lambda: cp.matmul(a, b), "at": lambda: a @ b, "dot": lambda: cp.dot(a, b),
            "method_dot": lambda: a.dot(b), "tensordot": lambda: cp.tensordot(a, b, axes=1),
            "inner": lambda: cp.inner(a, a), "vdot": lambda: cp.vdot(a, a),
            "einsum": lambda: cp.einsum("ij,jk->ik", a, b)}[op]
    with s, cp.cuda.using_allocator(pool.malloc):
        s.begin_capture()
        with pytest.raises(NotImplementedError, match="calling cuBLAS API during stream capture is currently "
                                                      "unsupported"):
            call()
        ints = cp.matmul(cp.ones((2, 2), np.int32), cp.ones((2, 2), np.int32))  # CuPy's own kernel: capturable
        scaled = cp.dot(a, 2.0)  # a 0-d operand: a multiplication
        graph = s.end_capture()
    graph.launch(s)
    with s:
        assert ints.get().tolist() == [[2, 2], [2, 2]] and scaled.get().tolist() == [[2.0] * 4] * 3
        assert float(call().sum()) > 0  # fine outside a capture


def test_curand_raises_during_capture(env):
    cp, s, pool = env
    rs = cp.random.RandomState(0)
    with s, cp.cuda.using_allocator(pool.malloc):
        s.begin_capture()
        with pytest.raises(NotImplementedError, match="cuRAND API during stream capture"):
            rs.standard_normal(4)
        with pytest.raises(NotImplementedError, match="cuRAND"):
            cp.random.uniform(size=3)
        with pytest.raises(EmulatedGPUError, match="Generator"):
            cp.random.default_rng(0).random(3)
        s.end_capture()
    assert rs.standard_normal(4).get().tolist() == cp.random.RandomState(0).standard_normal(4).get().tolist()


def test_default_pool_allocations_are_refused(env):
    cp, s, pool = env
    with s:
        x = cp.ones(4, np.float32)
        s.begin_capture()
        with pytest.raises(EmulatedGPUError, match="default memory pool.*MemoryPool"):
            x * 2
        with pytest.raises(EmulatedGPUError, match="default memory pool"):
            cp.empty(4)
        x *= 3  # in place: no allocation, fine
        with cp.cuda.using_allocator(pool.malloc):
            y = x + 1
        graph = s.end_capture()
        assert x.get().tolist() == [1.0] * 4  # put back: the capture did not run
        graph.launch()
        assert x.get().tolist() == [3.0] * 4 and y.get().tolist() == [4.0] * 4
    assert pool.used_bytes() > 0 and cp.get_default_memory_pool().used_bytes() > 0


def test_global_mode_refuses_a_pool_that_must_grow(env):
    cp, s, pool = env
    with s, cp.cuda.using_allocator(pool.malloc):
        x = cp.ones(256, np.float32)
        del x  # a free 1 KiB block in the graph pool
        s.begin_capture(cp.cuda.runtime.streamCaptureModeGlobal)
        cp.zeros(256, np.float32)  # reuses the cached block: no cudaMalloc
        with pytest.raises(_runtime_error(cp), match="cudaErrorStreamCaptureUnsupported.*cudaMalloc"):
            cp.zeros(1 << 20, np.float32)
        with pytest.raises(_runtime_error(cp), match="Invalidated"):
            s.end_capture()
        s.begin_capture()  # relaxed, CuPy's default: the pool may grow
        big = cp.zeros(1 << 20, np.float32)
        s.end_capture().launch()
        assert float(big.sum()) == 0.0
    with pytest.raises(_runtime_error(cp), match="cudaErrorInvalidValue"):
        s.begin_capture(mode=7)


def test_fork_and_join_with_events(env):
    cp, s, pool = env
    s2 = cp.cuda.Stream(non_blocking=True)
    with s:
        a = cp.arange(6, dtype=np.float32)
    with cp.cuda.using_allocator(pool.malloc):
        with s:
            s.begin_capture()
            b = a * 10
            s2.wait_event(s.record())  # fork
        assert s2.is_capturing()
        with s2:
            c = b + 1
            d = c * c
        s.wait_event(s2.record())  # join
        with s:
            e = d - b
            graph = s.end_capture()
    assert not s2.is_capturing()
    graph.launch(s)
    with s:
        expected = (np.arange(6, dtype=np.float32) * 10 + 1) ** 2 - np.arange(6, dtype=np.float32) * 10
        assert e.get().tolist() == expected.tolist()


def _begin_forked(cp, s):
    """Begin a capture on ``s`` and fork a new stream into it; returns that stream."""
    s.begin_capture()
    s2 = cp.cuda.Stream(non_blocking=True)
    s2.wait_event(s.record())
    return s2


def test_race_between_forked_streams_is_caught_in_the_capture(env):
    cp, s, pool = env
    with s, cp.cuda.using_allocator(pool.malloc):
        a = cp.ones(4)
        s2 = _begin_forked(cp, s)
        with s2:
            c = a + 1
        with pytest.raises(EmulatedGPUError, match="write-after-read race"):
            a *= 3  # s2 reads a, and nothing orders that before this write on s
        s.wait_event(s2.record())
        a *= 3  # joined: fine
        s.end_capture()
        assert a.get().tolist() == [1.0] * 4
    del c


def test_unjoined_fork_fails_end_capture(env):
    cp, s, pool = env
    with s, cp.cuda.using_allocator(pool.malloc):
        a = cp.ones(4)
        s2 = _begin_forked(cp, s)
        with s2:
            a * 2
        with pytest.raises(_runtime_error(cp), match="cudaErrorStreamCaptureUnjoined"):
            s.end_capture()
    assert not s.is_capturing() and not s2.is_capturing()
    _still_usable(cp, s2)


def test_end_capture_on_the_forked_stream_is_unmatched(env):
    cp, s, pool = env
    with s, cp.cuda.using_allocator(pool.malloc):
        s2 = _begin_forked(cp, s)
        with pytest.raises(_runtime_error(cp), match="cudaErrorStreamCaptureUnmatched"):
            s2.end_capture()
        with pytest.raises(_runtime_error(cp), match="cudaErrorStreamCaptureInvalidated"):
            s.end_capture()
    assert not s.is_capturing() and not s2.is_capturing()
    with pytest.raises(_runtime_error(cp), match="cudaErrorIllegalState"):
        s.end_capture()


def test_another_stream_without_a_fork_is_refused(env):
    cp, s, pool = env
    s2 = cp.cuda.Stream(non_blocking=True)
    with s:
        a = cp.ones(4)
    s2.wait_event(s.record())
    with cp.cuda.using_allocator(pool.malloc):
        with s:
            s.begin_capture()
            b = a * 2
        with s2, pytest.raises(EmulatedGPUError, match="not part of that capture"):
            b + 1  # s2 would compute now, on what the capture has not produced
        with s2:
            c = cp.ones(4) * 5  # work of its own on s2 is fine ...
        with s, pytest.raises(EmulatedGPUError, match="not part of the capture: its work ran once"):
            b + c  # ... but the capture may not use it: a launch would not redo it
        with s:
            graph = s.end_capture()
    graph.launch(s)


def test_waiting_on_events_across_the_capture_boundary(env):
    cp, s, pool = env
    s2 = cp.cuda.Stream(non_blocking=True)
    outside = s2.record()
    with s, cp.cuda.using_allocator(pool.malloc):
        s.begin_capture()
        inside = s.record()
        with pytest.raises(_runtime_error(cp), match="cudaErrorCapturedEvent"):
            inside.synchronize()
        with pytest.raises(_runtime_error(cp), match="cudaErrorStreamCaptureIsolation"):
            s.wait_event(outside)
        with pytest.raises(_runtime_error(cp), match="Invalidated"):
            s.end_capture()
    with pytest.raises(EmulatedGPUError, match="recorded during a stream capture"):
        inside.synchronize()
    inside.record(s)
    inside.synchronize()


def test_legacy_stream_and_blocking_capture_streams(env):
    cp, _, pool = env
    blocking = cp.cuda.Stream()  # CuPy's default: blocking, so the legacy stream may not be used meanwhile
    with pytest.raises(RuntimeError, match="cannot capture on the default"):
        cp.cuda.get_current_stream().begin_capture()
    with blocking, cp.cuda.using_allocator(pool.malloc):
        x = cp.ones(3)
        blocking.begin_capture()
        with pytest.raises(_runtime_error(cp), match="already capturing"):
            blocking.begin_capture()
        y = x + 1
    with pytest.raises(_runtime_error(cp), match="cudaErrorStreamCaptureImplicit"):
        cp.cuda.get_current_stream().is_capturing()
    assert blocking.is_capturing()  # a query does not invalidate
    with pytest.raises(_runtime_error(cp), match="cudaErrorStreamCaptureImplicit"):
        cp.zeros(3) + 1  # work on the legacy stream does
    with pytest.raises(_runtime_error(cp), match="Invalidated"):
        blocking.end_capture()
    del y


def test_peer_copies_are_recorded(env):
    cp, s, pool = env
    with cp.cuda.Device(1):
        remote = cp.arange(4, dtype=np.float32)  # written on gpu(1)'s null stream, before the capture
        cp.cuda.Device().synchronize()
    with s, cp.cuda.using_allocator(pool.malloc):
        s.begin_capture()
        local = cp.asarray(remote)  # a peer copy onto gpu(0)
        out = local * 2
        graph = s.end_capture()
    with cp.cuda.Device(1):
        remote += 1
        cp.cuda.Device().synchronize()
    emu.reset_counters()
    graph.launch(s)
    with s:
        assert out.get().tolist() == [2.0, 4.0, 6.0, 8.0]
    assert emu.counters()[0]["p2p_copies"] == 0 and emu.counters()[0]["graph_nodes"] == 2


def test_scatter_and_raw_copies_are_recorded(env):
    cp, s, pool = env
    cupyx = importlib.import_module("cupyx")
    with s:
        idx = cp.asarray(np.array([0, 2, 2, 3]))
        vals = cp.ones(4, np.float32)
        acc = cp.zeros(5, np.float32)
        src = cp.arange(4, dtype=np.float32)
        dst = cp.zeros(4, np.float32)
    with s, cp.cuda.using_allocator(pool.malloc):
        s.begin_capture()
        cupyx.scatter_add(acc, idx, vals)
        cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, 0, src.data.ptr, 0, src.nbytes, s.ptr)
        graph = s.end_capture()
        assert acc.get().tolist() == [0.0] * 5 and dst.get().tolist() == [0.0] * 4
        graph.launch()
        graph.launch()
        assert acc.get().tolist() == [2.0, 0.0, 4.0, 2.0, 0.0] and dst.get().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_failed_operation_leaves_the_capture_usable(env):
    cp, s, pool = env
    with s, cp.cuda.using_allocator(pool.malloc):
        x = cp.ones((2, 3), np.float32)
        s.begin_capture()
        y = x * 2
        with pytest.raises(ValueError):
            x + cp.ones((4, 5), np.float32)  # an error of the program, not of CUDA
        z = y + 1
        graph = s.end_capture()
        graph.launch()
        assert z.get().tolist() == [[3.0] * 3] * 2


def test_buffers_are_checked_at_launch(env):
    cp, s, pool = env
    with s:
        x = cp.ones(8, np.float32)
        graph, y = _capture(cp, s, pool, lambda a: a + 1, x)
        graph.launch()
        del y
        gc.collect()
        graph.launch()  # a freed output whose memory nobody else uses: harmless
        with cp.cuda.using_allocator(pool.malloc):
            other = cp.zeros(8, np.float32)  # gets the output's block back
        with pytest.raises(EmulatedGPUError, match="given that memory to alloc"):
            graph.launch()
        del other, x
        gc.collect()
        with pytest.raises(EmulatedGPUError, match="reads it before writing it"):
            graph.launch()


def test_released_graph_memory_is_refused(env):
    cp, s, pool = env
    with s:
        x = cp.ones(8, np.float32)
        graph, y = _capture(cp, s, pool, lambda a: a + 1, x)
        del y
        gc.collect()
        s.synchronize()
        pool.free_all_blocks()
        with pytest.raises(EmulatedGPUError, match="released"):
            graph.launch()


def test_reuse_of_graph_memory_must_wait_for_the_launch(env):
    cp, s, pool = env
    s2 = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.ones(8, np.float32)
        graph, y = _capture(cp, s, pool, lambda a: (a + 1) * 2, x)  # the temporary (a + 1) is freed to s's list
    s2.wait_event(s.record())
    graph.launch(s2)  # writes the temporary's block on s2
    with s, cp.cuda.using_allocator(pool.malloc):
        with pytest.raises(EmulatedGPUError, match="use after free"):
            cp.empty(8, np.float32)  # s would take the block while s2's launch may still write it
        s.wait_event(s2.record())
        cp.empty(8, np.float32)


def test_graph_cannot_be_made_directly_nor_launched_inside_a_capture(env):
    cp, s, pool = env
    with pytest.raises(NotImplementedError):
        cp.cuda.graph.Graph()
    with s:
        x = cp.ones(2)
        graph, _ = _capture(cp, s, pool, lambda a: a + 1, x)
        s.begin_capture()
        with pytest.raises(EmulatedGPUError, match="not emulated"):
            graph.launch()
        s.end_capture()
        graph.upload()


# -- the emulated nvmath cuBLAS bindings ----------------------------------------------------------------
@pytest.fixture
def blas(env):
    cp, s, pool = env
    cublas = importlib.import_module("nvmath.bindings.cublas")
    assert cublas.__name__.startswith("mxlite._emulation")
    handle = cublas.create()
    with s, cp.cuda.using_allocator(pool.malloc):
        workspace = cp.empty(1 << 20, np.uint8)  # allocated on the stream that will use it
    cublas.set_stream(handle, s.ptr)
    cublas.set_workspace(handle, workspace.data.ptr, workspace.nbytes)
    yield cp, s, pool, cublas, handle, workspace
    cublas.destroy(handle)


def _scalars(dtype, alpha, beta):
    """Host alpha/beta as nvmath takes them: addresses of host memory."""
    one = np.array([alpha], dtype)
    zero = np.array([beta], dtype)
    return one, zero


def _row_major_matmul(cublas, handle, x, w, y, alpha=1.0, beta=0.0, dtype=np.float32):
    """y = x @ w for row-major x (M x K), w (K x N) through the column-major GEMM (y^T = w^T x^T)."""
    (m, k), n = x.shape, w.shape[1]
    al, be = _scalars(dtype, alpha, beta)
    gemm = cublas.sgemm if dtype == np.float32 else cublas.dgemm
    gemm(handle, cublas.Operation.N, cublas.Operation.N, n, m, k, al.ctypes.data, w.data.ptr, n, x.data.ptr, k,
         be.ctypes.data, y.data.ptr, n)


def test_sgemm_is_bit_identical_to_cupy_matmul(blas):
    cp, s, _, cublas, handle, _ = blas
    rng = np.random.default_rng(5)
    with s:
        for dtype in (np.float32, np.float64):
            x = cp.asarray(rng.standard_normal((33, 20)).astype(dtype))
            w = cp.asarray(rng.standard_normal((20, 17)).astype(dtype))
            y = cp.empty((33, 17), dtype)  # NaN: beta = 0 must not read it
            _row_major_matmul(cublas, handle, x, w, y, dtype=dtype)
            assert _bits(y) == _bits(cp.matmul(x, w))
            y0 = y.copy()
            _row_major_matmul(cublas, handle, x, w, y, alpha=0.5, beta=2.0, dtype=dtype)
            np.testing.assert_allclose(y.get(), 0.5 * (x.get() @ w.get()) + 2.0 * y0.get(), rtol=1e-5)
    assert emu.counters()[0]["kernel_launches"]["cublas.sgemm"] == 2


def test_gemm_transposes_and_ex_types(blas):
    cp, s, _, cublas, handle, _ = blas
    rng = np.random.default_rng(6)
    al, be = _scalars(np.float32, 1.0, 0.0)
    op = cublas.Operation
    with s:
        a = cp.asarray(rng.standard_normal((5, 7)).astype(np.float32))  # col-major k x m = 5 x 7 -> op T: 7 x 5
        b = cp.asarray(rng.standard_normal((6, 5)).astype(np.float32))  # col-major n x k -> op T
        c = cp.empty((6, 7), np.float32)  # col-major m x n = 7 x 6
        cublas.sgemm(handle, op.T, op.T, 7, 6, 5, al.ctypes.data, a.data.ptr, 5, b.data.ptr, 6, be.ctypes.data,
                     c.data.ptr, 7)
        col_a = a.get().reshape(-1).reshape((5, 7), order="F")  # A (k x m, lda 5) as cuBLAS reads it
        col_b = b.get().reshape(-1).reshape((6, 5), order="F")  # B (n x k, ldb 6)
        got = c.get().reshape(-1).reshape((7, 6), order="F")  # C (m x n, ldc 7)
        expected = col_a.T @ col_b.T
        np.testing.assert_allclose(got, expected, rtol=1e-5)
        h16 = rng.standard_normal((8, 4)).astype(np.float16)
        x16, w16 = cp.asarray(h16), cp.asarray(rng.standard_normal((4, 3)).astype(np.float16))
        y32 = cp.empty((8, 3), np.float32)
        dt = importlib.import_module("nvmath").CudaDataType
        cublas.gemm_ex(handle, op.N, op.N, 3, 8, 4, al.ctypes.data, w16.data.ptr, dt.CUDA_R_16F, 3, x16.data.ptr,
                       dt.CUDA_R_16F, 4, be.ctypes.data, y32.data.ptr, dt.CUDA_R_32F, 3,
                       cublas.ComputeType.COMPUTE_32F, cublas.GemmAlgo.DEFAULT)
        assert _bits(y32) == _bits(cp.matmul(x16.astype(np.float32), w16.astype(np.float32)))
        xb = cp.asarray(rng.standard_normal((4, 8, 6)).astype(np.float32))
        wb = cp.asarray(rng.standard_normal((4, 6, 5)).astype(np.float32))
        yb = cp.empty((4, 8, 5), np.float32)
        cublas.gemm_strided_batched_ex(handle, op.N, op.N, 5, 8, 6, al.ctypes.data, wb.data.ptr, dt.CUDA_R_32F, 5,
                                       30, xb.data.ptr, dt.CUDA_R_32F, 6, 48, be.ctypes.data, yb.data.ptr,
                                       dt.CUDA_R_32F, 5, 40, 4, cublas.ComputeType.COMPUTE_32F,
                                       cublas.GemmAlgo.DEFAULT)
        np.testing.assert_allclose(yb.get(), xb.get() @ wb.get(), rtol=1e-5)
        with pytest.raises(cublas.cuBLASError, match="NOT_SUPPORTED"):
            cublas.gemm_ex(handle, op.N, op.N, 3, 8, 4, al.ctypes.data, w16.data.ptr, dt.CUDA_R_16F, 3,
                           x16.data.ptr, dt.CUDA_R_32F, 4, be.ctypes.data, y32.data.ptr, dt.CUDA_R_32F, 3,
                           cublas.ComputeType.COMPUTE_32F, cublas.GemmAlgo.DEFAULT)


def test_gemm_capture_replays_bit_identically(blas):
    cp, s, pool, cublas, handle, _ = blas
    rng = np.random.default_rng(7)
    with s:
        x = cp.empty((16, 12), np.float32)
        w = cp.empty((12, 10), np.float32)

    def layer(a, b):
        with cp.cuda.using_allocator(pool.malloc):
            y = cp.empty((16, 10), np.float32)
        _row_major_matmul(cublas, handle, a, b, y)
        return cp.maximum(y, 0) * 2

    graph, out = _capture(cp, s, pool, layer, x, w)
    assert len(graph._nodes) == 3
    for _ in range(3):
        hx = rng.standard_normal((16, 12)).astype(np.float32)
        hw = rng.standard_normal((12, 10)).astype(np.float32)
        with s:
            x.set(hx)
            w.set(hw)
            graph.launch()
            assert _bits(out) == _bits(cp.maximum(cp.matmul(cp.asarray(hx), cp.asarray(hw)), 0) * 2)


def test_gemm_refusals(blas):
    cp, s, pool, cublas, handle, workspace = blas
    al, be = _scalars(np.float32, 1.0, 0.0)
    with s:
        x, w, y = cp.ones((4, 4), np.float32), cp.ones((4, 4), np.float32), cp.empty((4, 4), np.float32)
    other = cp.cuda.Stream(non_blocking=True)
    with s, cp.cuda.using_allocator(pool.malloc):
        s.begin_capture()
        cublas.set_stream(handle, other.ptr)  # also drops the workspace, as cuBLAS does
        with pytest.raises(EmulatedGPUError, match="would run at once instead of being recorded"):
            _row_major_matmul(cublas, handle, x, w, y)
        cublas.set_stream(handle, s.ptr)
        with pytest.raises(EmulatedGPUError, match="no workspace"):
            _row_major_matmul(cublas, handle, x, w, y)
        cublas.set_workspace(handle, workspace.data.ptr, workspace.nbytes)
        _row_major_matmul(cublas, handle, x, w, y)
        graph = s.end_capture()
        graph.launch()
        assert y.get().tolist() == [[4.0] * 4] * 4
        op = cublas.Operation
        with pytest.raises(cublas.cuBLASError, match="INVALID_VALUE.*ldc"):
            cublas.sgemm(handle, op.N, op.N, 4, 4, 4, al.ctypes.data, w.data.ptr, 4, x.data.ptr, 4, be.ctypes.data,
                         y.data.ptr, 2)
        with pytest.raises(EmulatedGPUError, match="pointer mode is HOST"):
            cublas.sgemm(handle, op.N, op.N, 4, 4, 4, x.data.ptr, w.data.ptr, 4, x.data.ptr, 4, be.ctypes.data,
                         y.data.ptr, 4)
        with pytest.raises(EmulatedGPUError, match="C overlaps A"):
            cublas.sgemm(handle, op.N, op.N, 4, 4, 4, al.ctypes.data, y.data.ptr, 4, x.data.ptr, 4, be.ctypes.data,
                         y.data.ptr, 4)
        with pytest.raises(TypeError, match="integer"):
            cublas.set_stream(handle, s)
        with pytest.raises(cublas.cuBLASError, match="INVALID_VALUE"):
            cublas.set_workspace(handle, workspace.data.ptr + 8, 64)
    with cp.cuda.Device(1), pytest.raises(EmulatedGPUError, match="handle belongs to gpu\\(0\\)"):
        _row_major_matmul(cublas, handle, x, w, y)
    dead = cublas.create()
    cublas.destroy(dead)
    with pytest.raises(cublas.cuBLASError, match="NOT_INITIALIZED"):
        cublas.get_stream(dead)


def test_gemm_device_pointer_mode_reads_alpha_at_each_launch(blas):
    cp, s, pool, cublas, handle, _ = blas
    cublas.set_pointer_mode(handle, cublas.PointerMode.DEVICE)
    with s:
        x, w = cp.ones((2, 3), np.float32), cp.ones((3, 2), np.float32)
        alpha, beta = cp.full((), 1.0, np.float32), cp.zeros((), np.float32)
        y = cp.empty((2, 2), np.float32)
    op = cublas.Operation

    def fn():
        cublas.sgemm(handle, op.N, op.N, 2, 2, 3, alpha.data.ptr, w.data.ptr, 2, x.data.ptr, 3, beta.data.ptr,
                     y.data.ptr, 2)

    graph, _ = _capture(cp, s, pool, fn)
    with s:
        for value in (1.0, 2.5):
            alpha.fill(value)
            graph.launch()
            assert y.get().tolist() == [[3 * value] * 2] * 2


# -- signatures ---------------------------------------------------------------------------------------
# nvmath-python 1.0.0's signatures (its cublas.pyi / documentation), for the subset the double offers.
_NVMATH_1_0_0 = {
    "create": "()", "destroy": "(handle)", "set_stream": "(handle, stream_id)", "get_stream": "(handle)",
    "set_workspace": "(handle, workspace, workspace_size_in_bytes)", "set_math_mode": "(handle, mode)",
    "get_math_mode": "(handle)", "set_pointer_mode": "(handle, mode)", "get_pointer_mode": "(handle)",
    "check_status": "(status)",
    "sgemm": "(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)",
    "dgemm": "(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)",
    "gemm_ex": "(handle, transa, transb, m, n, k, alpha, a, atype, lda, b, btype, ldb, beta, c, ctype, ldc, "
               "compute_type, algo)",
    "gemm_strided_batched_ex": "(handle, transa, transb, m, n, k, alpha, a, atype, lda, stride_a, b, btype, ldb, "
                               "stride_b, beta, c, ctype, ldc, stride_c, batch_count, compute_type, algo)",
}
_NVMATH_ENUMS = {
    "Operation": {"N": 0, "T": 1, "C": 2, "CONJG": 3},
    "PointerMode": {"HOST": 0, "DEVICE": 1},
    "Status": {"SUCCESS": 0, "NOT_INITIALIZED": 1, "ALLOC_FAILED": 3, "INVALID_VALUE": 7, "ARCH_MISMATCH": 8,
               "MAPPING_ERROR": 11, "EXECUTION_FAILED": 13, "INTERNAL_ERROR": 14, "NOT_SUPPORTED": 15,
               "LICENSE_ERROR": 16},
    "ComputeType": {"COMPUTE_16F": 64, "COMPUTE_32F": 68, "COMPUTE_32F_FAST_TF32": 77, "COMPUTE_64F": 70},
    "GemmAlgo": {"DFALT": -1, "ALGO0": 0, "ALGO23": 23, "DEFAULT_TENSOR_OP": 99, "ALGO15_TENSOR_OP": 115,
                 "AUTOTUNE": 999},
    "Math": {"DEFAULT_MATH": 0, "TF32_TENSOR_OP_MATH": 3, "DISALLOW_REDUCED_PRECISION_REDUCTION": 16},
}


def test_nvmath_cublas_signatures_follow_nvmath_1_0_0(cp):
    cublas = importlib.import_module("nvmath.bindings.cublas")
    for name, sig in _NVMATH_1_0_0.items():
        params = inspect.signature(getattr(cublas, name)).parameters
        assert f"({', '.join(params)})" == sig, name
    for enum_name, members in _NVMATH_ENUMS.items():
        enum = getattr(cublas, enum_name)
        for member, value in members.items():
            assert int(getattr(enum, member)) == value, f"{enum_name}.{member}"
    assert importlib.import_module("nvmath").CudaDataType.CUDA_R_16BF == 14
    assert set(cublas.__all__) == set(_NVMATH_1_0_0) | set(_NVMATH_ENUMS) | {"AtomicsMode", "cuBLASError"}

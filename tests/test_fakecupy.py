"""The CuPy double (mxlite._emulation.fakecupy): NumPy parity, the four strictness rules, memory (its names and
signatures are held to the real CuPy's in tests/test_real_apis.py)."""

from __future__ import annotations

import gc
import types

import numpy as np
import pytest

from mxlite._emulation import install as emu
from mxlite._emulation.fakecupy import _rawmodule

EmulatedGPUError = emu.EmulatedGPUError


# -- install ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, 17, -1, 2.0, True, "2"])
def test_install_rejects_bad_counts(bad):
    with pytest.raises(ValueError, match="1 to 16"):
        emu.install(bad)


def test_install_puts_every_module_path(cp):
    import cupy  # noqa: PLC0415
    import cupy.cuda.nccl  # noqa: PLC0415
    import cupy.cuda.runtime  # noqa: PLC0415
    import cupy.lib.stride_tricks  # noqa: PLC0415
    import cupyx  # noqa: PLC0415
    from cupy.cuda import nccl  # noqa: PLC0415

    assert cupy is cp and nccl is cupy.cuda.nccl and cupyx.scatter_add
    assert emu.emulated_gpu_count() == 4
    assert cupy.cuda.runtime.getDeviceCount() == 4
    props = cupy.cuda.runtime.getDeviceProperties(3)
    assert props["name"] == b"Emulated GPU (mxlite)" and props["totalGlobalMem"] > 0 and props["major"] >= 7
    assert cupy.cuda.runtime.deviceCanAccessPeer(0, 1)
    with pytest.raises(cupy.cuda.runtime.CUDARuntimeError):
        cupy.cuda.Device(4)


# -- NumPy parity -----------------------------------------------------------------------------------
_A = np.arange(1, 13, dtype=np.float32).reshape(3, 4) / 7
_B = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
_I = np.array([2, 0, 1])
PARITY = [
    ("exp", lambda xp, a, b: xp.exp(a)), ("log", lambda xp, a, b: xp.log(a)), ("sqrt", lambda xp, a, b: xp.sqrt(a)),
    ("tanh", lambda xp, a, b: xp.tanh(b)), ("maximum", lambda xp, a, b: xp.maximum(a, b)),
    ("minimum", lambda xp, a, b: xp.minimum(a, 0.5)), ("abs", lambda xp, a, b: xp.abs(b)),
    ("sign", lambda xp, a, b: xp.sign(b)), ("sum", lambda xp, a, b: xp.sum(a, axis=1)),
    ("mean", lambda xp, a, b: a.mean()), ("max", lambda xp, a, b: b.max(axis=0)),
    ("argmax", lambda xp, a, b: xp.argmax(b, axis=1)), ("argmin", lambda xp, a, b: xp.argmin(b)),
    ("isfinite", lambda xp, a, b: xp.isfinite(a / b)), ("all", lambda xp, a, b: xp.all(a > 0)),
    ("any", lambda xp, a, b: (b > 1).any()), ("matmul", lambda xp, a, b: xp.matmul(a, b.T)),
    ("dot", lambda xp, a, b: a.dot(b.T)), ("einsum", lambda xp, a, b: xp.einsum("ij,kj->ik", a, b)),
    ("where", lambda xp, a, b: xp.where(b > 0, a, b)), ("clip", lambda xp, a, b: xp.clip(b, -1, 1)),
    ("stack", lambda xp, a, b: xp.stack([a, b])), ("concatenate", lambda xp, a, b: xp.concatenate([a, b], axis=1)),
    ("take", lambda xp, a, b: xp.take(a, xp.asarray(_I), axis=0)),
    ("fancy", lambda xp, a, b: a[xp.asarray(_I)]), ("slice", lambda xp, a, b: a[1:, ::2]),
    ("mask", lambda xp, a, b: a[b > 0]), ("astype", lambda xp, a, b: a.astype(np.float16)),
    ("reshape", lambda xp, a, b: a.reshape(4, 3)), ("ravel", lambda xp, a, b: b.T.ravel()),
    ("view", lambda xp, a, b: a.view(np.uint32)), ("cumsum", lambda xp, a, b: xp.cumsum(a, axis=0)),
    ("sort", lambda xp, a, b: xp.sort(b, axis=0)), ("pad", lambda xp, a, b: xp.pad(a, 1)),
    ("broadcast_to", lambda xp, a, b: xp.broadcast_to(a[0], (2, 4))),
    ("expand_dims", lambda xp, a, b: xp.expand_dims(a, 0)), ("swapaxes", lambda xp, a, b: xp.swapaxes(a, 0, 1)),
    ("norm", lambda xp, a, b: xp.linalg.norm(a)), ("rint", lambda xp, a, b: xp.rint(b)),
    ("count_nonzero", lambda xp, a, b: xp.count_nonzero(b > 0)), ("nonzero", lambda xp, a, b: xp.nonzero(b > 0)),
    ("flatnonzero", lambda xp, a, b: xp.flatnonzero(b)), ("unique", lambda xp, a, b: xp.unique(xp.rint(b))),
    ("take_along_axis", lambda xp, a, b: xp.take_along_axis(a, xp.argsort(b, axis=1), axis=1)),
    ("split", lambda xp, a, b: xp.split(a, 2, axis=1)), ("zeros_like", lambda xp, a, b: xp.zeros_like(a)),
    ("ones_like", lambda xp, a, b: xp.ones_like(a, dtype=np.int32)), ("full", lambda xp, a, b: xp.full((2,), 3.5)),
    ("full_like", lambda xp, a, b: xp.full_like(a, 7)), ("arange", lambda xp, a, b: xp.arange(5, dtype=np.int64)),
    ("array", lambda xp, a, b: xp.array([[1, 2], [3, 4]], dtype=np.float32)),
    ("ascontiguousarray", lambda xp, a, b: xp.ascontiguousarray(a.T)), ("copy", lambda xp, a, b: a.copy()),
    ("pow", lambda xp, a, b: a ** 2 - b / 3 + 1), ("neg", lambda xp, a, b: -b), ("cmp", lambda xp, a, b: a >= b),
    ("scalar_rsub", lambda xp, a, b: 1 - a), ("partition", lambda xp, a, b: xp.partition(b.ravel(), 3)[3]),
]


@pytest.mark.parametrize("name,fn", PARITY, ids=[p[0] for p in PARITY])
def test_numpy_parity(cp, name, fn):
    expected = fn(np, _A, _B)
    got = fn(cp, cp.asarray(_A), cp.asarray(_B))
    if isinstance(expected, (tuple, list)):
        assert len(got) == len(expected)
        pairs = list(zip(got, expected))
    else:
        pairs = [(got, expected)]
    for g, e in pairs:
        assert isinstance(g, cp.ndarray), type(g)
        host = g.get()
        assert host.dtype == np.asarray(e).dtype, (name, host.dtype, np.asarray(e).dtype)
        np.testing.assert_allclose(host, e, rtol=1e-6, err_msg=name)


def test_inplace_ops_and_setitem(cp):
    a = cp.asarray(_A.copy())
    a += 1
    a *= cp.asarray(_B)
    a[0] = 0
    a[1, :2] = np.array([5, 6], dtype=np.float32)  # host values: an h2d copy, as CuPy allows
    ref = (_A + 1) * _B
    ref[0] = 0
    ref[1, :2] = [5, 6]
    np.testing.assert_allclose(a.get(), ref, rtol=1e-6)
    x = cp.zeros(5, np.float32)
    import cupyx  # noqa: PLC0415

    cupyx.scatter_add(x, cp.asarray(np.array([0, 0, 3])), cp.asarray(np.array([1, 2, 3], np.float32)))
    assert x.get().tolist() == [3, 0, 0, 3, 0]
    cp.put_along_axis(x[None], cp.asarray(np.array([[1]])), 9.0, axis=1)
    assert x.get()[1] == 9


def test_scalars_and_host_conversions(cp):
    a = cp.asarray(np.array([1.5, 2.5], np.float32))
    s = a.sum()
    assert isinstance(s, cp.ndarray) and s.shape == ()
    assert float(s) == 4.0 and s.item() == 4.0 and bool(s) and int(a[0]) == 1
    assert cp.asnumpy(a).tolist() == [1.5, 2.5]
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(a)
    with pytest.raises(TypeError):
        a + np.ones(2)
    with pytest.raises(TypeError):
        np.ones(2) * a
    with pytest.raises(TypeError):
        cp.concatenate([a, np.ones(2)])
    assert (a * np.float32(2)).get().tolist() == [3, 5]  # NumPy scalars are fine


def test_signature_is_cupys(cp):
    with pytest.raises(TypeError, match="CuPy's signature"):
        cp.sum(cp.ones(3), initial=1)  # NumPy has `initial`, CuPy does not
    with pytest.raises(TypeError):
        cp.ones(3).sum(where=True)


def test_empty_is_poisoned(cp):
    assert np.isnan(cp.empty(4, np.float32).get()).all()
    assert (cp.empty(2, np.int32).get() == -1).all()


def test_bfloat16_as_uint16_bits(cp):
    bits = cp.asarray(np.array([0x3F80, 0x4000], np.uint16))  # 1.0, 2.0
    assert bits.dtype == np.uint16 and bits.view(np.int16).get().tolist() == [0x3F80, 0x4000]


# -- devices and streams ----------------------------------------------------------------------------
def test_device_context_and_placement(cp):
    assert cp.cuda.Device().id == 0
    with cp.cuda.Device(2) as dev:
        a = cp.zeros(3)
        assert dev.id == 2 and a.device.id == 2 and a.data.device_id == 2
        with cp.cuda.Device(1):
            assert cp.ones(1).device.id == 1
        assert cp.cuda.Device().id == 2
    assert cp.cuda.Device().id == 0
    cp.cuda.Device(3).use()
    assert cp.cuda.runtime.getDevice() == 3
    cp.cuda.Device(0).use()


def test_rule1_op_on_array_of_another_device_raises(cp):
    with cp.cuda.Device(1):
        a = cp.arange(6, dtype=np.float32).reshape(2, 3)
    where = r"float32\[2, 3\] \(alloc #\d+ on gpu\(1\)\).*current device is gpu\(0\)"
    with pytest.raises(EmulatedGPUError, match=where):
        a * 2
    with pytest.raises(EmulatedGPUError):
        cp.exp(a)
    with pytest.raises(EmulatedGPUError):
        cp.zeros(3)[0:2] + a[0, :2]
    with pytest.raises(EmulatedGPUError):
        a[0] = 1
    with pytest.raises(EmulatedGPUError, match="peer copy: read-after-write"):
        cp.asarray(a)  # legal, but gpu(0)'s stream is not ordered after gpu(1)'s write of `a`
    cp.cuda.Device(1).synchronize()
    b = cp.asarray(a)  # a peer copy onto gpu(0): legal
    c = a.copy()
    assert b.device.id == 0 and c.device.id == 0 and b.get().tolist() == a.get().tolist()
    assert emu.counters()[0]["p2p_copies"] == 2


class _StubKernel:
    """A host kernel with a signature: (const float* x, float* y, int n) -> y = 2x."""

    signature = [("ptr", "f", 4, True), ("ptr", "f", 4, False), ("value", "i", 4, False)]

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        x, y, n = args
        y._a[:int(n)] = 2 * x._a[:int(n)]


class _StubModule:
    def __init__(self, code, options, names):
        self.names = names

    def get_function(self, name):
        return _StubKernel()


@pytest.fixture
def stub_hostcuda(monkeypatch):
    monkeypatch.setattr(_rawmodule, "_host_module", lambda code, options, names: _StubModule(code, options, names))


def test_rawmodule_launch_rules(cp, stub_hostcuda):
    mod = cp.RawModule(code="...", options=("-std=c++17",), name_expressions=("twice<float>",))
    mod.compile()
    k = mod.get_function("twice<float>")
    x = cp.arange(4, dtype=np.float32)
    y = cp.zeros(4, np.float32)
    k((1,), (32,), (x, y, np.int32(4)))
    assert y.get().tolist() == [0, 2, 4, 6]
    assert emu.counters()[0]["kernel_launches"] == {"twice<float>": 1}
    with cp.cuda.Device(1):
        z = cp.zeros(4, np.float32)
    with pytest.raises(EmulatedGPUError, match="launch of kernel twice<float>.*gpu\\(1\\)"):
        k((1,), (32,), (x, z, np.int32(4)))
    s = cp.cuda.Stream(non_blocking=True)
    k((1,), (32,), (x, y, np.int32(4)), stream=s)  # writes y on s
    with pytest.raises(EmulatedGPUError, match="read-after-write"):
        k((1,), (32,), (y, x, np.int32(4)))  # reads y on the null stream: no wait
    cp.cuda.get_current_stream().wait_event(s.record())
    k((1,), (32,), (y, x, np.int32(4)))
    with pytest.raises(TypeError, match="host NumPy array"):
        k((1,), (32,), (np.zeros(4, np.float32), y, np.int32(4)))


def test_rawmodule_with_the_real_host_build(cp):
    """A kernel compiled by mxlite.device._hostcuda (g++) runs through the double's launch checks."""
    hostcuda = pytest.importorskip("mxlite.device._hostcuda")
    src = ('extern "C" __global__ void twice(const float* x, float* y, int n) {'
           " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }")
    try:
        kernel = cp.RawModule(code=src, options=("-std=c++17",)).get_function("twice")
    except getattr(hostcuda, "HostCudaSetupError", RuntimeError) as exc:
        pytest.skip(f"no host CUDA build here: {exc}")
    x = cp.arange(5, dtype=np.float32)
    y = cp.zeros(5, np.float32)
    kernel((1,), (32,), (x, y, np.int32(5)))
    assert y.get().tolist() == [0, 2, 4, 6, 8]
    with cp.cuda.Device(1), pytest.raises(EmulatedGPUError, match="launch of kernel twice"):
        kernel((1,), (32,), (x, y, np.int32(5)))


def test_rule2_read_after_write_needs_event_wait(cp):
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with s1:
        x = cp.ones(8, np.float32)
        x *= 3
    with s2, pytest.raises(EmulatedGPUError, match=r"read-after-write.*float32\[8\].*stream"):
        x + 1
    ev = cp.cuda.Event(disable_timing=True)
    ev.record(s1)
    s2.wait_event(ev)
    with s2:
        y = x + 1  # ordered now
    s2.synchronize()
    assert y.get().tolist() == [4.0] * 8


def test_rule2_write_after_read_needs_event_wait(cp):
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    x = cp.ones(8, np.float32)
    ready = cp.cuda.get_current_stream().record()
    s1.wait_event(ready)
    s2.wait_event(ready)
    with s1:
        total = x.sum()  # a read of x on s1
    with s2, pytest.raises(EmulatedGPUError, match="write-after-read"):
        x[...] = 0
    s2.wait_event(s1.record())
    with s2:
        x[...] = 0
    s2.synchronize()
    s1.synchronize()
    assert float(total) == 8.0


def test_rule2_tracks_byte_ranges_not_whole_buffers(cp):
    """Disjoint slices of one buffer on two streams do not race (a bucket reduced while backward writes
    the next gradient); overlapping ones do, and a view that crosses devices is legal until it is used."""
    arena = cp.zeros(16, np.float32)
    s1 = cp.cuda.Stream(non_blocking=True)
    s1.wait_event(cp.cuda.get_current_stream().record())
    with s1:
        arena[:8] += 1  # the "bucket", on the communication stream
    arena[8:] = 2  # backward, on the null stream: other bytes
    with pytest.raises(EmulatedGPUError, match=r"read-after-write.*bytes \[0, 64\).*bytes \[0, 32\)"):
        arena.sum()  # reads the bucket's bytes, which s1 wrote with nothing ordering that before
    cp.cuda.get_current_stream().wait_event(s1.record())
    assert float(arena.sum()) == 8 + 16
    with cp.cuda.Device(1):
        view = arena[4:12]  # metadata only: CuPy makes views of another device's array
        with pytest.raises(EmulatedGPUError, match="current device is gpu"):
            view + 1


def test_rule2_host_sync_orders_later_work(cp):
    s1 = cp.cuda.Stream(non_blocking=True)
    with s1:
        x = cp.ones(4)
    s1.synchronize()
    x += 1  # null stream: the host knew s1 complete before enqueueing this
    with s1:
        x2 = cp.ones(4)
    cp.cuda.Device(0).synchronize()
    x2 += 1
    with s1:
        x3 = cp.ones(4)
    ev = s1.record()
    ev.synchronize()
    x3 += 1
    assert x.get()[0] == x2.get()[0] == x3.get()[0] == 2


def test_rule3_free_while_peer_copy_may_use_it(cp):
    with cp.cuda.Device(1):
        s = cp.cuda.Stream(non_blocking=True)
    x = cp.ones(1000, np.float32)  # gpu(0), null stream
    src_ready = cp.cuda.get_current_stream().record()
    with cp.cuda.Device(1), s:
        s.wait_event(src_ready)
        y = cp.asarray(x)  # peer copy read on gpu(1)'s stream s
    alloc_id = x._mem.id
    del x
    gc.collect()
    with pytest.raises(EmulatedGPUError, match=rf"use after free.*alloc #{alloc_id}.*stream"):
        cp.empty(1000, np.float32)  # would reuse the block on gpu(0)'s null stream
    del y


def test_rule3_free_after_sync_is_fine(cp):
    with cp.cuda.Device(1):
        s = cp.cuda.Stream(non_blocking=True)
    x = cp.ones(1000, np.float32)
    ptr = x.data.ptr
    with cp.cuda.Device(1), s:
        s.wait_event(cp.cuda.get_current_stream(0).record())
        y = cp.asarray(x)
    del x
    s.synchronize()
    z = cp.empty(1000, np.float32)
    assert z.data.ptr == ptr  # the block came back
    assert y.device.id == 1


def test_rule3_wait_before_reuse_is_fine(cp):
    s = cp.cuda.Stream(non_blocking=True)
    x = cp.ones(100)
    s.wait_event(cp.cuda.get_current_stream().record())
    with s:
        y = x * 2
    del x
    cp.cuda.get_current_stream().wait_event(s.record())  # the null stream is after s's use now
    cp.empty(100)
    del y


def test_rule4_unsynchronised_host_read_raises(cp):
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        x = cp.arange(4, dtype=np.float32)
        x += 1
    for read in (lambda: x.get(), lambda: cp.asnumpy(x), lambda: float(x[0:1].sum()), lambda: x[0].item()):
        with pytest.raises(EmulatedGPUError, match="read-after-write"):
            read()
    with s:
        assert x.get().tolist() == [1, 2, 3, 4]  # .get() on the writer stream is ordered
    with s:
        x += 1
    s.synchronize()
    assert cp.asnumpy(x).tolist() == [2, 3, 4, 5] and bool(x[0] == 2)


def test_stream_api(cp):
    s = cp.cuda.Stream(non_blocking=True)
    assert s.ptr != 0 and cp.cuda.get_current_stream().ptr == 0
    with s:
        assert cp.cuda.get_current_stream() is s
    assert cp.cuda.get_current_stream() is not s
    ev = s.record()
    assert isinstance(ev, cp.cuda.Event)
    ev.synchronize()
    s.synchronize()
    assert emu.counters()[0]["host_syncs"] == 2


# -- memory -----------------------------------------------------------------------------------------
def test_pool_is_stream_ordered_and_counts_peak(cp):
    pool = cp.get_default_memory_pool()
    s1, s2 = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    gc.collect()
    emu.reset_counters()
    base = pool.used_bytes()
    assert emu.counters()[0]["bytes_in_use"] == base
    with s1:
        a = cp.empty(1024, np.float32)
    ptr = a.data.ptr
    assert pool.used_bytes() == base + 4096
    del a
    assert pool.used_bytes() == base and pool.free_bytes() >= 4096
    with s2:
        b = cp.empty(1024, np.float32)
    assert b.data.ptr != ptr  # another stream does not get s1's block
    with s1:
        c = cp.empty(1024, np.float32)
    assert c.data.ptr == ptr  # s1 does
    total = pool.total_bytes()
    del b, c
    pool.free_all_blocks()
    assert pool.total_bytes() < total and pool.used_bytes() == base
    counters = emu.counters()[0]
    assert counters["allocations"] == 3 and counters["peak_bytes"] - base == 8192
    with cp.cuda.Device(1):
        assert pool.used_bytes() == 0


def test_counters_count_copies_and_ops(cp):
    emu.reset_counters()
    a = cp.asarray(np.ones(10, np.float32))
    b = cp.exp(a)
    b.get()
    c = emu.counters()[0]
    assert (c["h2d_copies"], c["h2d_bytes"], c["d2h_copies"], c["d2h_bytes"]) == (1, 40, 1, 40)
    assert c["ops"]["exp"] == 1 and c["host_syncs"] == 1
    emu.reset_counters()
    assert emu.counters()[0]["h2d_copies"] == 0


def test_pointer_registry(cp):
    from mxlite._emulation.fakecupy import _memory  # noqa: PLC0415

    a = cp.zeros(10, np.float64)
    alloc, offset = _memory.resolve(a[3:].data.ptr, 7 * 8, 0)
    assert alloc is a._mem and offset == 24
    with pytest.raises(EmulatedGPUError, match="overflows"):
        _memory.resolve(a[3:].data.ptr, 8 * 8, 0)
    with pytest.raises(EmulatedGPUError, match="not inside any live allocation"):
        _memory.resolve(12345, 4)
    with pytest.raises(EmulatedGPUError, match="not on gpu\\(1\\)"):
        _memory.resolve(a.data.ptr, 8, 1)
    view = cp.ndarray((2,), np.float64, memptr=a.data + 8)
    view[...] = 5
    assert a.get()[1:3].tolist() == [5, 5]
    strided = cp.lib.stride_tricks.as_strided(a, shape=(3, 2), strides=(16, 8))
    assert strided.shape == (3, 2) and strided.data.ptr == a.data.ptr


def test_using_allocator_sees_allocations(cp):
    sizes = []
    with cp.cuda.using_allocator(sizes.append):
        cp.zeros(16, np.float32)
    assert sizes == [64]


# -- random, dlpack ---------------------------------------------------------------------------------
def test_random_is_seeded_and_native_float32(cp):
    r1, r2 = cp.random.RandomState(7), cp.random.RandomState(7)
    a = r1.normal(0, 1, size=(100,), dtype=np.float32)
    b = r2.normal(0, 1, size=(100,), dtype=np.float32)
    assert a.dtype == np.float32 and (a.get() == b.get()).all()
    u = r1.uniform(-1, 1, size=1000, dtype=np.float32).get()
    assert u.dtype == np.float32 and -1 <= u.min() and u.max() < 1
    i = r1.randint(0, 5, size=50).get()
    assert 0 <= i.min() and i.max() < 5
    assert sorted(r1.permutation(6).get().tolist()) == list(range(6))
    with cp.cuda.Device(2):
        assert r1.normal(size=3).device.id == 2


def test_dlpack_reports_cuda_and_round_trips(cp):
    a = cp.arange(6, dtype=np.float32).reshape(2, 3)
    assert a.__dlpack_device__() == (2, 0)
    with pytest.raises((RuntimeError, BufferError, TypeError)):
        np.from_dlpack(a)
    b = cp.from_dlpack(a.T.__dlpack__() if False else a.__dlpack__())
    c = cp.from_dlpack(types.SimpleNamespace(__dlpack__=a.__dlpack__, __dlpack_device__=a.__dlpack_device__))
    b[0, 0] = 42
    assert a.get()[0, 0] == 42 and c.get()[0, 0] == 42 and c.shape == (2, 3)
    t = cp.from_dlpack(a.T.toDlpack())
    assert t.shape == (3, 2) and t.get()[1, 0] == a.get()[0, 1]

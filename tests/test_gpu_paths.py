"""GPU code paths checked without a GPU: what the host passes to the kernels, what the twins compute, and
the stream protocol of device copies, against a recording stand-in for CuPy.

The kernels themselves run in the GPU-marked tests (test_fused_update.py); these tests pin what those
comparisons depend on: the same float32 constants on both sides, NaN kept through clipping, no FMA
contraction, one kernel object per (file, name, device), and copies ordered on both devices' streams.
"""

from __future__ import annotations

import ctypes
import re
import sys
import types
import weakref
from typing import Any

import numpy as np
import pytest

import mxlite as mx
from mxlite.device import copy as _copy
from mxlite.device import devices as device_module
from mxlite.device import kernels as _kernels
from mxlite.gluon.data.dataloader import default_batchify_fn
from mxlite.ops import creation as _creation
from mxlite.optimizer import adam, sgd
from mxlite.optimizer._fused import HP, ArenaPlan, Segment, fused_rule, one_minus
from tests.test_trainer_fused import FUSED


# -- 1. derived constants: host table, kernel signature and twin agree ---------------------------------
def _kernel_scalar_names(kernel: str) -> list[str]:
    """Names of the float value parameters a kernel takes after its tables, from optimizers.cu."""
    source = _kernels.kernel_source("optimizers.cu")
    match = re.search(rf"__global__ void {kernel}\((.*?)\)\s*{{", source, re.S)
    assert match, kernel
    params = [p.strip() for p in match.group(1).split(",")]
    after = params[[i for i, p in enumerate(params) if p.startswith("CHUNK_TABLES")][0] + 1:]
    return [p.split()[-1] for p in after if p.startswith("float ")]


def _launches(name: str, kwargs: dict[str, Any]) -> list[tuple[str, tuple[Any, ...]]]:
    """(kernel, scalars) of every launch the fused rule makes, captured by a stand-in launcher."""
    opt = getattr(mx.optimizer, name)(**kwargs)
    rule = fused_rule(opt, np.float32)
    launches = []

    class Run:
        def __call__(self, kernel, buffers, scalars, sums=None):
            launches.append((kernel, tuple(scalars)))

        def sums(self):
            return None

    states = {n: np.zeros(3, np.float32) for n in rule.states(opt)}
    rule.launch(Run(), opt, np.zeros(3, np.float32), np.zeros(3, np.float32), states, None)
    return launches


@pytest.mark.parametrize("name,kwargs", FUSED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(FUSED)])
def test_every_launch_matches_its_kernel_signature_and_passes_one_minus_constants(name, kwargs):
    """Scalar count equals the kernel's; every ``one_minus_x`` is float32(1 - x) computed in float64."""
    for kernel, scalars in _launches(name, kwargs):
        names = _kernel_scalar_names(kernel)
        assert len(scalars) == len(names), (kernel, names, scalars)
        values = {n: np.float32(v) for n, v in zip(names, scalars)}  # as Launcher packs them
        for n, v in values.items():
            if n.startswith("one_minus_"):
                base = dict(zip(names, scalars))[n[len("one_minus_"):]]
                assert v.tobytes() == np.float32(1.0 - base).tobytes(), (kernel, n)


def test_one_minus_rounds_once_and_differs_from_the_float32_difference():
    """The fix in numbers: 1 - 0.999 rounded once is not 1.0f - 0.999f (1.3e-5 apart, 1e-6 is the tolerance)."""
    assert one_minus(0.999) == np.float32(1.0 - 0.999)
    device_style = np.float32(1) - np.float32(0.999)
    assert abs(float(device_style) / float(one_minus(0.999)) - 1) > 1e-5
    assert not any(re.search(r"1(\.0?)?f\s*-", line) for line in _kernels.kernel_source("optimizers.cu").splitlines()
                   if not line.lstrip().startswith("//")), "a kernel computes 1.0f - x itself"


@pytest.mark.parametrize("name", ["Adam", "AdamW", "LAMB"])
def test_rule_twins_multiply_by_the_kernels_constants(name):
    """One float32 step from zero moments: m = (1-b1)*G and v = ((1-b2)*G)*G bit for bit (the launch constants)."""
    rng = np.random.default_rng(0)
    g = rng.normal(size=64).astype(np.float32)
    opt = getattr(mx.optimizer, name)(learning_rate=0.01, beta1=0.9, beta2=0.999)
    m, v = np.zeros(64, np.float32), np.zeros(64, np.float32)
    opt.step(0, rng.normal(size=64).astype(np.float32), g, (m, v), 1)
    np.testing.assert_array_equal(m, one_minus(0.9) * g)
    np.testing.assert_array_equal(v, one_minus(0.999) * g * g)


def test_rmsprop_adadelta_signum_twins_use_the_same_constants():
    g = np.random.default_rng(1).normal(size=64).astype(np.float32)
    w = np.ones(64, np.float32)
    n = np.zeros(64, np.float32)
    mx.optimizer.RMSProp(rho=0.95).step(0, w.copy(), g, n, 1)
    np.testing.assert_array_equal(n, one_minus(0.95) * g * g)
    acc_g, acc_d = np.zeros(64, np.float32), np.zeros(64, np.float32)
    mx.optimizer.AdaDelta(rho=0.95).step(0, w.copy(), g, (acc_g, acc_d), 1)
    np.testing.assert_array_equal(acc_g, one_minus(0.95) * g * g)
    mom = np.zeros(64, np.float32)
    mx.optimizer.Signum(momentum=0.9).step(0, w.copy(), g, mom, 1)
    np.testing.assert_array_equal(mom, -(one_minus(0.9) * g))


def test_adam_twin_uses_the_launch_constants():
    """The hand-tuned Adam twin: m and v after one step from zeros, bit for bit."""
    g = np.random.default_rng(2).normal(size=10).astype(np.float32)
    plan = ArenaPlan([Segment(0, 0, 10)])
    hp = np.zeros((1, HP), np.float32)
    hp[0, 0] = 0.01
    w, m, v = np.ones(10, np.float32), np.zeros(10, np.float32), np.zeros(10, np.float32)
    adam.adam_twin(plan, w, g, m, v, None, hp, 0.9, 0.999, 1e-8, 1.0, None)
    np.testing.assert_array_equal(m, one_minus(0.9) * g)
    np.testing.assert_array_equal(v, one_minus(0.999) * g * g)


# -- 2. NaN through clipping ----------------------------------------------------------------------------
def test_twins_keep_a_nan_gradient_through_clipping():
    """clip(NaN) is NaN in every twin (the kernels' clamp_keep_nan does the same)."""
    g = np.array([np.nan, 2.0, -2.0, 0.1], np.float32)
    w = np.zeros(4, np.float32)
    mx.optimizer.SGD(learning_rate=1.0, clip_gradient=0.5).step(0, w, g, None, 1)
    assert np.isnan(w[0]) and w[1:].tolist() == pytest.approx([-0.5, 0.5, -0.1])
    plan = ArenaPlan([Segment(0, 0, 4)])
    hp = np.zeros((1, HP), np.float32)
    hp[0, 0] = 1.0
    w = np.zeros(4, np.float32)
    sgd.sgd_twin(plan, w, g, None, None, hp, 0.0, 1.0, 0.5)
    assert np.isnan(w[0]) and w[1:].tolist() == pytest.approx([-0.5, 0.5, -0.1])
    w, m, v = np.zeros(4, np.float32), np.zeros(4, np.float32), np.zeros(4, np.float32)
    adam.adam_twin(plan, w, g, m, v, None, hp, 0.9, 0.999, 1e-8, 1.0, 0.5)
    assert np.isnan(w[0]) and np.isfinite(w[1:]).all()
    w = np.array([np.nan, 5.0, -5.0, 0.0], np.float32)
    mx.optimizer.RMSProp(clip_weights=1.0).step(0, w, np.zeros(4, np.float32), np.zeros(4, np.float32), 1)
    assert np.isnan(w[0]) and w[1:].tolist() == [1.0, -1.0, 0.0]


def test_kernels_clamp_only_through_nan_keeping_helpers():
    """No bare fminf/fmaxf outside the helpers that keep NaN (they map NaN to the other operand)."""
    for name in ("optimizers.cu", "compression.cu"):
        code = [line for line in _kernels.kernel_source(name).splitlines() if not line.lstrip().startswith("//")]
        bare = [line for line in code if re.search(r"\bf(min|max)f\(", line) and "_keep_nan(float" not in line
                and "return x != x ? x :" not in line]
        assert not bare, (name, bare)
    source = _kernels.kernel_source("optimizers.cu")
    assert "g = clamp_keep_nan(g, -clip, clip)" in source
    assert "return x != x ? x : (float)((x > 0.0f) - (x < 0.0f))" in source  # sign_of(NaN) is NaN, as np.sign


# -- 3. no FMA contraction --------------------------------------------------------------------------------
def test_kernels_compile_without_fma_contraction():
    assert "--fmad=false" in _kernels.NVRTC_OPTIONS


# -- get_kernel: one kernel object per (file, name, device) ------------------------------------------------
@pytest.fixture
def fresh_kernel_caches():
    _kernels._function.cache_clear()
    yield
    _kernels._function.cache_clear()


def test_get_kernel_compiles_one_module_per_variant_and_device_once(monkeypatch, fresh_kernel_caches):
    """A GPU compiles only the variant it launches (its own module, named alone): the first Adam step does not
    wait for the other 93 variants of optimizers.cu."""
    made: list[tuple[Any, ...]] = []

    class RawModule:
        def __init__(self, code, options, name_expressions):
            made.append(("module", options, name_expressions))
            self.names = name_expressions

        def compile(self):
            pass

        def get_function(self, name):
            made.append(("function", name))
            return object()

    class Device:
        def __init__(self, i):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    fake = types.SimpleNamespace(RawModule=RawModule, cuda=types.SimpleNamespace(Device=Device))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    names = ("adam_update<float>", "sgd_update<float>")
    gpu0, gpu1 = types.SimpleNamespace(device_id=0, is_gpu=True), types.SimpleNamespace(device_id=1, is_gpu=True)
    first = _kernels.get_kernel("optimizers.cu", names[0], gpu0, names)
    assert _kernels.get_kernel("optimizers.cu", names[0], gpu0, list(names)) is first
    assert _kernels.get_kernel("optimizers.cu", names[1], gpu0, names) is not first
    _kernels.get_kernel("optimizers.cu", names[0], gpu1, names)
    assert [m for m in made if m[0] == "module"] == [("module", _kernels.NVRTC_OPTIONS, (names[0],)),
                                                     ("module", _kernels.NVRTC_OPTIONS, (names[1],)),
                                                     ("module", _kernels.NVRTC_OPTIONS, (names[0],))]
    assert len([m for m in made if m[0] == "function"]) == 3
    with pytest.raises(ValueError, match="nosuch"):
        _kernels.get_kernel("optimizers.cu", "nosuch<float>", gpu0, names)


# -- a recording stand-in for the few CuPy calls the copy layer makes ---------------------------------------
class FakeCuPy(types.ModuleType):
    """Arrays on numbered devices, one current stream per device, events; every call appended to ``log``."""

    def __init__(self, count: int = 2) -> None:
        super().__init__("cupy")
        self.log: list[tuple[Any, ...]] = []
        self.current = [0]
        self.memory: dict[int, Any] = {}
        fake = self

        class Stream:
            def __init__(self, dev):
                self.dev, self.ptr = dev, 1000 + dev

            def wait_event(self, event):
                fake.log.append(("wait", self.dev, event.name))

            def record(self, event=None):
                event = event or Event()
                event.record(self)
                return event

        class Event:
            made = 0

            def __init__(self, block=False, disable_timing=False, interprocess=False):
                Event.made += 1
                self.name = f"event{Event.made}"

            def record(self, stream=None):
                fake.log.append(("record", stream.dev, self.name))

        class Device:
            def __init__(self, i=None):
                self.id = fake.current[-1] if i is None else i

            def __enter__(self):
                fake.current.append(self.id)
                return self

            def __exit__(self, *exc):
                fake.current.pop()

        self.streams = [Stream(i) for i in range(count)]

        def memcpy_peer_async(dst, dst_device, src, src_device, size, stream):
            fake.log.append(("peer", fake.current[-1], stream, src_device, dst_device, size))
            target, source = fake.memory[dst](), fake.memory[src]()
            target.values[...] = source.values

        runtime = types.SimpleNamespace(memcpyPeerAsync=memcpy_peer_async, getDeviceCount=lambda: count)
        self.cuda = types.SimpleNamespace(Device=Device, Event=Event, runtime=runtime,
                                          get_current_stream=lambda: fake.streams[fake.current[-1]])

    def array_on(self, values: np.ndarray, dev: int, name: str) -> FakeArray:
        return FakeArray(self, values, dev, name)

    def ascontiguousarray(self, a: FakeArray) -> FakeArray:
        if a.values.flags.c_contiguous:
            return a
        self.log.append(("pack", self.current[-1], a.dev))
        return FakeArray(self, np.ascontiguousarray(a.values), self.current[-1], "packed")

    def empty(self, shape, dtype) -> FakeArray:
        self.log.append(("alloc", self.current[-1]))
        return FakeArray(self, np.empty(shape, dtype), self.current[-1], "out")


class FakeArray:
    """A device array of :class:`FakeCuPy`: values on the host, a pointer, a device; logs reads and frees."""

    __cuda_array_interface__: dict[str, Any] = {}

    def __init__(self, fake: FakeCuPy, values: np.ndarray, dev: int, name: str) -> None:
        self.fake, self.values, self.dev, self.name = fake, values, dev, name
        self.data = types.SimpleNamespace(ptr=id(self))
        fake.memory[id(self)] = weakref.ref(self)

    shape = property(lambda self: self.values.shape)
    dtype = property(lambda self: self.values.dtype)
    nbytes = property(lambda self: self.values.nbytes)
    device = property(lambda self: types.SimpleNamespace(id=self.dev))

    def get(self) -> np.ndarray:
        self.fake.log.append(("get", self.fake.current[-1], self.dev))
        return self.values.copy()

    def __del__(self) -> None:
        self.fake.log.append(("free", self.name))


@pytest.fixture
def fake_gpus(monkeypatch):
    """Two stand-in GPUs: ``mx.gpu(0)``/``mx.gpu(1)`` work and compute with :class:`FakeCuPy`."""
    fake = FakeCuPy(2)
    monkeypatch.setattr(device_module, "_cupy_status", lambda: (fake, 2, ""))
    return fake


# -- 4. the peer-copy protocol ---------------------------------------------------------------------------------
def test_peer_copy_orders_both_streams_and_keeps_the_packed_source_until_the_source_waits(fake_gpus):
    fake = fake_gpus
    src = fake.array_on(np.arange(12, dtype=np.float32).reshape(3, 4).T, 0, "src")  # not contiguous
    out = _copy.copy_between(src, mx.gpu(0), mx.gpu(1), copy=False)
    np.testing.assert_array_equal(out.values, src.values)
    assert out.dev == 1 and out.values.flags.c_contiguous
    log = [entry for entry in fake.log if entry != ("free", "src")]
    (_, _, ready), (_, _, copied) = [e for e in log if e[0] == "record"]
    assert log == [
        ("pack", 0, 0),                      # contiguous copy made on the source device ...
        ("record", 0, ready),                # ... before the event on the source's stream
        ("wait", 1, ready),                  # the destination's stream waits for it
        ("alloc", 1),
        ("peer", 1, 1001, 0, 1, 48),         # the copy runs on the destination's stream
        ("record", 1, copied),
        ("wait", 0, copied),                 # the source's stream waits for the copy
        ("free", "packed"),                  # only then is the packed temporary released
    ]


def test_peer_copy_of_a_contiguous_source_packs_nothing_and_frees_nothing(fake_gpus):
    fake = fake_gpus
    src = fake.array_on(np.arange(6, dtype=np.float16), 1, "src")
    out = _copy.copy_between(src, mx.gpu(1), mx.gpu(0), copy=True)
    np.testing.assert_array_equal(out.values, src.values)
    kinds = [e[0] for e in fake.log]
    assert kinds == ["record", "wait", "alloc", "peer", "record", "wait"]
    assert fake.log[1][1] == 0 and fake.log[5][1] == 1  # destination waits on source, source on destination


def test_device_to_host_reads_run_under_the_arrays_device(fake_gpus):
    """``.get()`` synchronises the current device's stream: it must be the array's device."""
    fake = fake_gpus
    a = fake.array_on(np.ones(3, np.float32), 1, "a")
    np.testing.assert_array_equal(_copy.as_host(a), np.ones(3))
    np.testing.assert_array_equal(_copy.copy_between(a, mx.gpu(1), mx.cpu(0), copy=False), np.ones(3))
    np.testing.assert_array_equal(mx.Tensor(a, mx.gpu(1)).asnumpy(), np.ones(3))
    assert [e for e in fake.log if e[0] == "get"] == [("get", 1, 1)] * 3


def test_comm_and_kvstore_copy_through_the_device_layer():
    """Architecture: device-to-device copies live in mxlite/device/copy.py, not in autograd."""
    import mxlite.autograd.tensor as tensor_module
    import mxlite.comm.base as base
    import mxlite.comm.compression as compression
    import mxlite.kvstore._reduce as reduce_module
    import mxlite.kvstore.kvstore as kvstore_module

    assert not hasattr(tensor_module, "_transfer")
    for module in (base, compression, reduce_module, kvstore_module, tensor_module):
        assert module.copy_between is _copy.copy_between, module.__name__
    from mxlite.formats.archive import as_host

    assert as_host is _copy.as_host


# -- 5. device arrays where NumPy would raise ----------------------------------------------------------------
class HostReadable:
    """A device array of some library: ``get()`` but no ``__array__`` (np.asarray would fail on it)."""

    def __init__(self, values: np.ndarray) -> None:
        self._values = values

    def get(self) -> np.ndarray:
        return self._values.copy()


def test_split_and_load_takes_an_array_with_get_but_no___array__():
    data = HostReadable(np.arange(12, dtype=np.float32).reshape(6, 2))
    parts = mx.split_and_load(data, [mx.cpu(0), mx.cpu(1)])
    assert [p.shape for p in parts] == [(3, 2), (3, 2)]
    np.testing.assert_array_equal(np.concatenate([p.asnumpy() for p in parts]), data.get())
    assert [p.shape for p in mx.parallel.split_data([[1, 2], [3, 4]], 2)] == [(1, 2), (1, 2)]


def test_constant_initializer_takes_a_device_array():
    arr = np.zeros((2, 2), np.float32)
    mx.init.Constant(HostReadable(np.full((2, 2), 3.0, np.float32))).init_weight("w", arr)
    assert (arr == 3).all()


def test_default_batchify_reads_cupy_samples_to_the_host(fake_gpus):
    fake = fake_gpus
    samples = [fake.array_on(np.full(3, i, np.float32), 1, f"s{i}") for i in range(2)]
    batch = default_batchify_fn(samples)
    assert batch.device == mx.cpu(0)
    np.testing.assert_array_equal(batch.asnumpy(), [[0, 0, 0], [1, 1, 1]])
    assert ("get", 1, 1) in fake.log


def test_split_and_load_slices_a_cupy_array_on_its_device(fake_gpus, monkeypatch):
    """A CuPy batch is not sent through np.asarray (a TypeError): each slice is copied from its GPU."""
    seen = []
    monkeypatch.setattr("mxlite.ops.creation.copy_between",
                        lambda data, src, dst, copy: seen.append((type(data).__name__, src, dst)) or np.asarray(
                            data.values if isinstance(data, FakeArray) else data))

    class Sliceable(FakeArray):
        def __getitem__(self, index):
            return Sliceable(self.fake, self.values[index], self.dev, "slice")

    batch = Sliceable(fake_gpus, np.arange(8, dtype=np.float32).reshape(4, 2), 0, "batch")
    mx.split_and_load(batch, [mx.cpu(0), mx.cpu(1)])
    assert seen == [("Sliceable", mx.gpu(0), mx.cpu(0)), ("Sliceable", mx.gpu(0), mx.cpu(1))]


# -- DLPack capsules -------------------------------------------------------------------------------------
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", ctypes.c_uint8 * 4), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32 * 2), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


def test_capsule_device_offsets_follow_dlpack_h():
    device_type = _DLTensor.device.offset + _DLDevice.device_type.offset
    assert _creation._DEVICE_TYPE_OFFSET[b"dltensor"] == _DLManagedTensor.dl_tensor.offset + device_type
    assert _creation._DEVICE_TYPE_OFFSET[b"dltensor_versioned"] == (_DLManagedTensorVersioned.dl_tensor.offset
                                                                     + device_type)


def test_from_dlpack_takes_legacy_and_versioned_cpu_capsules():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    legacy = mx.from_dlpack(a.__dlpack__())
    assert legacy.device == mx.cpu(0) and np.shares_memory(legacy._data, a)
    versioned = mx.from_dlpack(a.__dlpack__(max_version=(1, 0)))
    np.testing.assert_array_equal(versioned.asnumpy(), a)
    capsule = a.__dlpack__()
    mx.from_dlpack(capsule)
    with pytest.raises(ValueError, match="used_dltensor"):
        mx.from_dlpack(capsule)  # consumed
    with pytest.raises(TypeError, match="PyCapsule"):
        mx.from_dlpack([1, 2])


_CAPSULE_NAME = b"dltensor"  # outlives the capsules below (PyCapsule keeps the pointer, not a copy)


def test_from_dlpack_hands_a_cuda_capsule_itself_to_cupy(fake_gpus, monkeypatch):
    managed = _DLManagedTensor()
    managed.dl_tensor.device.device_type, managed.dl_tensor.device.device_id = 2, 1  # kDLCUDA, GPU 1
    new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
        ("PyCapsule_New", ctypes.pythonapi))
    capsule = new(ctypes.addressof(managed), _CAPSULE_NAME, None)
    received = []

    def from_dlpack(x):
        received.append(x)
        return fake_gpus.array_on(np.zeros(2, np.float32), 1, "imported")

    fake_gpus.from_dlpack = from_dlpack
    monkeypatch.setitem(sys.modules, "cupy", fake_gpus)
    t = mx.from_dlpack(capsule)
    assert received == [capsule] and t.device == mx.gpu(1)


# -- random numbers on a GPU: drawn in the requested dtype ------------------------------------------------
@pytest.mark.parametrize("dtype,drawn", [(np.float32, np.float32), (np.float64, np.float64),
                                         (np.float16, np.float32)])
def test_gpu_random_draws_in_the_requested_dtype(dtype, drawn):
    calls = []

    class Generator:
        def normal(self, a, b, size, dtype):
            calls.append(np.dtype(dtype))
            return np.zeros(size, dtype)

    gpu = types.SimpleNamespace(device_type="gpu")
    out = mx.random._draw(gpu, Generator(), "normal", 0.0, 1.0, (3,), np.dtype(dtype))
    assert calls == [np.dtype(drawn)] and out.dtype == np.dtype(dtype)

"""The host CUDA build (mxlite.device._hostcuda): g++-compiled kernels launched like CuPy's RawKernel.

Small kernels written here check the emulated built-ins (barriers, shuffles, shared memory,
atomics, indices, half types, inline PTX), the scheduler (seeded interleaving, deadlock
detection, faults), argument checking and the build cache; the last tests compile the real
``kernels/*.cu`` with every name expression the project uses and compare one launch of each
file with NumPy.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
import warnings

import numpy as np
import pytest

from mxlite.device import _hostcuda as hostcuda
from mxlite.device._hostcuda import (
    HostCudaBuildError,
    HostCudaLaunchError,
    HostCudaSetupError,
    HostModule,
    Param,
    launch,
)

REDUCE = r"""
// Sum of x over the grid into *out: warp shuffles, a shared array, a barrier, one atomic per block.
__device__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    return v;
}
__global__ void block_sum(const float *__restrict__ x, float *out, int n) {
    __shared__ float totals[32];
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += x[i];
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0) totals[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < (blockDim.x >> 5) ? totals[threadIdx.x] : 0.0f;
        v = warp_sum(v);
        if (threadIdx.x == 0) atomicAdd(out, v);
    }
}
__global__ void count_sum(const int *x, unsigned long long *total, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        atomicAdd(total, (unsigned long long)x[i]);
}
"""

RACE = r"""
// Each thread reads its neighbour's shared slot: right only with the barrier.
__global__ void neighbour(int *out, int base) {
    __shared__ int s[64];
    s[threadIdx.x] = base + threadIdx.x;
#ifdef WITH_BARRIER
    __syncthreads();
#endif
    out[blockIdx.x * 64 + threadIdx.x] = s[(threadIdx.x + 1) % 64];
}
"""


@pytest.fixture(scope="module")
def reduce_module() -> HostModule:
    return HostModule(REDUCE, name="reduce.cu")


def test_block_reduction_is_exact(reduce_module: HostModule) -> None:
    kernel = reduce_module.get_function("block_sum")
    assert kernel.signature == (Param("ptr", "float", 4, True), Param("ptr", "float", 4, False),
                                Param("value", "int", 4, False))
    x = np.arange(5000, dtype=np.float32) % 7  # small integers: every order of summation is exact
    for seed in range(4):
        out = np.zeros(1, np.float32)
        kernel((5,), (256,), (x, out, np.int32(x.size)), seed=seed)
        assert out[0] == x.sum()
    counts = np.arange(3000, dtype=np.int32)
    total = np.zeros(1, np.uint64)
    reduce_module.get_function("count_sum")(3, 128, (counts, total, np.int32(counts.size)))
    assert int(total[0]) == int(counts.sum())


def test_missing_barrier_races_and_barrier_fixes_it() -> None:
    racy = HostModule(RACE, name="race.cu").get_function("neighbour")
    safe = HostModule(RACE, ("-DWITH_BARRIER",), name="race.cu").get_function("neighbour")
    wrong = 0
    for seed in range(8):
        base = 1000 * (seed + 1)
        expected = np.tile(base + (np.arange(64) + 1) % 64, 3)
        out = np.zeros(3 * 64, np.int32)
        racy(3, 64, (out, np.int32(base)), seed=seed)
        wrong += not np.array_equal(out, expected)
        out[:] = 0
        safe(3, 64, (out, np.int32(base)), seed=seed)
        np.testing.assert_array_equal(out, expected)
    assert wrong > 0  # the interleaving is real: without the barrier some order breaks it


def test_orders_differ_between_seeds() -> None:
    source = r"""
    __global__ void order(int *log, int *next) { log[atomicAdd(next, 1)] = blockIdx.x * blockDim.x + threadIdx.x; }
    """
    kernel = HostModule(source, name="order.cu").get_function("order")
    orders = set()
    for seed in range(4):
        log, nxt = np.zeros(64, np.int32), np.zeros(1, np.int32)
        kernel(4, 16, (log, nxt), seed=seed)
        assert sorted(log) == list(range(64))
        orders.add(tuple(log))
    assert len(orders) > 1
    log2, nxt2 = np.zeros(64, np.int32), np.zeros(1, np.int32)
    kernel(4, 16, (log2, nxt2), seed=3)
    assert tuple(log2) in orders  # the same seed gives the same order


DEADLOCKS = r"""
__global__ void early_exit(float *x) {
    if (threadIdx.x < 16) return;
    __syncthreads();
    x[threadIdx.x] = 1.0f;
}
__global__ void split_barriers(float *x) {
    if (threadIdx.x & 1) {
        __syncthreads();
    } else {
        __syncthreads();
    }
}
__global__ void shuffle_vs_barrier(float *x) {
    float v = x[threadIdx.x];
    if (threadIdx.x < 8) v = __shfl_down_sync(0xffffffffu, v, 1);
    else __syncthreads();
    x[threadIdx.x] = v;
}
__global__ void lane_exits(float *x) {
    float v = x[threadIdx.x];
    if (threadIdx.x == 5) return;
    v += __shfl_xor_sync(0xffffffffu, v, 1);  // lane 5 exited: allowed, lane 4 reads its own value
    x[threadIdx.x] = v;
}
__global__ void traps(float *x) { if (blockIdx.x == 1 && threadIdx.x == 3) __trap(); }
__global__ void bad_pointer(float *x) { if (threadIdx.x == 7) ((float *)16)[0] = 1.0f; }
__global__ void divide(int *x) { x[threadIdx.x] = 10 / x[threadIdx.x]; }
__global__ void deep(float *x) {
    volatile char big[256 * 1024];  // more than a fiber's 64 KiB stack
    big[threadIdx.x] = 1;
    x[threadIdx.x] = big[threadIdx.x];
}
__global__ void bad_width(float *x) { x[threadIdx.x] = __shfl_sync(0xffffffffu, x[threadIdx.x], 0, 3); }
"""


@pytest.fixture(scope="module")
def deadlocks() -> HostModule:
    return HostModule(DEADLOCKS, name="deadlocks.cu")


def test_barrier_some_threads_skip_raises(deadlocks: HostModule) -> None:
    x = np.zeros(64, np.float32)
    with pytest.raises(HostCudaLaunchError) as info:
        deadlocks.get_function("early_exit")((2,), (64,), (x,))
    text = str(info.value)
    assert info.value.code == 1
    assert "early_exit" in text and "block (" in text
    assert "16-63: waiting at __syncthreads()" in text and "0-15: exited" in text


def test_divergent_barriers_and_mismatched_warp_ops_raise(deadlocks: HostModule) -> None:
    x = np.arange(32, dtype=np.float32)
    with pytest.raises(HostCudaLaunchError, match="different barriers"):
        deadlocks.get_function("split_barriers")(1, 32, (x,))
    with pytest.raises(HostCudaLaunchError, match=r"(?s)0-7: waiting at __shfl_down_sync.*8-31: waiting at "
                                                  r"__syncthreads"):
        deadlocks.get_function("shuffle_vs_barrier")(1, 32, (x,))


def test_exited_lanes_leave_a_shuffle_completable(deadlocks: HostModule) -> None:
    x = np.arange(32, dtype=np.float32)
    deadlocks.get_function("lane_exits")(1, 32, (x,))
    expected = np.arange(32, dtype=np.float32) + (np.arange(32) ^ 1)
    expected[4] = 8.0  # its partner (lane 5) exited: the caller's own value comes back
    expected[5] = 5.0
    np.testing.assert_array_equal(x, expected)


def test_traps_faults_and_misuse_raise_instead_of_crashing(deadlocks: HostModule) -> None:
    x = np.ones(64, np.float32)
    with pytest.raises(HostCudaLaunchError, match=r"__trap\(\).*deadlocks.cu") as info:
        deadlocks.get_function("traps")(2, 32, (x,))
    assert "thread 3" in str(info.value) and info.value.code == 5
    with pytest.raises(HostCudaLaunchError, match="SIGSEGV.*thread 7") as info:
        deadlocks.get_function("bad_pointer")(1, 32, (x,))
    assert info.value.code == 2
    with pytest.raises(HostCudaLaunchError, match="SIGFPE"):
        deadlocks.get_function("divide")(1, 4, (np.array([1, 2, 0, 3], np.int32),))
    with pytest.raises(HostCudaLaunchError, match="thread 0 .*overflowed its 64 KiB stack"):
        deadlocks.get_function("deep")(1, 1, (x,))
    with pytest.raises(HostCudaLaunchError, match="width 3"):
        deadlocks.get_function("bad_width")(1, 32, (x,))
    deadlocks.get_function("lane_exits")(1, 32, (np.zeros(32, np.float32),))  # still usable afterwards


SHUFFLES = r"""
__global__ void shuffles(const int *x, int *out, int width) {
    const int t = threadIdx.x, v = x[t];
    out[0 * 64 + t] = __shfl_sync(0xffffffffu, v, (t * 7 + 3) % 32, width);
    out[1 * 64 + t] = __shfl_up_sync(0xffffffffu, v, 3, width);
    out[2 * 64 + t] = __shfl_down_sync(0xffffffffu, v, 3, width);
    out[3 * 64 + t] = __shfl_xor_sync(0xffffffffu, v, 5, width);
    out[4 * 64 + t] = __ballot_sync(0xffffffffu, v % 3 == 0);
    out[5 * 64 + t] = __any_sync(0xffffffffu, v == 40) + 2 * __all_sync(0xffffffffu, v >= 0);
    out[6 * 64 + t] = __syncthreads_count(v % 2);
    const unsigned half_warp = 0x0000ffffu << (t & 16);  // two groups of 16 lanes, each reading its first lane
    double d = __shfl_sync(half_warp, (double)v + 0.5, t & 16);
    out[7 * 64 + t] = (int)(d * 2);
}
"""


@pytest.mark.parametrize("width", [32, 8])
def test_shuffles_have_warp_semantics(width: int) -> None:
    kernel = HostModule(SHUFFLES, name="shuffles.cu").get_function("shuffles")
    x = (np.arange(64, dtype=np.int32) * 5 + 1) % 97
    out = np.zeros(8 * 64, np.int32)
    kernel(1, 64, (x, out, np.int32(width)))
    out = out.reshape(8, 64)
    t = np.arange(64)
    lane, warp = t % 32, t // 32
    seg = lane - lane % width
    src = warp * 32 + seg + ((t * 7 + 3) % 32) % width
    np.testing.assert_array_equal(out[0], x[src])
    up = np.where(lane - 3 >= seg, t - 3, t)
    np.testing.assert_array_equal(out[1], x[up])
    down = np.where(lane + 3 < seg + width, t + 3, t)
    np.testing.assert_array_equal(out[2], x[down])
    xor = np.where((lane ^ 5) < seg + width, warp * 32 + (lane ^ 5), t)
    np.testing.assert_array_equal(out[3], x[xor])
    ballots = [sum(1 << i for i in range(32) if x[w * 32 + i] % 3 == 0) for w in range(2)]
    np.testing.assert_array_equal(out[4].view(np.uint32), np.repeat(np.array(ballots, np.uint32), 32))
    anys = [int((x[w * 32:(w + 1) * 32] == 40).any()) for w in range(2)]
    np.testing.assert_array_equal(out[5], np.repeat(np.array(anys) + 2, 32))
    np.testing.assert_array_equal(out[6], np.full(64, (x % 2).sum()))
    leader = t - t % 16
    np.testing.assert_array_equal(out[7], 2 * x[leader] + 1)


def test_dynamic_shared_memory_sized_by_the_launch() -> None:
    source = r"""
    __global__ void reverse(float *x, int n) {
        extern __shared__ float buf[];
        for (int i = threadIdx.x; i < n; i += blockDim.x) buf[i] = x[blockIdx.x * n + i];
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) x[blockIdx.x * n + i] = buf[n - 1 - i];
    }
    __global__ void poisoned(unsigned *out) {
        extern __shared__ __align__(16) unsigned char raw[];
        out[threadIdx.x] = reinterpret_cast<unsigned *>(raw)[threadIdx.x];
    }
    """
    module = HostModule(source, name="dyn.cu")
    n = 3000
    x = np.arange(2 * n, dtype=np.float32)
    module.get_function("reverse")(2, 96, (x, np.int32(n)), shared_mem=4 * n)
    np.testing.assert_array_equal(x, np.concatenate([np.arange(n)[::-1], np.arange(n, 2 * n)[::-1]]))
    out = np.zeros(8, np.uint32)
    module.get_function("poisoned")(1, 8, (out,), shared_mem=32)
    assert (out == 0xFFFFFFFF).all()  # uninitialised shared memory reads as poison, not zeros
    with pytest.raises(ValueError, match="shared_mem"):
        module.get_function("reverse")(1, 32, (x, np.int32(n)), shared_mem=64 * 1024)


def test_extern_shared_at_namespace_scope_is_a_build_error() -> None:
    source = "extern __shared__ float buf[];\n__global__ void k(float *x) { x[0] = buf[0]; }\n"
    with pytest.raises(HostCudaBuildError, match="ns_shared.cu"):
        HostModule(source, name="ns_shared.cu").compile()


def test_multi_dimensional_grid_and_block() -> None:
    source = r"""
    __global__ void where(int *out) {
        const int bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        const int tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
        const int i = bx * blockDim.x * blockDim.y * blockDim.z + tx;
        out[4 * i + 0] = threadIdx.x * 100 + threadIdx.y * 10 + threadIdx.z;
        out[4 * i + 1] = blockIdx.x * 100 + blockIdx.y * 10 + blockIdx.z;
        out[4 * i + 2] = blockDim.x * 100 + blockDim.y * 10 + blockDim.z;
        out[4 * i + 3] = gridDim.x * 100 + gridDim.y * 10 + gridDim.z;
    }
    """
    kernel = HostModule(source, name="dims.cu").get_function("where")
    grid, block = (3, 2, 2), (4, 3, 2)
    out = np.full(4 * 12 * 24, -1, np.int32)
    kernel(grid, block, (out,))
    out = out.reshape(2, 2, 3, 2, 3, 4, 4)  # bz, by, bx, tz, ty, tx, field
    bz, by, bx, tz, ty, tx = np.indices(out.shape[:-1])
    np.testing.assert_array_equal(out[..., 0], tx * 100 + ty * 10 + tz)
    np.testing.assert_array_equal(out[..., 1], bx * 100 + by * 10 + bz)
    assert (out[..., 2] == 432).all() and (out[..., 3] == 322).all()
    single = np.zeros(4 * 5, np.int32)
    kernel(5, 1, (single,))  # plain ints are (n, 1, 1)
    np.testing.assert_array_equal(single.reshape(5, 4)[:, 1], np.arange(5) * 100)
    for bad_grid, bad_block in (((0,), (32,)), ((1,), (2048,)), ((1, 1, 1, 1), (32,)), ((1,), (32, 32, 2))):
        with pytest.raises(ValueError):
            kernel(bad_grid, bad_block, (out,))


ARGS = r"""
__global__ void take(float *x, const double *y, int n, float s, long long big, unsigned char *flags,
                     __half h, bool on, unsigned long long u) {
    if (threadIdx.x == 0) x[0] = s + (float)n + (float)big + (float)y[0] + __half2float(h) + (on ? 1.0f : 0.0f) +
                                 (float)u + (float)flags[0];
}
__global__ void maybe(const float *opt, float *out) { out[0] = opt ? opt[0] : -1.0f; }
"""


def test_argument_checks_name_kernel_position_and_type() -> None:
    module = HostModule(ARGS, name="args.cu")
    take = module.get_function("take")
    x, y, flags = np.zeros(1, np.float32), np.ones(1, np.float64), np.full(1, 2, np.uint8)
    good = [x, y, np.int32(3), np.float32(0.5), 10, flags, np.float16(0.25), True, np.uint64(7)]
    take(1, 32, tuple(good))
    assert x[0] == 0.5 + 3 + 10 + 1 + 0.25 + 1 + 7 + 2
    assert take.param_types[0] == "float*" and take.param_types[1] == "double const*"
    assert [p.kind for p in take.signature] == ["ptr", "ptr"] + ["value"] * 3 + ["ptr"] + ["value"] * 3
    bad_cases = [
        (2, np.zeros(3, np.int32), r"args\[2\].*`int`.*int32 array.*array where a value"),
        (3, np.float64(0.5), r"args\[3\].*`float`.*float64 scalar"),
        (3, 0.5, r"args\[3\].*`float`.*Python float"),
        (2, 3, r"args\[2\].*`int`.*Python int"),
        (0, np.zeros(3, np.int32), r"args\[0\].*`float\*`.*int32 array"),
        (1, np.zeros(3, np.float32), r"args\[1\].*`double const\*`.*float32 array"),
        (0, np.int32(0), r"args\[0\].*`float\*`.*int32 scalar"),
        (6, np.float32(0.25), r"args\[6\].*`__half`.*float32"),
        (7, 1, r"args\[7\].*`bool`.*Python int"),
    ]
    for i, value, pattern in bad_cases:
        args = list(good)
        args[i] = value
        with pytest.raises(TypeError, match=pattern) as info:
            take(1, 32, tuple(args))
        assert "'take'" in str(info.value)
    with pytest.raises(TypeError, match=r"'take' takes 9 arguments .* got 8"):
        take(1, 32, tuple(good[:-1]))
    read_only = np.zeros(1, np.float32)
    read_only.flags.writeable = False
    with pytest.raises(TypeError, match="read-only"):
        take(1, 32, (read_only, *good[1:]))
    with pytest.raises(KeyError, match="nope"):
        module.get_function("nope")


def test_null_pointer_from_an_eight_byte_zero() -> None:
    maybe = HostModule(ARGS, name="args.cu").get_function("maybe")
    out = np.zeros(1, np.float32)
    maybe(1, 1, (np.uint64(0), out))
    assert out[0] == -1.0
    maybe(1, 1, (np.array([4.5], np.float32), out))
    assert out[0] == 4.5


class FakeCupyArray:
    """What the emulated CuPy passes: ``.data.ptr`` (a host address) and ``.dtype``."""

    def __init__(self, array: np.ndarray) -> None:
        self.base = array
        self.dtype = array.dtype
        self.data = type("MemoryPointer", (), {"ptr": array.ctypes.data})()


def test_cupy_like_arrays_pass_their_pointer() -> None:
    maybe = HostModule(ARGS, name="args.cu").get_function("maybe")
    out = np.zeros(1, np.float32)
    maybe(1, 1, (FakeCupyArray(np.array([2.5], np.float32)), FakeCupyArray(out)))
    assert out[0] == 2.5
    with pytest.raises(TypeError, match=r"args\[0\].*float16 array"):
        maybe(1, 1, (FakeCupyArray(np.zeros(1, np.float16)), out))

    class Interface:
        def __init__(self, array: np.ndarray) -> None:
            self.__cuda_array_interface__ = {"data": (array.ctypes.data, False), "typestr": array.dtype.str,
                                             "shape": array.shape, "version": 3}

    source = np.array([7.0], np.float32)
    maybe(1, 1, (Interface(source), Interface(out)))
    assert out[0] == 7.0


TEMPLATES = r"""
struct twice { template <typename T> static __device__ T apply(T v) { return v + v; } };
struct square { template <typename T> static __device__ T apply(T v) { return v * v; } };
template <typename T, typename Op>
__global__ void map(const T *x, T *y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        y[i] = Op::apply(x[i]);
}
template <typename T> __global__ void fill(T *y, T v) { y[threadIdx.x] = v; }
"""


def test_templates_through_name_expressions() -> None:
    names = ["map<float, twice>", "map<double, square>", "map<int, square>", "fill<__half>", "fill<long long>"]
    module = HostModule(TEMPLATES, ("-std=c++17", "-ftz=true", "--fmad=false", "-arch=sm_80"), names,
                        name="templates.cu")
    x = np.arange(100, dtype=np.float32)
    y = np.zeros_like(x)
    module.get_function("map<float, twice>")(2, 32, (x, y, 100))
    np.testing.assert_array_equal(y, 2 * x)
    xd = np.arange(100, dtype=np.float64)
    yd = np.zeros_like(xd)
    module.get_function("map<double, square>")(1, 64, (xd, yd, np.int64(100)))
    np.testing.assert_array_equal(yd, xd * xd)
    with pytest.raises(TypeError, match=r"args\[0\].*`int const\*`.*float32"):
        module.get_function("map<int, square>")(1, 32, (x, y, 100))
    h = np.zeros(4, np.float16)
    module.get_function("fill<__half>")(1, 4, (h, np.float16(1.5)))
    assert (h == 1.5).all()
    q = np.zeros(4, np.int64)
    module.get_function("fill<long long>")(1, 4, (q, -(2**40)))
    assert (q == -(2**40)).all()
    with pytest.raises(ValueError, match="--frobnicate"):
        HostModule(TEMPLATES, ("--frobnicate",))


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16 bits (finite and infinite inputs)."""
    b = x.view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def test_half_and_bfloat16_conversions_match_numpy() -> None:
    source = r"""
    __global__ void convert(const float *x, __half *h, __nv_bfloat16 *b, float *back_h, float *back_b, long long n) {
        for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
            h[i] = __float2half_rn(x[i]);
            b[i] = __float2bfloat16_rn(x[i]);
            back_h[i] = __half2float(h[i]);
            back_b[i] = __bfloat162float(b[i]);
        }
    }
    """
    kernel = HostModule(source, name="convert.cu").get_function("convert")
    rng = np.random.default_rng(1)
    x = np.concatenate([
        rng.standard_normal(4000).astype(np.float32) * np.float32(1000),
        (rng.standard_normal(1000) * 1e-6).astype(np.float32),  # float16 subnormals
        np.array([0.0, -0.0, 65504.0, 65520.0, 1e6, np.inf, -np.inf, 1e-45, 2.0**-24, 2.0**-25, 3.0 * 2.0**-26],
                 np.float32),
        (np.arange(1, 2000, dtype=np.uint32) * 0x8000 + 0x3F800000).view(np.float32),  # bf16 ties and near-ties
    ]).astype(np.float32)
    n = x.size
    h, b = np.zeros(n, np.float16), np.zeros(n, np.uint16)
    back_h, back_b = np.zeros(n, np.float32), np.zeros(n, np.float32)
    kernel(4, 128, (x, h, b, back_h, back_b, np.int64(n)))
    with np.errstate(over="ignore"):  # float16 overflow to inf is part of the check
        x16 = x.astype(np.float16)
    np.testing.assert_array_equal(h.view(np.uint16), x16.view(np.uint16))
    np.testing.assert_array_equal(b, _bf16_bits(x))
    np.testing.assert_array_equal(back_h, x16.astype(np.float32))
    np.testing.assert_array_equal(back_b, (_bf16_bits(x).astype(np.uint32) << 16).view(np.float32))


def test_inline_ptx_is_ieee_and_unknown_ptx_is_a_build_error() -> None:
    source = r"""
    __device__ float add(float a, float b) {
        float r;
        asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
        return r;
    }
    __device__ float mul_ftz(float a, float b) {
        float r;
        asm volatile("mul.rn.ftz.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
        return r;
    }
    __global__ void ops(const float *a, const float *b, float *out, int n) {
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            out[i] = add(a[i], b[i]);
            float p;
            asm("mul.rn.f32 %0, %1, %2;" : "=f"(p) : "f"(a[i]), "f"(b[i]));
            out[n + i] = __fadd_rn(__fmul_rn(a[i], b[i]), 1.0f) - (p + 1.0f);  // no FMA contraction: 0
            out[2 * n + i] = mul_ftz(a[i], b[i]);
            unsigned lane;
            asm("mov.u32 %0, %%laneid;" : "=r"(lane));
            out[3 * n + i] = (float)lane;
        }
    }
    """
    kernel = HostModule(source, name="ptx.cu").get_function("ops")
    rng = np.random.default_rng(2)
    a = np.concatenate([rng.standard_normal(200), [1e-38, 3e-39, 3e-39]]).astype(np.float32)
    b = np.concatenate([rng.standard_normal(200), [1e-38, -1e-39, 2.0]]).astype(np.float32)
    out = np.zeros(4 * a.size, np.float32)
    kernel(1, 64, (a, b, out, np.int32(a.size)))
    n = a.size
    np.testing.assert_array_equal(out[:n], a + b)  # subnormal sums kept (no FTZ)
    assert out[n - 2] == a[-2] + b[-2] and out[n - 2] != 0.0  # a subnormal sum
    np.testing.assert_array_equal(out[n:2 * n], np.zeros(n, np.float32))
    products = a * b
    np.testing.assert_array_equal(out[2 * n:3 * n - 1], products[:-1])
    assert out[3 * n - 1] == 0.0 and products[-1] != 0.0  # .ftz: the subnormal input 3e-39 is flushed
    np.testing.assert_array_equal(out[3 * n:], (np.arange(n) % 64) % 32)
    bad = '__global__ void k(unsigned *x) { asm("lop3.b32 %0, %0, %0, %0, 0x96;" : "+r"(x[0])); }'
    with pytest.raises(HostCudaBuildError, match=r"lop3\.b32.*bad_ptx.cu:1|bad_ptx.cu:1.*lop3\.b32"):
        HostModule(bad, name="bad_ptx.cu").compile()


def _cached_libraries(cache: os.PathLike) -> list[str]:
    """The module libraries of a build cache: one ``<digest>/module.so`` per entry (support folders aside)."""
    return [name for name in os.listdir(cache)
            if not name.startswith(("support-", ".")) and os.path.isfile(os.path.join(cache, name, "module.so"))]


def test_build_cache_is_reused_and_compile_errors_name_the_file(tmp_path: os.PathLike,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MXLITE_HOSTCUDA_CACHE", str(tmp_path))
    source = f"// {uuid.uuid4()}\n__global__ void k(int *x) {{ x[threadIdx.x] = threadIdx.x; }}\n"
    before = hostcuda.build_count()
    HostModule(source, name="cached.cu").get_function("k")
    built = hostcuda.build_count()
    assert built > before  # the module (and, in a fresh cache, the shared header and runtime)
    assert len(_cached_libraries(tmp_path)) == 1
    monkeypatch.setattr(hostcuda.build, "_libraries", {})  # a fresh process: only the disk cache is left
    kernel = HostModule(source, name="cached.cu").get_function("k")
    assert hostcuda.build_count() == built  # no g++ run
    x = np.zeros(8, np.int32)
    kernel(1, 8, (x,))
    np.testing.assert_array_equal(x, np.arange(8))
    broken = "__global__ void k(float *x) {\n    x[0] = undeclared_thing;\n}\n"
    with pytest.raises(HostCudaBuildError, match=r"(?s)broken_kernel\.cu.*broken_kernel\.cu:2.*undeclared_thing"):
        HostModule(broken, name="broken_kernel.cu").compile()
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".build-")]  # no temporary left behind


def test_missing_header_package_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostcuda.build, "_include_dirs", None)
    monkeypatch.setattr(hostcuda.build, "_nvidia_roots", lambda: [])
    with pytest.raises(HostCudaSetupError, match="pip install nvidia-cuda-runtime nvidia-cuda-crt nvidia-cuda-cccl"):
        hostcuda.cuda_include_dirs()


def test_ucontext_fallback_scheduler(reduce_module: HostModule) -> None:
    kernel = HostModule(REDUCE, ("-DHOSTCUDA_USE_UCONTEXT",), name="reduce.cu").get_function("block_sum")
    x = np.arange(3000, dtype=np.float32) % 5
    out = np.zeros(1, np.float32)
    kernel(3, 128, (x, out, np.int32(x.size)), seed=9)
    assert out[0] == x.sum()


# -- the project's kernels -------------------------------------------------------------------------------
def _project_module(filename: str, names: tuple[str, ...]) -> HostModule:
    """The host library the emulated GPUs run for ``kernels/<filename>`` (one per file, every registered variant):
    the test session builds it once, ahead of the tests, so this reuses it."""
    from mxlite._emulation.fakecupy._rawmodule import _host_module
    from mxlite.device.kernels import NVRTC_OPTIONS, kernel_source

    return _host_module(kernel_source(filename), NVRTC_OPTIONS, names)


def test_optimizers_cu_compiles_and_sgd_matches_numpy() -> None:
    from mxlite.optimizer._fused import CHUNK, KERNELS, ArenaPlan, Segment, all_kernel_names

    module = _project_module("optimizers.cu", all_kernel_names())
    module.compile()
    for name in all_kernel_names():
        kernel = module.get_function(name)
        assert kernel.signature[0].kind == "ptr"
    rng = np.random.default_rng(3)
    sizes = (CHUNK + 1000, 37)
    plan = ArenaPlan([Segment(0, sizes[1], sizes[0]), Segment(sizes[0], 0, sizes[1])])
    n = sum(sizes)
    w = rng.standard_normal(n).astype(np.float32)
    grad = rng.standard_normal(n).astype(np.float32)
    mom = rng.standard_normal(n).astype(np.float32)
    hp = np.array([[0.1, 0.01, 0, 0], [0.05, 0.0, 0, 0]], np.float32)
    lr = np.repeat(hp[:, 0], sizes)
    wd = np.repeat(hp[:, 1], sizes)
    g = np.concatenate([grad[sizes[1]:], grad[:sizes[1]]])  # each weight's gradient (reverse order arena)
    rescale, clip, mu = np.float32(0.5), np.float32(0.3), np.float32(0.9)
    G = np.clip(rescale * g, -clip, clip) + wd * w
    m_ref = mu * mom - lr * G
    w_ref = w + m_ref
    kernel = module.get_function("sgd_update<float>")
    kernel((len(plan.chunk_seg),), (KERNELS.block_threads,),
           (w, grad, mom, np.uint64(0), plan.chunk_seg, plan.chunk_start, plan.chunk_end, plan.grad_shift(), hp,
            rescale, clip, mu, np.float32(0)))  # nesterov flag off: plain momentum
    np.testing.assert_array_equal(mom, m_ref)
    np.testing.assert_array_equal(w, w_ref)


def test_compression_cu_compiles_and_quantize_2bit_matches_numpy() -> None:
    from mxlite.comm.compression import KERNELS

    module = _project_module("compression.cu", KERNELS.names())
    module.compile()
    for name in KERNELS.names():
        module.get_function(name)
    rng = np.random.default_rng(4)
    n = 10007
    grad = rng.standard_normal(n).astype(np.float32)
    residual = (0.3 * rng.standard_normal(n)).astype(np.float32)
    th = np.float32(0.5)
    r = residual + grad
    pos, neg = r >= th, r <= -th
    r_ref = np.where(pos, r - th, np.where(neg, r + th, r)).astype(np.float32)
    codes = np.zeros(-(-n // 16) * 16, np.uint32)
    codes[:n] = np.where(pos, 3, np.where(neg, 2, 0))
    j = np.arange(16, dtype=np.uint32)
    shift = 8 * (j >> 2) + 6 - 2 * (j & 3)
    packed_ref = (codes.reshape(-1, 16) << shift).sum(axis=1, dtype=np.uint32)
    packed = np.zeros(packed_ref.size, np.uint32)
    module.get_function("quantize_2bit<float>")((3,), (256,), (grad, residual, packed, np.int64(n), th))
    np.testing.assert_array_equal(residual, r_ref)
    np.testing.assert_array_equal(packed, packed_ref)


# -- the serial build (CPU devices) ------------------------------------------------------------------
SERIAL = r"""
// A block-strided loop, a one-thread barrier and reduction forms, and the lone lane's warp operations.
__global__ void axpy(float *y, const float *x, float a, long long n) {
    for (long long i = blockIdx.x * 1024LL + threadIdx.x; i < min(n, (blockIdx.x + 1) * 1024LL); i += blockDim.x)
        y[i] = a * x[i] + y[i];
}
__global__ void lone_lane(int *out, int pred) {
    __syncthreads();
    out[0] = __syncthreads_count(pred);
    out[1] = __syncthreads_or(pred);
    out[2] = (int)__shfl_down_sync(1u, 41 + pred, 16);  // out of range: the lane's own value
    out[3] = (int)__ballot_sync(1u, pred);
    out[4] = (int)blockDim.x * 100 + (int)threadIdx.x * 10 + (int)gridDim.x;
}
__global__ void full_warp(float *out) { out[0] = __shfl_down_sync(0xffffffffu, out[0], 1); }
__global__ void trapping(int *out) { if (out[0] == 0) __trap(); }
// Arguments of every kind: arrays (a const one), scalars, a 24-byte struct by value, a null pointer.
struct Wide { double a, b, c; };
__global__ void gather(double *out, const float *x, const int *y, float s, long long n, Wide w, const float *none) {
    double total = (double)s + w.a + 10.0 * w.b + 100.0 * w.c + (none ? 1e9 : 0.0);
    for (long long i = 0; i < n; ++i) total += (double)x[i] * (double)y[i];
    out[0] = total;
}
// Waits until flag[0] is set (flag[1] = 1 says it is waiting): a launch that lasts as long as the caller wants.
__global__ void wait_for(volatile int *flag) {
    flag[1] = 1;
    while (flag[0] == 0) {}
}
__global__ void add_one(int *x) { x[0] += 1; }
// Each block records the grid it belongs to, after a little work (so that launches on two threads overlap).
__global__ void grid_of(int *out, int spin) {
    volatile int sink = 0;
    for (int i = 0; i < spin; ++i) sink = sink + i;
    out[blockIdx.x] = (int)gridDim.x;
}
"""


@pytest.fixture(scope="module")
def serial_module() -> HostModule:
    return HostModule(SERIAL, name="serial.cu", serial=True)


def test_serial_build_runs_one_thread_per_block_in_order(serial_module: HostModule) -> None:
    n = 5000
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, np.float32)
    serial_module.get_function("axpy")((5,), (1,), (y, x, np.float32(0.5), n))
    np.testing.assert_array_equal(y, np.float32(0.5) * x + np.float32(1))
    out = np.zeros(5, np.int32)
    serial_module.get_function("lone_lane")((3,), 1, (out, np.int32(1)))
    assert out.tolist() == [1, 1, 42, 1, 103]  # blockDim 1, threadIdx 0, gridDim 3


def test_serial_build_agrees_with_the_fiber_build_on_a_kernel(serial_module: HostModule) -> None:
    fibers = HostModule(SERIAL, name="serial.cu")
    x = np.random.default_rng(0).normal(size=3000).astype(np.float32)
    y_serial, y_fibers = np.ones_like(x), np.ones_like(x)
    serial_module.get_function("axpy")((3,), 1, (y_serial, x, np.float32(-1.25), x.size))
    fibers.get_function("axpy")((3,), 1, (y_fibers, x, np.float32(-1.25), x.size))
    assert y_serial.tobytes() == y_fibers.tobytes()


def test_serial_build_refuses_what_needs_real_threads(serial_module: HostModule) -> None:
    with pytest.raises(ValueError, match="serial host build.*block must be 1"):
        serial_module.get_function("axpy")((1,), (32,), (np.ones(4, np.float32), np.ones(4, np.float32),
                                                        np.float32(1), 4))
    with pytest.raises(HostCudaLaunchError, match="mask 0xffffffff.*only lane 0 exists") as err:
        serial_module.get_function("full_warp")((1,), 1, (np.ones(1, np.float32),))
    assert err.value.code == 6
    with pytest.raises(HostCudaLaunchError, match=r"kernel 'trapping' \(serial host build\), block \(0,0,0\).*__trap")\
            as err:
        serial_module.get_function("trapping")((2,), 1, (np.zeros(1, np.int32),))
    assert err.value.code == 5
    serial_module.get_function("trapping")((2,), 1, (np.ones(1, np.int32),))  # the module still works


def test_serial_and_fiber_builds_are_cached_apart(tmp_path: os.PathLike, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MXLITE_HOSTCUDA_CACHE", str(tmp_path))
    source = SERIAL + f"\n// {uuid.uuid4()}\n"
    HostModule(source, name="a.cu", serial=True).compile()
    HostModule(source, name="a.cu").compile()
    assert len(_cached_libraries(tmp_path)) == 2


WIDE = np.dtype([("a", "<f8"), ("b", "<f8"), ("c", "<f8")])


def _gather(kernel, x, y, s, wide):
    out = np.full(1, np.nan)
    kernel((1,), (1,), (out, x, y, np.float32(s), len(y), np.array(wide, WIDE)[()], np.uint64(0)))
    return out[0]


def test_serial_launch_packs_every_kind_of_argument(serial_module: HostModule) -> None:
    """Launch arguments take fast paths for NumPy arrays and scalars: the same addresses, bytes and checks."""
    gather = serial_module.get_function("gather")
    base = np.arange(20, dtype=np.float32)
    y = np.array([1, 2, 3], np.int32)
    assert _gather(gather, base, y, 0.5, (1, 2, 3)) == 0.5 + 321 + (0 + 2 + 6)
    strided = base[4::2]  # not contiguous: the address of its first element (4.0), as before
    assert _gather(gather, strided, y, 0.25, (0, 0, 0)) == 0.25 + (4 + 10 + 18)
    frozen = base[1:].copy()
    frozen.flags.writeable = False  # read-only: fine for `const float *`
    assert _gather(gather, frozen, y, 0, (2, 0, 1)) == 102 + (1 + 4 + 9)
    assert _gather(gather, base, np.zeros(0, np.int32), 1.5, (0, 0, 0)) == 1.5  # an empty array
    out = np.zeros(1)
    out.flags.writeable = False
    with pytest.raises(TypeError, match=r"args\[0\].*read-only"):
        gather((1,), (1,), (out, base, y, np.float32(0), 3, np.zeros((), WIDE)[()], np.uint64(0)))
    with pytest.raises(TypeError, match=r"args\[1\].*`float const\*`.*float64 array"):
        _gather(gather, base.astype(np.float64), y, 0, (0, 0, 0))
    with pytest.raises(TypeError, match=r"args\[3\].*`float`.*float64 scalar"):
        gather((1,), (1,), (np.zeros(1), base, y, np.float64(0), 3, np.zeros((), WIDE)[()], np.uint64(0)))
    assert _gather(gather, base, y, 2.0, (5, 6, 7)) == 2 + 765 + 8  # after the errors, still right


def test_serial_launches_from_two_threads_keep_their_arguments_apart(serial_module: HostModule) -> None:
    """Each thread packs its launch arguments in its own buffers: concurrent launches never mix them."""
    gather = serial_module.get_function("gather")
    results: dict[int, list[float]] = {}

    def work(k: int) -> None:
        x = np.full(50, k, np.float32)
        y = np.ones(50, np.int32)
        results[k] = [_gather(gather, x, y, k, (k, 0, 0)) - 52 * k for _ in range(500)]  # s + w.a + 50 k

    threads = [threading.Thread(target=work, args=(k,)) for k in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {k: set(v) for k, v in results.items()} == {1: {0.0}, 2: {0.0}, 3: {0.0}}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_serial_launch_works_in_a_child_forked_during_another_threads_launch(serial_module: HostModule) -> None:
    """A child forked while another thread is inside a launch must not inherit the launch lock held."""
    wait_for, add_one = serial_module.get_function("wait_for"), serial_module.get_function("add_one")
    flag = np.zeros(2, np.int32)
    thread = threading.Thread(target=wait_for, args=((1,), (1,), (flag,)))
    thread.start()
    try:
        while flag[1] == 0:
            time.sleep(0.001)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # forking a process with threads
            pid = os.fork()
        if pid == 0:  # the child: one launch, then leave without running anything of pytest's
            code = 1
            try:
                x = np.zeros(1, np.int32)
                add_one((1,), (1,), (x,))
                code = 0 if x[0] == 1 else 2
            finally:
                os._exit(code)
        deadline = time.monotonic() + 15
        while (status := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if status[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on its first launch (the launch lock stayed held)")
        assert os.waitstatus_to_exitcode(status[1]) == 0
    finally:
        flag[0] = 1
        thread.join()


def test_launches_on_two_threads_run_at_once_each_with_its_own_grid(serial_module: HostModule) -> None:
    """Launches that keep to their thread (a budget of one) take no lock: one runs while another thread's
    launch is still inside its kernel, and each block sees its own launch's gridDim."""
    wait_for, add_one, grid_of = (serial_module.get_function(name) for name in ("wait_for", "add_one", "grid_of"))
    flag = np.zeros(2, np.int32)

    def wait_alone() -> None:
        with launch.on_this_thread():
            wait_for((1,), (1,), (flag,))

    waiting = threading.Thread(target=wait_alone)
    waiting.start()
    try:
        while flag[1] == 0:
            time.sleep(0.001)
        x = np.zeros(1, np.int32)
        done = threading.Thread(target=lambda: add_one((1,), (1,), (x,), threads=1))
        done.start()
        done.join(timeout=15)
        assert not done.is_alive(), "a one-thread launch waited for another thread's launch to end"
        assert x[0] == 1
    finally:
        flag[0] = 1
        waiting.join()
    failures: list[tuple[int, list[int]]] = []
    gate = threading.Barrier(2, timeout=10)

    def record(blocks: int) -> None:
        out = np.zeros(blocks, np.int32)
        gate.wait()
        with launch.on_this_thread():
            for _ in range(100):
                out[:] = 0
                grid_of((blocks,), (1,), (out, np.int32(200)))
                if not (out == blocks).all():
                    failures.append((blocks, sorted(set(out.tolist()))))
                    return

    threads_ = [threading.Thread(target=record, args=(blocks,)) for blocks in (37, 91)]
    for t in threads_:
        t.start()
    for t in threads_:
        t.join()
    assert failures == []


def test_pool_threads_that_join_a_launch_see_its_grid(serial_module: HostModule) -> None:
    """A launch spread over pool threads: every block, whichever thread ran it, sees the launch's gridDim."""
    grid_of = serial_module.get_function("grid_of")
    launch.set_spread(0, 0)
    try:
        _, pool_before = launch.spread_counts()
        for _ in range(200):  # until a pool thread has run blocks (a woken thread may find none left)
            out = np.zeros(257, np.int32)
            grid_of((257,), (1,), (out, np.int32(2000)), threads=2)
            assert (out == 257).all()
            if launch.spread_counts()[1] > pool_before:
                break
        assert launch.spread_counts()[1] > pool_before, "no pool thread ran a block in 200 spread launches"
    finally:
        launch.set_spread(-1, -1)


def test_an_unwritable_build_cache_is_a_clear_error(tmp_path: os.PathLike, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache folder that cannot be made is a HostCudaError naming it and MXLITE_HOSTCUDA_CACHE, not a bare OSError."""
    not_a_folder = os.path.join(tmp_path, "file")
    with open(not_a_folder, "w") as f:
        f.write("x")
    monkeypatch.setenv("MXLITE_HOSTCUDA_CACHE", os.path.join(not_a_folder, "cache"))
    source = SERIAL + f"\n// {uuid.uuid4()}\n"
    with pytest.raises(hostcuda.HostCudaError, match=r"host build cache .*file/cache.*MXLITE_HOSTCUDA_CACHE") as err:
        HostModule(source, name="a.cu", serial=True).compile()
    assert isinstance(err.value.__cause__, OSError)


def test_a_compiler_that_cannot_run_is_a_setup_error(tmp_path: os.PathLike, monkeypatch: pytest.MonkeyPatch) -> None:
    not_a_program = os.path.join(tmp_path, "g++")
    with open(not_a_program, "wb") as f:
        f.write(b"\x7fELF not really")
    os.chmod(not_a_program, 0o755)
    monkeypatch.setenv("MXLITE_HOSTCUDA_CXX", not_a_program)
    monkeypatch.setenv("MXLITE_HOSTCUDA_CACHE", str(tmp_path))
    monkeypatch.setattr(hostcuda.build, "_compiler_version", lambda cxx: "fake")
    monkeypatch.setattr(hostcuda.build, "_native_target", lambda cxx: "fake")
    with pytest.raises(HostCudaSetupError, match="cannot run the C\\+\\+ compiler"):
        HostModule(SERIAL + f"\n// {uuid.uuid4()}\n", name="a.cu", serial=True).compile()


def test_serial_builds_do_not_read_the_scheduling_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    """MXLITE_HOSTCUDA_SEED seeds the fiber build's schedules; a serial build has none, so a bad value is no error."""
    monkeypatch.setenv("MXLITE_HOSTCUDA_SEED", "not a number")
    with pytest.raises(ValueError, match="MXLITE_HOSTCUDA_SEED must be an integer"):
        HostModule(SERIAL, name="serial.cu")
    HostModule(SERIAL, name="serial.cu", serial=True).get_function("add_one")((1,), (1,), (np.zeros(1, np.int32),))


def _fake_compiler(folder: str, name: str, version: str) -> str:
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\necho {version}\n")
    os.chmod(path, 0o755)
    return path


def test_cache_keys_name_the_compiler_that_builds(tmp_path: os.PathLike) -> None:
    """Each compiler's own version goes into the key, not the first one a process happened to use."""
    old = _fake_compiler(str(tmp_path), "old-g++", "g++ 11.1")
    new = _fake_compiler(str(tmp_path), "new-g++", "g++ 14.2")
    assert "g++ 11.1" in hostcuda.build._compiler_version(old)
    assert "g++ 14.2" in hostcuda.build._compiler_version(new)


def test_serial_cache_key_follows_what_march_native_means(tmp_path: os.PathLike,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache shared by two machines: the same source and flags (-march=native), but what -march=native
    means differs, so each machine gets its own library; the same meaning shares one."""
    monkeypatch.setenv("MXLITE_HOSTCUDA_CACHE", str(tmp_path))
    source = SERIAL + f"\n// {uuid.uuid4()}\n"
    for target in ("-march= znver3\n-mavx512f [enabled]", "-march= znver3\n-mavx512f [enabled]",
                   "-march= znver3\n-mavx512f [disabled]"):
        monkeypatch.setattr(hostcuda.build, "_native_target", lambda cxx, t=target: t)
        HostModule(source, name="a.cu", serial=True).compile()
    assert len(_cached_libraries(tmp_path)) == 2

// Counter-based random numbers whose position lives on the device, so that a CUDA graph replaying a
// draw draws new numbers at every launch (dropout inside captured blocks). Driven by
// mxlite/ops/_philox.py, whose NumPy twins follow these kernels operation by operation.
//
//   dropout_mask<T, A>  mask[i] = u_i >= rate ? T(scale) : T(0), for i < n, where u_i is value i % 4
//                       of Philox4x32-10 at counter (offset + i / 4, 0) under the 64-bit key,
//                       turned into a float in [0, 1) as (word >> 8) * 2^-24 (exact in float32).
//                       key = state[0], offset = state[1]: read, never written, by this kernel
//   philox_advance      state[1] += counters (one thread): launched after dropout_mask, so every
//                       thread of the draw read the old offset (launches on one stream are ordered)
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): the counter
// (c0, c1, c2, c3) = (low and high words of the 64-bit counter, 0, 0), the key (k0, k1) = (low and
// high words of state[0]); ten rounds of
//   (hi0, lo0) = M0 * c0, (hi1, lo1) = M1 * c2 (32 x 32 -> 64-bit products),
//   c = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0),
// with the key bumped by (W0, W1) between rounds. Only integer operations: every target gives the
// twin's bits. The comparison is in float32 (rate rounded to float32 by the host); T(scale) is
// scale (given as A, rounded from float64 by the host) rounded to T.
//
// T is the mask's type (float, double, __half), A the type scale is passed in (float for float and
// __half, double for double). Every kernel takes its length and loops grid-stride over counters, so
// any grid size, one thread per block included (the serial host build), is correct.
// Expected macros: none.

#include <cuda_fp16.h>

namespace {

constexpr unsigned int kM0 = 0xD2511F53u;
constexpr unsigned int kM1 = 0xCD9E8D57u;
constexpr unsigned int kW0 = 0x9E3779B9u;
constexpr unsigned int kW1 = 0xBB67AE85u;

__device__ __forceinline__ long long first_index() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ long long grid_stride() { return (long long)gridDim.x * blockDim.x; }

struct Words {
    unsigned int w0, w1, w2, w3;
};

// Word k (0..3) by selects, not an indexed array (which would live in local memory).
__device__ __forceinline__ unsigned int word(const Words &r, int k) {
    return k == 0 ? r.w0 : (k == 1 ? r.w1 : (k == 2 ? r.w2 : r.w3));
}

__device__ __forceinline__ Words philox(unsigned long long counter, unsigned long long key) {
    unsigned int c0 = (unsigned int)counter, c1 = (unsigned int)(counter >> 32), c2 = 0u, c3 = 0u;
    unsigned int k0 = (unsigned int)key, k1 = (unsigned int)(key >> 32);
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += kW0;
            k1 += kW1;
        }
        const unsigned long long p0 = (unsigned long long)kM0 * c0;
        const unsigned long long p1 = (unsigned long long)kM1 * c2;
        const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;
        const unsigned int n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
        c0 = n0;
        c1 = (unsigned int)p1;
        c2 = n2;
        c3 = (unsigned int)p0;
    }
    Words out;
    out.w0 = c0;
    out.w1 = c1;
    out.w2 = c2;
    out.w3 = c3;
    return out;
}

template <typename T> __device__ __forceinline__ T narrow(float x);
template <> __device__ __forceinline__ float narrow<float>(float x) { return x; }
template <> __device__ __forceinline__ __half narrow<__half>(float x) { return __float2half_rn(x); }
template <typename T> __device__ __forceinline__ T narrow(double x);
template <> __device__ __forceinline__ double narrow<double>(double x) { return x; }

}  // namespace

template <typename T, typename A>
__global__ void dropout_mask(const unsigned long long *__restrict__ state, T *__restrict__ mask, long long n,
                             float rate, A scale) {
    const unsigned long long key = state[0], offset = state[1];
    const T kept = narrow<T>(scale), dropped = narrow<T>(A(0));
    const long long counters = (n + 3) / 4;
    for (long long j = first_index(); j < counters; j += grid_stride()) {
        const Words r = philox(offset + (unsigned long long)j, key);
        const long long start = j * 4;
        const int count = (int)(n - start < 4 ? n - start : 4);
        for (int k = 0; k < count; ++k) {
            const float u = (float)(word(r, k) >> 8) * 5.9604644775390625e-08f;  // 2^-24
            mask[start + k] = u >= rate ? kept : dropped;
        }
    }
}

__global__ void philox_advance(unsigned long long *__restrict__ state, unsigned long long counters) {
    if (first_index() == 0) state[1] += counters;
}

// No explicit instantiations: each variant is compiled when named. On a GPU, mxlite compiles one
// variant per module (NVRTC name_expressions: mxlite/device/kernels.py); the host build and the nvcc check
// in the tests take the full list of names from the Python driver.

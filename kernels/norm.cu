// Batch normalisation in one launch per direction: every channel's statistics, the normalisation and
// the running statistics (forward), and the three gradients (backward).
//
//   batch_norm_forward<T, A>   x viewed as (outer, channels, inner); per channel c, with batch
//                              statistics, mean = sum(x) / count and var = sum((x - mean)^2) / count
//                              (biased) over its count = outer * inner values, and the running
//                              statistics updated in place (running = momentum * running + keep *
//                              batch); otherwise mean and var are the running ones. Then
//                              out = (x - mean) * (gamma * inv_std) + beta, inv_std = 1 / sqrt(var + eps),
//                              and saved = (mean, inv_std, k = gamma * inv_std), (3, channels), for
//                              the backward
//   batch_norm_backward<T, A>  from g, x and saved: sum_g = sum(g), sum_gd = sum(g * (x - mean));
//                              gx = g * k, plus, with batch statistics,
//                              (x - mean) * (-k * inv_std * inv_std * sum_gd / count) + (-k * sum_g / count);
//                              ggamma = sum_gd * inv_std (0 with fix_gamma), gbeta = sum_g
//
// T is the data type (float, double, __half), A the arithmetic's (float for float and __half, double
// for double): half values are widened exactly and the results rounded to half once, as NumPy's
// astype does. With fix_gamma, gamma is 1 and not read (any pointer will do).
//
// The twin is mxlite/ops/_norm_kernels.py (forward and backward with blocked_sums), which is
// also the arithmetic nn_ops.batch_norm composes on CPU devices (with NumPy's own sums);
// tests/test_norm_kernels.py holds the kernels to it bit for bit, on CPU devices (serial host
// build) and on GPUs.
//
// Order of every per-channel sum (channel_sum): the channel's outer * inner values are counted in
// row-major order, i = o * inner + k; thread t takes i = t + blockDim.x * j, j = 0, 1, ..., and keeps
// kLanes = 8 partial sums: value j goes to lane j % 8, each lane adding its values in order, starting
// from 0. Then lanes are added pairwise, lane[l] += lane[l + s] for s = 4, 2, 1, and the blockDim.x
// threads' sums likewise, partial[t] += partial[t + s] for s = blockDim.x / 2, ..., 2, 1. blockDim.x is
// a power of two, at most 256 (1 in the serial host build, where the eight lanes are a vector register's
// worth and, when inner is a multiple of 8, the loops run unit-stride over each row of inner values, so
// g++ vectorises them). Every other operation is rounded to A in the twin's order: no contraction
// (NVRTC --fmad=false, g++ -ffp-contract=off); sqrt and division are IEEE. On a GPU float32 subnormals
// flush to zero (CuPy's -ftz=true), where the twin keeps them. CPU devices run this serial host build
// for batch_norm (mxlite/ops/nn_ops.py) when it is available.
//
// Work split: block b handles channels b, b + gridDim.x, ...; the threads of a block share the
// channel's elements. Expected macros: none. Instantiated for (float, float), (double, double) and
// (__half, float).

#include <cuda_fp16.h>

#include "ieee_math.cuh"

namespace {

constexpr int kMaxThreads = 256;
constexpr int kLanes = 8;

__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ double widen(double x) { return x; }

template <typename T> __device__ __forceinline__ T narrow(float x);
template <> __device__ __forceinline__ float narrow<float>(float x) { return x; }
template <> __device__ __forceinline__ __half narrow<__half>(float x) { return __float2half_rn(x); }
template <typename T> __device__ __forceinline__ T narrow(double x);
template <> __device__ __forceinline__ double narrow<double>(double x) { return x; }

__device__ __forceinline__ float root(float x) { return sqrtf(x); }
__device__ __forceinline__ double root(double x) { return sqrt(x); }

// Offset, from the channel's first element, of its i-th value (row-major over outer, inner).
__device__ __forceinline__ long long element(long long i, long long channels, long long inner) {
    return i / inner * channels * inner + i % inner;
}

// The sum of value(e) over the channel's values (e: offset from its first element), in the order of the
// header; every thread returns it.
template <typename A, typename Value>
__device__ A channel_sum(long long outer, long long channels, long long inner, Value value) {
    __shared__ A partial[kMaxThreads];
    A lane[kLanes];
    for (int l = 0; l < kLanes; ++l) lane[l] = A(0);
    const long long count = outer * inner;
    if (blockDim.x == 1 && inner % kLanes == 0) {
        // one thread, rows of whole lane groups: value i = o * inner + k lands in lane k % kLanes, the
        // order of the general loop below, as unit-stride loops g++ vectorises
        for (long long o = 0; o < outer; ++o) {
            const long long base = o * channels * inner;
            for (long long k = 0; k < inner; k += kLanes) {
                for (int l = 0; l < kLanes; ++l) lane[l] = lane[l] + value(base + k + l);
            }
        }
    } else {
        const long long step = blockDim.x;
        const long long mine = threadIdx.x < count ? (count - 1 - threadIdx.x) / step + 1 : 0;
        long long j = 0;
        for (; j + kLanes <= mine; j += kLanes) {
            for (int l = 0; l < kLanes; ++l) {
                lane[l] = lane[l] + value(element(threadIdx.x + (j + l) * step, channels, inner));
            }
        }
        for (int l = 0; l < kLanes; ++l) {  // the tail; a constant trip count keeps lane[] in registers
            if (j + l < mine) lane[l] = lane[l] + value(element(threadIdx.x + (j + l) * step, channels, inner));
        }
    }
    for (int s = kLanes / 2; s > 0; s >>= 1) {
        for (int l = 0; l < s; ++l) lane[l] = lane[l] + lane[l + s];
    }
    if (blockDim.x == 1) return lane[0];
    __syncthreads();  // the previous sum's threads may still be reading partial[0]
    partial[threadIdx.x] = lane[0];
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] = partial[threadIdx.x] + partial[threadIdx.x + s];
        __syncthreads();
    }
    return partial[0];
}

// f(e) for every value of the channel (e: offset from its first element); a one-thread block walks
// the rows of `inner` contiguous values (vectorised on the host), a larger block strides over all.
template <typename F> __device__ __forceinline__ void for_each_value(long long outer, long long channels,
                                                                     long long inner, F f) {
    if (blockDim.x == 1) {
        for (long long o = 0; o < outer; ++o) {
            const long long base = o * channels * inner;
            for (long long k = 0; k < inner; ++k) f(base + k);
        }
    } else {
        for (long long i = threadIdx.x; i < outer * inner; i += blockDim.x) f(element(i, channels, inner));
    }
}

}  // namespace

template <typename T, typename A>
__global__ void batch_norm_forward(const T *__restrict__ x, const A *__restrict__ gamma, const A *__restrict__ beta,
                                   A *__restrict__ running_mean, A *__restrict__ running_var, T *__restrict__ out,
                                   A *__restrict__ saved, long long outer, long long channels, long long inner,
                                   A count, A eps, A momentum, A keep, int batch_stats, int fix_gamma) {
    for (long long c = blockIdx.x; c < channels; c += gridDim.x) {
        const T *__restrict__ xc = x + c * inner;
        T *__restrict__ oc = out + c * inner;
        A mean, var;
        if (batch_stats) {
            mean = channel_sum<A>(outer, channels, inner, [&](long long e) { return widen(xc[e]); }) / count;
            var = channel_sum<A>(outer, channels, inner, [&](long long e) {
                      const A d = widen(xc[e]) - mean;
                      return d * d;
                  }) / count;
            if (threadIdx.x == 0) {
                const A m = momentum * running_mean[c], b = keep * mean;
                running_mean[c] = m + b;
                const A v = momentum * running_var[c], w = keep * var;
                running_var[c] = v + w;
            }
        } else {
            mean = running_mean[c];
            var = running_var[c];
        }
        const A inv_std = A(1) / root(var + eps);
        const A k = (fix_gamma ? A(1) : gamma[c]) * inv_std;
        const A shift = beta[c];
        for_each_value(outer, channels, inner, [&](long long e) {
            const A scaled = (widen(xc[e]) - mean) * k;
            oc[e] = narrow<T>(scaled + shift);
        });
        if (threadIdx.x == 0) {
            saved[c] = mean;
            saved[channels + c] = inv_std;
            saved[2 * channels + c] = k;
        }
    }
}

template <typename T, typename A>
__global__ void batch_norm_backward(const T *__restrict__ g, const T *__restrict__ x, const A *__restrict__ saved,
                                    T *__restrict__ gx, A *__restrict__ ggamma, A *__restrict__ gbeta,
                                    long long outer, long long channels, long long inner, A count, int batch_stats,
                                    int fix_gamma) {
    for (long long c = blockIdx.x; c < channels; c += gridDim.x) {
        const T *__restrict__ gc = g + c * inner;
        const T *__restrict__ xc = x + c * inner;
        T *__restrict__ out = gx + c * inner;
        const A mean = saved[c], inv_std = saved[channels + c], k = saved[2 * channels + c];
        const A sum_g = channel_sum<A>(outer, channels, inner, [&](long long e) { return widen(gc[e]); });
        const A sum_gd = channel_sum<A>(outer, channels, inner,
                                        [&](long long e) { return widen(gc[e]) * (widen(xc[e]) - mean); });
        const A neg_k = -k;
        const A b = ((neg_k * inv_std) * inv_std) * sum_gd / count;
        const A d = neg_k * sum_g / count;
        with_flag(batch_stats != 0, [&](auto batch) {
            for_each_value(outer, channels, inner, [&](long long e) {
                A v = widen(gc[e]) * k;
                if constexpr (decltype(batch)::value) {
                    const A t = (widen(xc[e]) - mean) * b;
                    v = v + t;
                    v = v + d;
                }
                out[e] = narrow<T>(v);
            });
        });
        if (threadIdx.x == 0) {
            ggamma[c] = fix_gamma ? A(0) : sum_gd * inv_std;
            gbeta[c] = sum_g;
        }
    }
}

// No explicit instantiations: each variant is compiled when named. On a GPU, mxlite compiles one
// variant per module (NVRTC name_expressions: mxlite/device/kernels.py); the host build and the nvcc check
// in the tests take the full list of names from the Python driver.

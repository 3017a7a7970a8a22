// Softmax cross-entropy over the last axis in one pass per row and direction: the log-softmax, the
// pick of the label's entry (or the dot with a label distribution) and, backward, softmax - label.
//
//   softmax_ce_forward<T>   x (rows, classes); per row m = max(x), lse = log(sum(exp(x - m))) and
//                           sparse labels (label: int64 class ids, already in [0, classes)):
//                             loss = -((x[label] - m) - lse)
//                           dense labels (dense: (rows, classes) T, a distribution per row):
//                             loss = -sum(dense * ((x - m) - lse)),  lsum = sum(dense)
//                           writes loss (rows,) T and saved (rows, 3) T: m, lse, lsum (0 when sparse).
//   softmax_ce_backward<T>  from g (rows,) T, the gradient of each row's loss, x and saved:
//                           p = exp((x - m) - lse), and gx (rows, classes) T:
//                             sparse: g * (p - (j == label ? 1 : 0))
//                             dense:  g * (p * lsum - dense)
//
// These are d/dx of the composed form the loss had before (mxlite/gluon/loss.py:
// -pick(log_softmax(x), label) or -sum(log_softmax(x) * dense)), same operations per element, rounded
// once each; exp and log are ieee_math.cuh's (exp(x - m) and p take arguments <= 0, lse >= 0).
//
// Order of each per-row sum and max (row_reduce): thread t takes the row's entries j = t + blockDim.x * i,
// i = 0, 1, ..., and keeps kLanes = 8 partial results: entry i goes to lane i % 8, each lane combining
// its entries in order, starting from 0 (max: from -inf). Then lanes are combined pairwise, lane[l] =
// op(lane[l], lane[l + s]) for s = 4, 2, 1, and the blockDim.x threads' results likewise, s =
// blockDim.x / 2, ..., 1. blockDim.x is a power of two, at most 256; 1 in the serial host build, where
// the eight lanes are one vector register's worth that g++ keeps in a register and the exp inside the
// loop vectorises with them. The max keeps NaN (a NaN entry makes the row's m NaN, as NumPy's max).
// The twin, mxlite/ops/_loss_kernels.py (forward_twin, backward_twin with lane_reduce), performs
// the same operations in the same order; tests/test_softmax_ce.py holds the kernels to it bit for bit.
//
// Work split: block b handles rows b, b + gridDim.x, ...; the threads of a block share a row's entries.
// Instantiated for float and double (math in T). Expected macros: none.

#include <cuda_fp16.h>

#include "ieee_math.cuh"

namespace {

constexpr int kMaxThreads = 256;
constexpr int kLanes = 8;

template <typename A> struct Max {
    __device__ A operator()(A a, A b) const { return (b > a || b != b) ? b : a; }  // NaN wins
};
template <typename A> struct Add {
    __device__ A operator()(A a, A b) const { return a + b; }
};

// op-reduction of value(j) over the row's entries j in [0, n), in the order of the header; every
// thread of the block returns it.
template <typename A, typename Op, typename Value>
__device__ A row_reduce(long long n, A init, Op op, Value value) {
    __shared__ A partial[kMaxThreads];
    A lane[kLanes];
    for (int l = 0; l < kLanes; ++l) lane[l] = init;
    const long long step = blockDim.x;
    const long long mine = threadIdx.x < n ? (n - 1 - threadIdx.x) / step + 1 : 0;  // entries of this thread
    long long i = 0;
    for (; i + kLanes <= mine; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) lane[l] = op(lane[l], value(threadIdx.x + (i + l) * step));
    }
    for (int l = 0; l < kLanes; ++l) {  // the tail; a constant trip count keeps lane[] in registers on a GPU
        if (i + l < mine) lane[l] = op(lane[l], value(threadIdx.x + (i + l) * step));
    }
    for (int s = kLanes / 2; s > 0; s >>= 1) {
        for (int l = 0; l < s; ++l) lane[l] = op(lane[l], lane[l + s]);
    }
    if (blockDim.x == 1) return lane[0];
    __syncthreads();  // the previous reduction's threads may still be reading partial[0]
    partial[threadIdx.x] = lane[0];
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] = op(partial[threadIdx.x], partial[threadIdx.x + s]);
        __syncthreads();
    }
    return partial[0];
}

template <typename A> __device__ __forceinline__ A exp_le0(A y) {
    const ExpParts<A> p = exp_parts(y);
    return p.s + p.s * p.q;
}

template <typename A> __device__ __forceinline__ A negative_infinity() {
    return -Exp<A>::from_bits(Exp<A>::kBias << Exp<A>::kMantissa) / A(0);  // -1 / 0
}

}  // namespace

template <typename T>
__global__ void softmax_ce_forward(const T *__restrict__ x, const long long *__restrict__ label,
                                   const T *__restrict__ dense, T *__restrict__ loss, T *__restrict__ saved,
                                   long long rows, long long classes) {
    with_flag(label != nullptr, [&](auto sparse) {
        for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
            const T *xr = x + row * classes;
            const T m = row_reduce<T>(classes, negative_infinity<T>(), Max<T>(), [&](long long j) { return xr[j]; });
            const T total = row_reduce<T>(classes, T(0), Add<T>(), [&](long long j) { return exp_le0(xr[j] - m); });
            const T lse = log_ge1(total);
            T value, lsum = T(0);
            if constexpr (decltype(sparse)::value) {
                value = -((xr[label[row]] - m) - lse);
            } else {
                const T *dr = dense + row * classes;
                value = -row_reduce<T>(classes, T(0), Add<T>(), [&](long long j) { return dr[j] * ((xr[j] - m) - lse); });
                lsum = row_reduce<T>(classes, T(0), Add<T>(), [&](long long j) { return dr[j]; });
            }
            if (threadIdx.x == 0) {
                loss[row] = value;
                saved[3 * row] = m;
                saved[3 * row + 1] = lse;
                saved[3 * row + 2] = lsum;
            }
        }
    });
}

template <typename T>
__global__ void softmax_ce_backward(const T *__restrict__ g, const T *__restrict__ x,
                                    const long long *__restrict__ label, const T *__restrict__ dense,
                                    const T *__restrict__ saved, T *__restrict__ gx, long long rows,
                                    long long classes) {
    with_flag(label != nullptr, [&](auto sparse) {
        for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
            const T *xr = x + row * classes;
            T *out = gx + row * classes;
            const T m = saved[3 * row], lse = saved[3 * row + 1], lsum = saved[3 * row + 2], gr = g[row];
            if constexpr (decltype(sparse)::value) {
                const long long hit = label[row];
                for (long long j = threadIdx.x; j < classes; j += blockDim.x) {
                    const T p = exp_le0((xr[j] - m) - lse);
                    out[j] = gr * (p - (j == hit ? T(1) : T(0)));
                }
            } else {
                const T *dr = dense + row * classes;
                for (long long j = threadIdx.x; j < classes; j += blockDim.x) {
                    const T p = exp_le0((xr[j] - m) - lse);
                    out[j] = gr * (p * lsum - dr[j]);
                }
            }
        }
    });
}

// No explicit instantiations: each variant is compiled when named. On a GPU, mxlite compiles one
// variant per module (NVRTC name_expressions: mxlite/device/kernels.py); the host build and the nvcc check
// in the tests take the full list of names from the Python driver.

// ReLU in one pass per direction, for the host's thread pool and for GPUs alike.
//
//   relu_forward<T>   out = (x > 0 or x is NaN) ? x : 0            (NumPy's maximum(x, 0): NaN stays NaN)
//   relu_backward<T>  gx = x > 0 ? g : 0                            (PyTorch's threshold_backward: a dead
//                                                                   unit passes no gradient, NaN included)
//
// Selects only, no arithmetic: every target gives the twin's bits (mxlite/ops/activations.py:
// _relu_forward_twin, _relu_backward_twin; tests/test_activation_kernels.py). The comparison is made in
// the math type (half widened to float, exactly), the value stored as it was read.
//
// Work split: the n elements are cut into gridDim.x chunks of `chunk` consecutive elements; block b
// takes chunk b and its threads stride through it, so a one-thread block (the serial host build of CPU
// devices, whose thread pool runs blocks side by side) walks a contiguous range that g++ vectorises,
// and a GPU block's loads coalesce. Instantiated for float, double and __half. Expected macros: none.

#include <cuda_fp16.h>

#include "ieee_math.cuh"

template <typename T>
__global__ void relu_forward(const T *__restrict__ x, T *__restrict__ out, long long n, long long chunk) {
    const long long start = blockIdx.x * chunk;
    const long long stop = start + chunk < n ? start + chunk : n;
    for (long long i = start + threadIdx.x; i < stop; i += blockDim.x) {
        const Math<T> v = arith(x[i]);
        out[i] = (v > Math<T>(0) || v != v) ? x[i] : store_as<T>(Math<T>(0));
    }
}

template <typename T>
__global__ void relu_backward(const T *__restrict__ g, const T *__restrict__ x, T *__restrict__ gx, long long n,
                              long long chunk) {
    const long long start = blockIdx.x * chunk;
    const long long stop = start + chunk < n ? start + chunk : n;
    for (long long i = start + threadIdx.x; i < stop; i += blockDim.x) {
        gx[i] = arith(x[i]) > Math<T>(0) ? g[i] : store_as<T>(Math<T>(0));
    }
}

// No explicit instantiations: each variant is compiled when named. On a GPU, mxlite compiles one
// variant per module (NVRTC name_expressions: mxlite/device/kernels.py); the host build and the nvcc check
// in the tests take the full list of names from the Python driver.

// A convolution's bias and ReLU in one in-place pass over its output (CPU devices' Conv(activation='relu')).
//
//   bias_relu_forward<T>  y[p, i] = relu(y[p, i] + bias[p % channels]), in place, over `planes` planes
//                         of `plane` elements (the (N, C, *O) output: planes = N*C, channels = C);
//                         relu(v) = v where v > 0 or v is NaN, else +0 (kernels/activation.cu's rule)
//
// The twin is mxlite/ops/_conv_kernels.py: _bias_relu_twin (NumPy's `y + b` in T, then
// activations._relu_forward_twin's select); tests/test_conv_kernels.py holds them to the same bits. The
// sum is one IEEE addition rounded to T (half through float, rounded once: the correctly rounded half
// sum, as NumPy's float16 add gives); float32 adds through add.rn so that CuPy's -ftz=true keeps
// subnormals as NumPy does. The select is made in the math type, the sum stored as rounded.
//
// Work split: block b takes planes b, b + gridDim.x, ... and its threads stride through each plane, so
// a one-thread block (the serial host build; its thread pool runs blocks side by side) walks whole
// contiguous planes that g++ vectorises, and a GPU block's loads coalesce. Instantiated for float,
// double and __half. Expected macros: none. The backward (g where y > 0, else 0: y > 0 exactly where
// y + b > 0) is kernels/activation.cu's relu_backward applied to the output.

#include <cuda_fp16.h>

#include "ieee_math.cuh"

namespace {

__device__ __forceinline__ float add_rn(float a, float b) {
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ double add_rn(double a, double b) { return a + b; }

}  // namespace

template <typename T>
__global__ void bias_relu_forward(T *__restrict__ y, const T *__restrict__ bias, long long planes, long long channels,
                                  long long plane) {
    for (long long p = blockIdx.x; p < planes; p += gridDim.x) {
        const Math<T> b = arith(bias[p % channels]);
        T *__restrict__ row = y + p * plane;
        for (long long i = threadIdx.x; i < plane; i += blockDim.x) {
            const T s = store_as<T>(add_rn(arith(row[i]), b));
            const Math<T> v = arith(s);
            row[i] = (v > Math<T>(0) || v != v) ? s : store_as<T>(Math<T>(0));
        }
    }
}

// No explicit instantiations: each variant is compiled when named. On a GPU, mxlite compiles one
// variant per module (NVRTC name_expressions: mxlite/device/kernels.py); the host build and the nvcc check
// in the tests take the full list of names from the Python driver.

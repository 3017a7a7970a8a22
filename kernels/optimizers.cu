// Fused optimizer updates over a flat parameter arena: one launch updates every parameter.
//
// Kernels (T = float, __half, __nv_bfloat16; the math is always float32):
//   sgd_update<T>   MXNet SGD: G = clip(rescale*g) + wd*w; mom = mu*mom - lr*G; w += mom
//                   (mom == nullptr: w -= lr*G)
//   adam_update<T>  MXNet Adam: G as above; m = b1*m + (1-b1)*G; v = b2*v + (1-b2)*G^2;
//                   w -= lr_t * m / (sqrt(v) + eps), lr_t carrying the bias correction
//
// Work split (as PyTorch's multi_tensor_apply): the host cuts every parameter of the arena
// into chunks of at most CHUNK elements that never straddle two parameters. Block b updates
// chunk b: elements [chunk_start[b], chunk_end[b]) of parameter chunk_seg[b]. Per-parameter
// values (learning rate with lr_mult and bias correction, weight decay with wd_mult) come from
// seg_lr[s] and seg_wd[s], a small table the host refreshes before each launch. Gradients lie
// in the arena's gradient buffer in reverse order, so element i of parameter s has its
// gradient at grad[i + seg_gshift[s]].
//
// master: optional float32 master weights (multi_precision for half types): when not null the
// update reads and writes master, and w receives its rounded copy.
//
// Expected macros: none. Compiled by cupy.RawModule (NVRTC) with name_expressions for each
// instantiation, and by `nvcc --ptx` in the test suite.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// G = clip(rescale * g, +-clip) + wd * w   (clip <= 0 disables clipping)
__device__ __forceinline__ float effective_grad(float g, float w, float rescale, float clip, float wd) {
    g *= rescale;
    if (clip > 0.0f) g = fminf(fmaxf(g, -clip), clip);
    return g + wd * w;
}

}  // namespace

template <typename T>
__global__ void sgd_update(T* __restrict__ weight, const T* __restrict__ grad, float* __restrict__ mom,
                           float* __restrict__ master, const int* __restrict__ chunk_seg,
                           const long long* __restrict__ chunk_start, const long long* __restrict__ chunk_end,
                           const long long* __restrict__ seg_gshift, const float* __restrict__ seg_lr,
                           const float* __restrict__ seg_wd,
                           float momentum, float rescale, float clip) {
    const int s = chunk_seg[blockIdx.x];
    const float lr = seg_lr[s], wd = seg_wd[s];
    const long long gshift = seg_gshift[s];
    const long long end = chunk_end[blockIdx.x];
    for (long long i = chunk_start[blockIdx.x] + threadIdx.x; i < end; i += blockDim.x) {
        float w = master ? master[i] : to_f32(weight[i]);
        const float g = effective_grad(to_f32(grad[i + gshift]), w, rescale, clip, wd);
        if (mom) {
            const float m = momentum * mom[i] - lr * g;  // mom = mu*mom - lr*G
            mom[i] = m;
            w += m;                                      // w += mom
        } else {
            w -= lr * g;                                 // w -= lr*G
        }
        if (master) master[i] = w;
        weight[i] = from_f32<T>(w);
    }
}

template <typename T>
__global__ void adam_update(T* __restrict__ weight, const T* __restrict__ grad, float* __restrict__ mean,
                            float* __restrict__ var, float* __restrict__ master, const int* __restrict__ chunk_seg,
                            const long long* __restrict__ chunk_start, const long long* __restrict__ chunk_end,
                            const long long* __restrict__ seg_gshift, const float* __restrict__ seg_lr,
                           const float* __restrict__ seg_wd,
                            float beta1, float beta2, float epsilon, float rescale, float clip) {
    const int s = chunk_seg[blockIdx.x];
    const float lr_t = seg_lr[s], wd = seg_wd[s];
    const long long gshift = seg_gshift[s];
    const long long end = chunk_end[blockIdx.x];
    for (long long i = chunk_start[blockIdx.x] + threadIdx.x; i < end; i += blockDim.x) {
        float w = master ? master[i] : to_f32(weight[i]);
        const float g = effective_grad(to_f32(grad[i + gshift]), w, rescale, clip, wd);
        const float m = beta1 * mean[i] + (1.0f - beta1) * g;     // m = b1*m + (1-b1)*G
        const float v = beta2 * var[i] + (1.0f - beta2) * g * g;  // v = b2*v + (1-b2)*G^2
        mean[i] = m;
        var[i] = v;
        w -= lr_t * m / (sqrtf(v) + epsilon);                     // w -= lr_t*m/(sqrt(v)+eps)
        if (master) master[i] = w;
        weight[i] = from_f32<T>(w);
    }
}

// Explicit instantiations so that `nvcc --ptx` emits (and checks) every variant; NVRTC gets
// the same list through name_expressions.
#define MXLITE_TABLES const int*, const long long*, const long long*, const long long*, const float*, const float*
#define MXLITE_INSTANTIATE(T)                                                                         \
    template __global__ void sgd_update<T>(T*, const T*, float*, float*, MXLITE_TABLES, float, float, float); \
    template __global__ void adam_update<T>(T*, const T*, float*, float*, float*, MXLITE_TABLES, float, float, \
                                            float, float, float);
MXLITE_INSTANTIATE(float)
MXLITE_INSTANTIATE(__half)
MXLITE_INSTANTIATE(__nv_bfloat16)

// Gradient compression codecs: 2-bit quantisation, sparse selection with error feedback, and
// half-precision wire casts. Driven by mxlite/comm/compression/kernels.py, whose NumPy twins follow
// these kernels operation by operation (bit for bit: no multiply-add contraction, see below).
//
//   quantize_2bit<T>       one thread per 32-bit output word (16 values): r += g; r not finite: code
//                          01, r = 0; r >= th: code 11, r -= th; r <= -th: code 10, r += th; else 00.
//                          Value j of a word sits in byte j/4 (memory order), bits 7-6 / 5-4 / 3-2 /
//                          1-0 for j%4 = 0..3 (MXNet's gradient_compression-inl.h layout; MXNet never
//                          writes code 01, which mxlite uses for "not finite")
//   dequantize_2bit        one thread per value: 11 -> +th, 10 -> -th, 01 -> NaN (0x7fc00000), 00 -> 0;
//                          out = v or out += v
//   residual_accumulate<T> r += g (top-k: the selection itself runs as CuPy sort/partition ops)
//   take_and_zero          values[j] = r[idx[j]]; r[idx[j]] = 0   (what a sparse message sends)
//   scatter_add            out[idx[j]] += values[j]               (indices unique per message)
//   compact_take           after r += g and pos = inclusive prefix count of the selected elements
//                          (|r| >= th, computed by CuPy): element i selected (pos[i] > pos[i-1]) goes
//                          to slot pos[i]-1: idx = i, values = r[i], r[i] = 0. Ascending indices, no
//                          atomics, so the order is the twin's; the count stays on the device (pos[n-1])
//   scatter_add_message    out[idx[j]] += values[j] for j < min(count, capacity), reading one sparse
//                          message laid out as int32 [count, idx[capacity], float bits[capacity]]:
//                          the count is read on the device, so a message gathered by NCCL is decoded
//                          without the host learning its size
//   to_wire<T, W>          wire = W(clip(g, -c, c) * scale): the 1/N pre-scale fused into the cast
//   from_wire<W>           out = float(wire) * scale, or out += float(wire) * scale
//
// T is the gradient storage type (float or __half); the math is float32. W is the wire format:
// f16_wire (IEEE half) or bf16_wire (bfloat16 as unsigned short bits, rounded to nearest even
// by bit manipulation so that only cuda_fp16.h is needed). A NaN becomes the canonical quiet NaN
// of the wire (0x7e00 / 0x7fc0, sign dropped): GPU arithmetic returns canonical NaNs where the
// host keeps payloads and signs, so only canonical NaNs let NumPy and CUDA agree on every bit.
//
// Products and sums go through add_ieee / mul_ieee (PTX add.rn / mul.rn, never contracted into
// an FMA and never flushing subnormals), so they hold whatever the compile options; the module is
// also compiled with --fmad=false like every mxlite kernel (mxlite/device/kernels.py: NVRTC_OPTIONS).
//
// Every kernel takes its length n and loops grid-stride, so any grid size is correct.
// Expected macros: none. Compiled by cupy.RawModule (NVRTC) with name_expressions for every
// instantiation (mxlite/comm/compression/kernels.py: KERNELS), and by `nvcc --ptx -arch=sm_80` in
// the test suite (tests/test_project.py).

#include <cuda_fp16.h>

namespace {

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

// The largest finite float32 (FLT_MAX), and the canonical quiet NaN that code 01 decodes to.
#define kMaxFloat 3.40282346638528859812e+38f
#define kQuietNaN __int_as_float(0x7fc00000)

__device__ __forceinline__ long long first_index() { return (long long)blockIdx.x * blockDim.x + threadIdx.x; }
__device__ __forceinline__ long long grid_stride() { return (long long)gridDim.x * blockDim.x; }

// Bit offset of value j (0..15) of a packed word: byte j/4 in memory order (little-endian, so
// bits 8*(j/4).. of the word), the first value of a byte in its two highest bits.
__device__ __forceinline__ int two_bit_shift(int j) { return 8 * (j >> 2) + 6 - 2 * (j & 3); }

// IEEE float32 add / multiply that keep subnormals: CuPy compiles every RawModule with
// -ftz=true (appended after the caller's options), which would flush them; NumPy keeps them.
__device__ __forceinline__ float add_ieee(float a, float b) {
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float sub_ieee(float a, float b) {
    float r;
    asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float mul_ieee(float a, float b) {
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

}  // namespace

// IEEE half on the wire.
struct f16_wire {
    static __device__ __forceinline__ unsigned short encode(float x) {
        if (x != x) return (unsigned short)0x7e00u;
        return __half_as_ushort(__float2half_rn(x));
    }
    static __device__ __forceinline__ float decode(unsigned short bits) { return __half2float(__ushort_as_half(bits)); }
};

// bfloat16 on the wire: the high half of the float32, rounded to nearest even.
struct bf16_wire {
    static __device__ __forceinline__ unsigned short encode(float x) {
        const unsigned int b = __float_as_uint(x);
        if ((b & 0x7fffffffu) > 0x7f800000u) return (unsigned short)0x7fc0u;
        // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; overflow
        // carries into the exponent and lands on inf, as it should.
        return (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    }
    static __device__ __forceinline__ float decode(unsigned short bits) {
        return __uint_as_float((unsigned int)bits << 16);
    }
};

template <typename T>
__global__ void quantize_2bit(const T *__restrict__ grad, float *__restrict__ residual,
                              unsigned int *__restrict__ packed, long long n, float threshold) {
    const long long words = (n + 15) / 16;
    for (long long w = first_index(); w < words; w += grid_stride()) {
        unsigned int word = 0;
        const long long start = w * 16;
        const int count = (int)(n - start < 16 ? n - start : 16);
        for (int j = 0; j < count; ++j) {
            const long long i = start + j;
            float r = add_ieee(residual[i], to_f32(grad[i]));  // r += g
            if (!(fabsf(r) <= kMaxFloat)) {                  // NaN or inf: send NaN, clear the residual
                word |= 1u << two_bit_shift(j);
                r = 0.0f;
            } else if (r >= threshold) {
                word |= 3u << two_bit_shift(j);       // send +th
                r = sub_ieee(r, threshold);
            } else if (r <= -threshold) {
                word |= 2u << two_bit_shift(j);       // send -th
                r = add_ieee(r, threshold);
            }
            residual[i] = r;
        }
        packed[w] = word;
    }
}

__global__ void dequantize_2bit(const unsigned int *__restrict__ packed, float *__restrict__ out, long long n,
                                float threshold, int accumulate) {
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const unsigned int code = (packed[i >> 4] >> two_bit_shift((int)(i & 15))) & 3u;
        const float v = code == 3u ? threshold : (code == 2u ? -threshold : (code == 1u ? kQuietNaN : 0.0f));
        out[i] = accumulate ? add_ieee(out[i], v) : v;
    }
}

template <typename T>
__global__ void residual_accumulate(const T *__restrict__ grad, float *__restrict__ residual, long long n) {
    for (long long i = first_index(); i < n; i += grid_stride()) residual[i] = add_ieee(residual[i], to_f32(grad[i]));
}

__global__ void take_and_zero(const int *__restrict__ indices, long long m, float *__restrict__ residual,
                              float *__restrict__ values) {
    for (long long j = first_index(); j < m; j += grid_stride()) {
        const int i = indices[j];
        values[j] = residual[i];
        residual[i] = 0.0f;
    }
}

// Indices are unique within one message, so no two threads touch the same element.
__global__ void scatter_add(const int *__restrict__ indices, const float *__restrict__ values, long long m,
                            float *__restrict__ out) {
    for (long long j = first_index(); j < m; j += grid_stride()) {
        const int i = indices[j];
        out[i] = add_ieee(out[i], values[j]);
    }
}

// pos: inclusive prefix sum (int32) of the selection mask; indices and values have room for pos[n-1].
__global__ void compact_take(const int *__restrict__ pos, long long n, float *__restrict__ residual,
                             int *__restrict__ indices, float *__restrict__ values) {
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const int before = i > 0 ? pos[i - 1] : 0;
        if (pos[i] != before) {
            indices[before] = (int)i;
            values[before] = residual[i];
            residual[i] = 0.0f;
        }
    }
}

// message: int32 [count, indices[capacity], float32 bits[capacity]]; indices unique within it.
__global__ void scatter_add_message(const int *__restrict__ message, long long capacity, float *__restrict__ out) {
    const long long count = message[0] < capacity ? message[0] : capacity;
    const int *indices = message + 1;
    const float *values = reinterpret_cast<const float *>(message + 1 + capacity);
    for (long long j = first_index(); j < count; j += grid_stride()) {
        const int i = indices[j];
        out[i] = add_ieee(out[i], values[j]);
    }
}

// clip <= 0: no clipping. The comparisons leave NaN as NaN (fminf/fmaxf would drop it).
template <typename T, typename W>
__global__ void to_wire(const T *__restrict__ x, unsigned short *__restrict__ wire, long long n, float scale,
                        float clip) {
    for (long long i = first_index(); i < n; i += grid_stride()) {
        float y = to_f32(x[i]);
        if (clip > 0.0f) y = y < -clip ? -clip : (y > clip ? clip : y);
        wire[i] = W::encode(mul_ieee(y, scale));
    }
}

template <typename W>
__global__ void from_wire(const unsigned short *__restrict__ wire, float *__restrict__ out, long long n,
                          float scale, int accumulate) {
    for (long long i = first_index(); i < n; i += grid_stride()) {
        const float v = mul_ieee(W::decode(wire[i]), scale);
        out[i] = accumulate ? add_ieee(out[i], v) : v;
    }
}

// No explicit instantiations: each variant is compiled when named. On a GPU, mxlite compiles one
// variant per module (NVRTC name_expressions: mxlite/device/kernels.py); the host build and the nvcc check
// in the tests take the full list of names from the Python driver.

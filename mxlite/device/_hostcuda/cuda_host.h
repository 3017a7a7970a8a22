// cuda_host.h: the CUDA built-ins for compiling a kernel source with g++ for the HOST.
//
// Force-included (g++ -include cuda_host.h) in front of a CUDA source by
// mxlite/_hostcuda/__init__.py, which also rewrites two things in the source text before g++
// sees it (see that module's docstring): `extern __shared__ T name[];` becomes a pointer into
// the launch's dynamic shared buffer, and recognised inline PTX `asm(...)` statements become
// calls of the host functions in hostcuda::ptx below.
//
// __half and __nv_bfloat16 are CUDA's own, from cuda_fp16.h / cuda_bf16.h of a pip package
// (host code paths: no __CUDACC__, no __CUDA_ARCH__). Everything else here is ours:
//
//   __global__ __device__ __host__ __constant__ __managed__   empty (ordinary host functions)
//   __shared__                 `static`: one copy per function (per template instantiation),
//                              shared by the fibers of a block; blocks run one after another
//                              (serial build: `static thread_local`, one copy per OS thread)
//   threadIdx blockIdx ...     the running fiber's values (the runtime sets them on every switch);
//                              in a serial build (HOSTCUDA_SERIAL) threadIdx and blockDim are the
//                              constants (0,0,0) and (1,1,1)
//   __syncthreads*, shuffles,  calls into the runtime: in the fiber build (runtime_fibers.cpp) the
//   votes, __syncwarp          calling fiber yields until its block / warp group can complete the
//                              operation; in the serial build (runtime_serial.cpp) a block has one
//                              thread, so they complete at once
//   atomics                    plain read-modify-write: fibers never switch inside one
//   math intrinsics            IEEE host arithmetic (no contraction: built with -ffp-contract=off)
//
// Kernels get no __CUDA_ARCH__ (code under `#ifdef __CUDA_ARCH__` is left out, as in any host
// pass of nvcc); __HOSTCUDA__ is defined so a source can tell the host build apart.
#ifndef MXLITE_HOSTCUDA_CUDA_HOST_H
#define MXLITE_HOSTCUDA_CUDA_HOST_H

#if defined(__CUDACC__) || defined(__CUDA_ARCH__)
#error "cuda_host.h is for g++ host builds only"
#endif

#define __HOSTCUDA__ 1

#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <device_launch_parameters.h>  // declares threadIdx & co. once, before our macros below

#include <cxxabi.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <typeinfo>
#include <utility>

// ---- execution-space and storage qualifiers ---------------------------------------------------
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __managed__
#undef __launch_bounds__
#undef __noinline__
#undef __grid_constant__
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __grid_constant__
#ifdef HOSTCUDA_SERIAL
// The serial build runs different blocks on different OS threads at once (runtime_serial.cpp): a
// block's shared variables are per thread there.
#define __shared__ static thread_local
#else
#define __shared__ static
#endif
#define __launch_bounds__(...)
#define __noinline__ __attribute__((noinline))
#ifndef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#endif
// __restrict__ is a g++ keyword already; __align__(n) comes from CUDA's host_defines.h.

namespace hostcuda {

// ---- runtime interface (runtime_fibers.cpp or runtime_serial.cpp) -------------------------------------------------
extern uint3 g_thread_idx;
#ifdef HOSTCUDA_SERIAL
extern thread_local uint3 g_block_idx;  // the serial build runs blocks on several OS threads at once
// Whether the running launch may spread its blocks over several threads: an atomic then traps
// (blocks that meet through atomics must run in order on one thread, for the same bits every time).
extern thread_local bool g_launch_spread;
[[noreturn]] void trap(const char *what, const char *file, int line);
#define HOSTCUDA_ATOMIC_GUARD() \
    (::hostcuda::g_launch_spread ? ::hostcuda::trap("an atomic in a launch spread over threads", __FILE__, __LINE__) \
                                 : (void)0)
// The running launch's grid, per OS thread: launches on different threads run at once (runtime_serial.cpp).
extern thread_local dim3 g_grid_dim;
#else
extern uint3 g_block_idx;
#define HOSTCUDA_ATOMIC_GUARD() ((void)0)
extern dim3 g_grid_dim;
#endif
extern dim3 g_block_dim;

// Warp operation codes (warp_op) and block barrier kinds (block_op).
enum WarpOpKind : int {
    kShflIdx = 0, kShflUp = 1, kShflDown = 2, kShflXor = 3, kSyncWarp = 4, kBallot = 5, kAny = 6, kAll = 7,
};
enum BlockOpKind : int { kBarrier = 0, kBarrierCount = 1, kBarrierAnd = 2, kBarrierOr = 3 };

// The calling fiber waits until every thread of the block is at a barrier; returns the
// reduction of `pred` over the block for the count/and/or kinds (0 for the plain barrier).
int block_op(int kind, int pred, const char *file, int line);
// The calling fiber deposits `value` and waits until every live lane of `mask` is at a warp
// operation of the same kind and mask; returns the operation's result for this lane.
unsigned long long warp_op(int kind, unsigned mask, unsigned long long value, int param, int width,
                           const char *file, int line);
void *dynamic_shared();
unsigned lane_id();
unsigned warp_id();
unsigned active_mask();
long long clock_ticks();
[[noreturn]] void trap(const char *what, const char *file, int line);

template <class T> inline T shfl(int kind, const char *file, int line, unsigned mask, T var, int param,
                                 int width = 32) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                  "warp shuffles take types of at most 8 bytes");
    unsigned long long bits = 0;
    std::memcpy(&bits, &var, sizeof(T));
    bits = warp_op(kind, mask, bits, param, width, file, line);
    T result;
    std::memcpy(&result, &bits, sizeof(T));
    return result;
}

// ---- the launch entry every name expression gets ----------------------------------------------
using Invoke = void (*)(void (*fn)(), void **args);
int run_launch(const char *kernel, Invoke invoke, void (*fn)(), void **args, const unsigned *grid,
               const unsigned *block, unsigned long long shared_mem, unsigned long long seed, char *err,
               size_t err_len);

template <class... A, size_t... I> inline void call_with(void (*f)(A...), void **args, std::index_sequence<I...>) {
    f(*static_cast<std::remove_reference_t<A> *>(args[I])...);
}
template <class... A> void invoke_kernel(void (*fn)(), void **args) {
    call_with(reinterpret_cast<void (*)(A...)>(fn), args, std::index_sequence_for<A...>{});
}
template <class... A>
int launch(void (*f)(A...), const char *kernel, void **args, const unsigned *grid, const unsigned *block,
           unsigned long long shared_mem, unsigned long long seed, char *err, size_t err_len) {
    return run_launch(kernel, &invoke_kernel<A...>, reinterpret_cast<void (*)()>(f), args, grid, block, shared_mem,
                      seed, err, err_len);
}

// One character per C++ type: f IEEE float (width 4 or 8), h __half, b __nv_bfloat16, i signed
// integer, u unsigned integer, ? bool, v void, p a pointer, o anything else (struct, ...).
template <class T> constexpr char type_code() {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_same<U, __half>::value) return 'h';
    else if constexpr (std::is_same<U, __nv_bfloat16>::value) return 'b';
    else if constexpr (std::is_same<U, bool>::value) return '?';
    else if constexpr (std::is_floating_point<U>::value) return 'f';
    else if constexpr (std::is_enum<U>::value) return type_code<std::underlying_type_t<U>>();
    else if constexpr (std::is_integral<U>::value) return std::is_signed<U>::value ? 'i' : 'u';
    else if constexpr (std::is_void<U>::value) return 'v';
    else if constexpr (std::is_pointer<U>::value) return 'p';
    else return 'o';
}
template <class T> constexpr size_t type_width() {
    if constexpr (std::is_void<std::remove_cv_t<T>>::value) return 0;
    else return sizeof(T);
}
// Appends the demangled C++ name of a type (from typeid) and a newline.
inline void describe_type(char *buf, size_t len, size_t *pos, const char *mangled) {
    int status = 0;
    char *name = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    const int n = snprintf(buf + *pos, *pos < len ? len - *pos : 0, "%s\n", status == 0 && name ? name : mangled);
    free(name);
    *pos += (size_t)(n > 0 ? n : 0);
}

// Writes one line per parameter: "<kind> <code> <width> <const> <C++ type>", kind p (pointer) or
// v (value). Returns the number of parameters, or -1 when the buffer is too small.
template <class A> void describe_param(char *buf, size_t len, size_t *pos) {
    int n;
    if constexpr (std::is_pointer<A>::value) {
        using P = std::remove_pointer_t<A>;
        n = snprintf(buf + *pos, *pos < len ? len - *pos : 0, "p %c %zu %d ", type_code<P>(), type_width<P>(),
                     (int)std::is_const<P>::value);
    } else if constexpr (std::is_reference<A>::value) {
        n = snprintf(buf + *pos, *pos < len ? len - *pos : 0, "v o 0 0 ");
    } else {
        n = snprintf(buf + *pos, *pos < len ? len - *pos : 0, "v %c %zu 0 ", type_code<A>(), type_width<A>());
    }
    *pos += (size_t)(n > 0 ? n : 0);
    describe_type(buf, len, pos, typeid(A).name());
}
template <class... A> int describe(void (*)(A...), char *buf, size_t len) {
    size_t pos = 0;
    if (len) buf[0] = 0;
    (describe_param<A>(buf, len, &pos), ...);
    return pos < len ? (int)sizeof...(A) : -1;
}

// ---- inline PTX the source rewriter recognises (hostcuda.py: _ptx_statement) -------------------
namespace ptx {
inline float ftz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
inline float add_f32(float a, float b, bool z) { return z ? ftz(ftz(a) + ftz(b)) : a + b; }
inline float sub_f32(float a, float b, bool z) { return z ? ftz(ftz(a) - ftz(b)) : a - b; }
inline float mul_f32(float a, float b, bool z) { return z ? ftz(ftz(a) * ftz(b)) : a * b; }
inline float div_f32(float a, float b, bool z) { return z ? ftz(ftz(a) / ftz(b)) : a / b; }
inline float fma_f32(float a, float b, float c, bool z) {
    return z ? ftz(std::fma(ftz(a), ftz(b), ftz(c))) : std::fma(a, b, c);
}
inline float sqrt_f32(float a, bool z) { return z ? ftz(std::sqrt(ftz(a))) : std::sqrt(a); }
inline float neg_f32(float a, bool z) { return z ? ftz(-a) : -a; }
inline float abs_f32(float a, bool z) { return z ? ftz(std::fabs(a)) : std::fabs(a); }
inline float min_f32(float a, float b, bool z) { return z ? ftz(std::fmin(ftz(a), ftz(b))) : std::fmin(a, b); }
inline float max_f32(float a, float b, bool z) { return z ? ftz(std::fmax(ftz(a), ftz(b))) : std::fmax(a, b); }
inline double add_f64(double a, double b) { return a + b; }
inline double sub_f64(double a, double b) { return a - b; }
inline double mul_f64(double a, double b) { return a * b; }
inline double div_f64(double a, double b) { return a / b; }
inline double fma_f64(double a, double b, double c) { return std::fma(a, b, c); }
inline double sqrt_f64(double a) { return std::sqrt(a); }
inline double neg_f64(double a) { return -a; }
inline double abs_f64(double a) { return std::fabs(a); }
inline double min_f64(double a, double b) { return std::fmin(a, b); }
inline double max_f64(double a, double b) { return std::fmax(a, b); }
// mov.bNN: a bit copy between operands of one width (e.g. "=r"(unsigned) from "f"(float)).
template <class D, class S> inline void mov(D &dst, const S &src) {
    if constexpr (sizeof(D) == sizeof(S) && std::is_trivially_copyable<S>::value) {
        std::memcpy(&dst, &src, sizeof(D));
    } else {
        dst = (D)src;
    }
}
inline float f32_bits(unsigned bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}
inline double f64_bits(unsigned long long bits) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
}
}  // namespace ptx

}  // namespace hostcuda

// ---- built-in variables ------------------------------------------------------------------------
// Const references to the runtime's variables: the compiler re-reads them after every call into
// the scheduler (a fiber switch), and kernels cannot assign them.
#ifdef HOSTCUDA_SERIAL
// The serial build (runtime_serial.cpp, CPU devices) runs one thread per block: threadIdx and
// blockDim are constants, so a block's `i += blockDim.x` loop is a unit-stride loop g++ vectorises.
namespace hostcuda {
inline constexpr uint3 kSerialThreadIdx{0, 0, 0};
inline constexpr dim3 kSerialBlockDim(1, 1, 1);
}  // namespace hostcuda
#define threadIdx (::hostcuda::kSerialThreadIdx)
#define blockDim (::hostcuda::kSerialBlockDim)
#else
#define threadIdx (static_cast<const uint3 &>(::hostcuda::g_thread_idx))
#define blockDim (static_cast<const dim3 &>(::hostcuda::g_block_dim))
#endif
#define blockIdx (static_cast<const uint3 &>(::hostcuda::g_block_idx))
#define gridDim (static_cast<const dim3 &>(::hostcuda::g_grid_dim))
#define warpSize 32

// ---- synchronisation ---------------------------------------------------------------------------
#define __syncthreads() ((void)::hostcuda::block_op(::hostcuda::kBarrier, 0, __FILE__, __LINE__))
#define __syncthreads_count(pred) ::hostcuda::block_op(::hostcuda::kBarrierCount, !!(pred), __FILE__, __LINE__)
#define __syncthreads_and(pred) ::hostcuda::block_op(::hostcuda::kBarrierAnd, !!(pred), __FILE__, __LINE__)
#define __syncthreads_or(pred) ::hostcuda::block_op(::hostcuda::kBarrierOr, !!(pred), __FILE__, __LINE__)
#define __syncwarp(...) ::hostcuda::syncwarp_at(__FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_sync(mask, ...) ::hostcuda::shfl(::hostcuda::kShflIdx, __FILE__, __LINE__, mask, __VA_ARGS__)
#define __shfl_up_sync(mask, ...) ::hostcuda::shfl(::hostcuda::kShflUp, __FILE__, __LINE__, mask, __VA_ARGS__)
#define __shfl_down_sync(mask, ...) ::hostcuda::shfl(::hostcuda::kShflDown, __FILE__, __LINE__, mask, __VA_ARGS__)
#define __shfl_xor_sync(mask, ...) ::hostcuda::shfl(::hostcuda::kShflXor, __FILE__, __LINE__, mask, __VA_ARGS__)
#define __ballot_sync(mask, pred) \
    ((unsigned)::hostcuda::warp_op(::hostcuda::kBallot, mask, !!(pred), 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, pred) ((int)::hostcuda::warp_op(::hostcuda::kAny, mask, !!(pred), 0, 32, __FILE__, __LINE__))
#define __all_sync(mask, pred) ((int)::hostcuda::warp_op(::hostcuda::kAll, mask, !!(pred), 0, 32, __FILE__, __LINE__))
#define __trap() ::hostcuda::trap("__trap()", __FILE__, __LINE__)

namespace hostcuda {
inline void syncwarp_at(const char *file, int line, unsigned mask = 0xffffffffu) {
    warp_op(kSyncWarp, mask, 0, 0, 32, file, line);
}
}  // namespace hostcuda

inline unsigned __activemask() { return ::hostcuda::active_mask(); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline long long clock64() { return ::hostcuda::clock_ticks(); }
inline void __nanosleep(unsigned) {}
template <class T> inline T __ldg(const T *p) { return *p; }

// ---- atomics: fibers never switch inside one, so a plain read-modify-write is atomic ----------
#define HOSTCUDA_ATOMIC(NAME, T, EXPR)                                                                    \
    inline T NAME(T *address, T val) {                                                                    \
        HOSTCUDA_ATOMIC_GUARD();                                                                          \
        T old = *address;                                                                                 \
        *address = (EXPR);                                                                                \
        return old;                                                                                       \
    }                                                                                                     \
    inline T NAME##_block(T *address, T val) { return NAME(address, val); }                              \
    inline T NAME##_system(T *address, T val) { return NAME(address, val); }
HOSTCUDA_ATOMIC(atomicAdd, int, old + val)
HOSTCUDA_ATOMIC(atomicAdd, unsigned int, old + val)
HOSTCUDA_ATOMIC(atomicAdd, unsigned long long, old + val)
HOSTCUDA_ATOMIC(atomicAdd, float, old + val)
HOSTCUDA_ATOMIC(atomicAdd, double, old + val)
HOSTCUDA_ATOMIC(atomicAdd, __half, __float2half_rn(__half2float(old) + __half2float(val)))
HOSTCUDA_ATOMIC(atomicAdd, __nv_bfloat16, __float2bfloat16_rn(__bfloat162float(old) + __bfloat162float(val)))
HOSTCUDA_ATOMIC(atomicSub, int, old - val)
HOSTCUDA_ATOMIC(atomicSub, unsigned int, old - val)
HOSTCUDA_ATOMIC(atomicExch, int, val)
HOSTCUDA_ATOMIC(atomicExch, unsigned int, val)
HOSTCUDA_ATOMIC(atomicExch, unsigned long long, val)
HOSTCUDA_ATOMIC(atomicExch, float, val)
HOSTCUDA_ATOMIC(atomicMin, int, val < old ? val : old)
HOSTCUDA_ATOMIC(atomicMin, unsigned int, val < old ? val : old)
HOSTCUDA_ATOMIC(atomicMin, long long, val < old ? val : old)
HOSTCUDA_ATOMIC(atomicMin, unsigned long long, val < old ? val : old)
HOSTCUDA_ATOMIC(atomicMax, int, val > old ? val : old)
HOSTCUDA_ATOMIC(atomicMax, unsigned int, val > old ? val : old)
HOSTCUDA_ATOMIC(atomicMax, long long, val > old ? val : old)
HOSTCUDA_ATOMIC(atomicMax, unsigned long long, val > old ? val : old)
HOSTCUDA_ATOMIC(atomicAnd, int, old & val)
HOSTCUDA_ATOMIC(atomicAnd, unsigned int, old & val)
HOSTCUDA_ATOMIC(atomicAnd, unsigned long long, old & val)
HOSTCUDA_ATOMIC(atomicOr, int, old | val)
HOSTCUDA_ATOMIC(atomicOr, unsigned int, old | val)
HOSTCUDA_ATOMIC(atomicOr, unsigned long long, old | val)
HOSTCUDA_ATOMIC(atomicXor, int, old ^ val)
HOSTCUDA_ATOMIC(atomicXor, unsigned int, old ^ val)
HOSTCUDA_ATOMIC(atomicXor, unsigned long long, old ^ val)
HOSTCUDA_ATOMIC(atomicInc, unsigned int, old >= val ? 0u : old + 1u)
HOSTCUDA_ATOMIC(atomicDec, unsigned int, (old == 0u || old > val) ? val : old - 1u)
#undef HOSTCUDA_ATOMIC
#define HOSTCUDA_ATOMIC_CAS(T)                                                                            \
    inline T atomicCAS(T *address, T compare, T val) {                                                    \
        HOSTCUDA_ATOMIC_GUARD();                                                                          \
        T old = *address;                                                                                 \
        if (old == compare) *address = val;                                                               \
        return old;                                                                                       \
    }
HOSTCUDA_ATOMIC_CAS(int)
HOSTCUDA_ATOMIC_CAS(unsigned int)
HOSTCUDA_ATOMIC_CAS(unsigned long long)
HOSTCUDA_ATOMIC_CAS(unsigned short)
#undef HOSTCUDA_ATOMIC_CAS

// ---- math intrinsics: IEEE host arithmetic ----------------------------------------------------
// The _rn forms are exact IEEE operations on the GPU and here. The fast approximations (__expf,
// rsqrtf, __fdividef, ...) are the correctly rounded (or libm) host functions: their GPU error
// is not reproduced.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __frsqrt_rn(float a) { return 1.0f / sqrtf(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline double __drcp_rn(double a) { return 1.0 / a; }
inline double __dsqrt_rn(double a) { return sqrt(a); }
inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
inline double rsqrt(double a) { return 1.0 / sqrt(a); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __expf(float a) { return expf(a); }
inline float __exp10f(float a) { return powf(10.0f, a); }
inline float __logf(float a) { return logf(a); }
inline float __log2f(float a) { return log2f(a); }
inline float __log10f(float a) { return log10f(a); }
inline float __sinf(float a) { return sinf(a); }
inline float __cosf(float a) { return cosf(a); }
inline float __tanf(float a) { return tanf(a); }
inline float __powf(float a, float b) { return powf(a, b); }
inline float __saturatef(float a) { return a != a ? 0.0f : (a < 0.0f ? 0.0f : (a > 1.0f ? 1.0f : a)); }
inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }
inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    x = ((x >> 8) & 0x00ff00ffu) | ((x & 0x00ff00ffu) << 8);
    return (x >> 16) | (x << 16);
}
inline int __mul24(int a, int b) { return (int)((long long)(a << 8 >> 8) * (b << 8 >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __mulhi(int a, int b) { return (int)(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

#endif  // MXLITE_HOSTCUDA_CUDA_HOST_H

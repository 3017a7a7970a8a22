// Fused optimizer updates over a flat parameter arena: one launch updates every parameter.
//
// One kernel per rule, each templated on the weight storage type T (float, __half,
// __nv_bfloat16) and the gradient type G (T by default; __half or __nv_bfloat16 when the update
// reads a gradient summed in half precision on the wire, mxlite/comm/narrow.py, with no cast back
// to float32 first); the math is always float32 and follows the rule's `step` in
// mxlite/optimizer/<rule>.py operation by operation (that NumPy code is the kernel's twin).
//
//   sgd_update       G = clip(rescale*g) + wd*w; mom = mu*mom - lr*G; w += mom   (no mom: w -= lr*G)
//                    nesterov != 0 (NAG): w += mu*mom - lr*G with the new mom
//   adam_update      m = b1*m + (1-b1)*G; v = b2*v + (1-b2)*G^2; w -= lr_t*m/(sqrt(v)+eps)
//   adamw_update     as Adam on G = clip(rescale*g); w -= eta*(m/(sqrt(v)+eps) + wd*w)  (wd*w only if wd != 0)
//   nadam_update     m, v as Adam; w -= (a*m + b*G)/(sqrt(v/c2)+eps), with the momentum schedule folded
//                    into a = lr*mu_t/(1-S_t*mu_t+1), b = lr*(1-mu_t)/(1-S_t) and c2 = 1-b2^t by the host
//   adabelief_update G = clip(rescale*g + wd*w); m as Adam; s = b2*s + (1-b2)*(G-m)^2 + eps;
//                    w -= lr_t*m/(sqrt(s)+eps)
//   rmsprop_update   n = rho*n + (1-rho)*G^2; plain: w -= lr*G/(sqrt(n)+eps); centered: mean and
//                    delta = mu*delta - lr*G/sqrt(n - mean^2 + eps), w += delta; then clip_weights
//   adagrad_update   h += G^2; w -= lr*G/(sqrt(h)+eps)
//   adadelta_update  acc_g, d = sqrt(acc_d+eps)/sqrt(acc_g+eps)*G, acc_d; w -= lr*d
//   signum_update    mom = mu*mom - (1-mu)*G; w = decay*w + lr*sign(mom)   (no mom: w = decay*w - lr*sign(g))
//   ftrl_update      FTRL-proximal: z, n; w = -sign(z)*max(|z|-l1, 0) / ((beta+sqrt(n))/lr + wd)
//   lamb_phase1/2    LAMB in two launches: phase 1 updates m, v and sums ||w||^2 and ||u||^2 per
//                    parameter; phase 2 recomputes u from m, v and applies w -= lr*(r1/r2)*u
//   lars_norms/lars_update  LARS in two launches: per-parameter ||w||^2 and ||g||^2, then the
//                    momentum update with the trust ratio lr*eta*||w||/(||g|| + wd*||w|| + eps)
//
// Work split (as PyTorch's multi_tensor_apply): the host cuts every parameter of the arena
// into chunks that never straddle two parameters (mxlite/optimizer/_fused.py: GPU_CHUNK = 8192
// elements on a GPU, CHUNK on CPU devices). Block b updates chunk b: elements
// [chunk_start[b], chunk_end[b]) of parameter chunk_seg[b], its threads (256) moving 8 elements
// each per step with 16-byte loads and stores where the buffers allow (see "streams" below). Gradients lie in
// the arena's gradient buffer in reverse order, so element i of parameter s has its gradient at
// grad[i + seg_gshift[s]]. Optimizer states are float32 buffers with the weights' layout.
//
// Per-parameter values come from seg_hp, HP floats per parameter refreshed by the host before
// each launch: [0] the learning rate (lr_mult and any bias correction folded in; Nadam: its
// coefficient a, see nadam_update), [1] the weight decay (wd_mult folded in), [2] and [3]
// rule-specific (see each kernel). Per-parameter norms (LAMB, LARS) are summed into seg_sums
// (2 doubles per parameter), zeroed by the host.
//
// master: optional float32 master weights (multi_precision for half types): when not null the
// update reads and writes master, and weight receives its rounded copy. A state pointer that
// is null means the rule runs without that state (e.g. SGD without momentum).
//
// Arithmetic, kept equal to the twins' operation by operation:
// - R1, propagation: a term that a zero hyperparameter switches off is absent, not multiplied by
//   zero. With wd == 0 (wd_mult folded in) the weight never enters the gradient (effective_grad),
//   AdamW's and LAMB's decoupled decay or LARS's trust ratio (wd*||w||), so 0*inf = NaN never turns
//   an infinite weight into NaN, and a NaN or infinite weight never reaches the states of a rule
//   whose states do not read the weight (FTRL's z and LARS's ||w|| do, by definition). Written as a
//   select on the uniform wd, so the host build still vectorises.
// - R2, reductions: the serial host build (one thread per block) sums LAMB's and LARS's norms in a
//   fixed order (sum_over_chunk, block_sum_into), which the twins reproduce
//   (mxlite/optimizer/_fused.py: serial_norm): both CPU modes give the same bits for every rule.
//   A GPU sums in thread order: its norms may differ in the last bit.
// - Compiled with --fmad=false (mxlite/device/kernels.py: NVRTC_OPTIONS): NVRTC would otherwise
//   contract a*b + c into one FMA (one rounding), where NumPy rounds the product and the sum
//   separately. The twins and the rtol-1e-6 kernel-versus-twin tests then hold as written; an FMA
//   would need error-bound tolerances for every rule, and saves nothing measurable in kernels
//   bound by memory bandwidth.
// - Derived constants (1-beta1, 1-beta2, 1-rho, 1-momentum) are arguments: the host computes
//   them in float64 and rounds once to float32, the value NumPy uses when a float32 array meets
//   the Python float `1.0 - beta` in the twin. Computing 1.0f - beta in float32 from the rounded
//   beta would differ from it by up to 2^-24*beta/(1-beta) relative (1.3e-5 for beta2 = 0.999).
// - Clamps, max and sign keep NaN (clamp_keep_nan, max_keep_nan, sign_of) as np.clip,
//   np.maximum and np.sign do: fminf/fmaxf return the other operand, so a NaN gradient would
//   silently become a full step of -clip.
// - CuPy compiles every RawModule with -ftz=true: subnormal float32 values flush to zero on the
//   GPU, where the twins keep them. Results differ only where a value falls below 2^-126.
//
// Expected macros: none. Compiled by cupy.RawModule (NVRTC) with name_expressions for each
// instantiation, and by `nvcc --ptx -arch=sm_80` (same options) in the test suite. CPU devices run
// this same source built by g++ with one thread per block (mxlite/device/_hostcuda: the serial build), so
// every kernel must also be correct for blockDim.x == 1.

#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define HP 4  // floats per parameter in seg_hp


// The chunk-table arguments every kernel takes after its buffers.
#define CHUNK_TABLES                                                                             \
    const int *__restrict__ chunk_seg, const long long *__restrict__ chunk_start,                \
        const long long *__restrict__ chunk_end, const long long *__restrict__ seg_gshift,       \
        const float *__restrict__ seg_hp

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

// This block's chunk: parameter `seg`, elements [begin, end), gradient at i + gshift.
struct Chunk {
    int seg;
    long long begin, end, gshift;
};

__device__ __forceinline__ Chunk this_chunk(const int *chunk_seg, const long long *chunk_start,
                                            const long long *chunk_end, const long long *seg_gshift) {
    const int s = chunk_seg[blockIdx.x];
    return Chunk{s, chunk_start[blockIdx.x], chunk_end[blockIdx.x], seg_gshift[s]};
}

// min(max(x, lo), hi), NaN staying NaN (np.clip); fminf/fmaxf would return a bound for NaN. Written
// with comparisons and selects only (no fminf/fmaxf calls), so that the host build vectorises it.
__device__ __forceinline__ float clamp_keep_nan(float x, float lo, float hi) {
    return x != x ? x : (x < lo ? lo : (x > hi ? hi : x));
}

// max(a, b), NaN when either is NaN (np.maximum); selects only, as above. Between +0 and -0 it returns a,
// np.maximum either one; no result here depends on it (a is |z| - lamda1 or a norm, never -0, and FTRL's b
// is +0; LAMB only asks whether r1 > 0).
__device__ __forceinline__ float max_keep_nan(float a, float b) { return a != a ? a : (b != b ? b : (a >= b ? a : b)); }

// min(a, b), NaN when either is NaN (np.minimum).
__device__ __forceinline__ float min_keep_nan(float a, float b) { return a != a ? a : (b != b ? b : fminf(a, b)); }

// G = clip(rescale * g, +-clip) + wd * w   (clip <= 0 disables clipping; wd == 0: no wd*w term at all, R1)
__device__ __forceinline__ float effective_grad(float g, float w, float rescale, float clip, float wd) {
    g *= rescale;
    if (clip > 0.0f) g = clamp_keep_nan(g, -clip, clip);
    return wd != 0.0f ? g + wd * w : g;  // a select: wd is uniform per chunk, the host build still vectorises
}

// -1, 0 or 1, and NaN for NaN (np.sign; np.sign(-0.0) is +0.0, as here).
__device__ __forceinline__ float sign_of(float x) { return x != x ? x : (float)((x > 0.0f) - (x < 0.0f)); }

__device__ __forceinline__ float warp_sum(float x) {
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_down_sync(0xffffffffu, x, offset);
    return x;
}

// Adds the sum of `x` over the block to *out: one atomic per block (blockDim.x 1 or a multiple of 32).
// A one-thread block (the serial host build CPU devices run, mxlite/device/_hostcuda) adds its own sum.
__device__ void block_sum_into(double *out, float x) {
    if (blockDim.x == 1) {
        atomicAdd(out, (double)x);
        return;
    }
    __shared__ float warp_totals[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    x = warp_sum(x);
    __syncthreads();  // a previous call may still be reading warp_totals
    if (lane == 0) warp_totals[warp] = x;
    __syncthreads();
    if (warp == 0) {
        x = lane < (int)(blockDim.x >> 5) ? warp_totals[lane] : 0.0f;
        x = warp_sum(x);
        if (lane == 0) atomicAdd(out, (double)x);
    }
}


// ---- streams: how a kernel walks its per-element buffers ------------------------------------------------
//
// A kernel names the buffers it touches per element as streams: In (read), InOut (read, then written)
// or Out (written), each a pointer to the chunk's first element. stream_chunk and sum_chunk load every
// stream's value of an element into a float (to_f32), run the rule's body on those floats, and store the
// written ones back (from_f32): the body is the rule's math on one element, and it is the same whichever
// way the loop reads memory, so every path below gives the twins' bits.
//
// Access width: where every stream of the chunk is 16-byte aligned at the same element, the loop moves
// kGroup elements per thread and step with 16-byte loads and stores (two float4 per float32 buffer, one
// per 8 half-precision values), all of a group's loads issued before its math: that is what keeps enough
// bytes in flight per SM for the kernels to run at the memory's speed. The elements before that point
// (the head, fewer than kGroup) and after the last whole group (the tail) go one at a time. Arenas align
// every parameter to 16 elements (mxlite/store.py: ALIGN) and device buffers to 256 bytes, so an
// unsharded update has no head; a shard's slice of the arena may start anywhere, and a chunk whose
// buffers are not co-aligned at all (a gradient offset that differs from the weight's modulo 4) runs
// element by element. In the serial host build the group is one 8-wide loop body, which g++ vectorises.

constexpr int kGroup = 8;  // elements per thread and step on the vector path; 16 bytes of half, 32 of float

template <typename T>
struct alignas(16) Pack16 {  // 16 bytes of T
    T v[16 / sizeof(T)];
};

template <typename T> __device__ __forceinline__ bool aligned16(const T *p) {
    return (reinterpret_cast<unsigned long long>(p) & 15ull) == 0;
}

template <typename T> __device__ __forceinline__ void load_group(const T *p, float *out) {
    constexpr int per = 16 / sizeof(T);
    for (int q = 0; q < kGroup / per; ++q) {
        const Pack16<T> pack = reinterpret_cast<const Pack16<T> *>(p)[q];
        for (int k = 0; k < per; ++k) out[q * per + k] = to_f32(pack.v[k]);
    }
}

template <typename T> __device__ __forceinline__ void store_group(T *p, const float *in) {
    constexpr int per = 16 / sizeof(T);
    for (int q = 0; q < kGroup / per; ++q) {
        Pack16<T> pack;
        for (int k = 0; k < per; ++k) pack.v[k] = from_f32<T>(in[q * per + k]);
        reinterpret_cast<Pack16<T> *>(p)[q] = pack;
    }
}

// A read-only stream: v[k] holds element k of the current group (v[0] on the one-at-a-time path).
template <typename T> struct In {
    const T *p;
    float v[kGroup];
    __device__ __forceinline__ bool aligned_at(int i) const { return aligned16(p + i); }
    __device__ __forceinline__ void load(int i) { load_group(p + i, v); }
    __device__ __forceinline__ void store(int) {}
    __device__ __forceinline__ void load1(int i) { v[0] = to_f32(p[i]); }
    __device__ __forceinline__ void store1(int) {}
};

// Read, then written back (rounded to T).
template <typename T> struct InOut {
    T *p;
    float v[kGroup];
    __device__ __forceinline__ bool aligned_at(int i) const { return aligned16(p + i); }
    __device__ __forceinline__ void load(int i) { load_group(p + i, v); }
    __device__ __forceinline__ void store(int i) { store_group(p + i, v); }
    __device__ __forceinline__ void load1(int i) { v[0] = to_f32(p[i]); }
    __device__ __forceinline__ void store1(int i) { p[i] = from_f32<T>(v[0]); }
};

// Written only (the storage copy of a master weight).
template <typename T> struct Out {
    T *p;
    float v[kGroup];
    __device__ __forceinline__ bool aligned_at(int i) const { return aligned16(p + i); }
    __device__ __forceinline__ void load(int) {}
    __device__ __forceinline__ void store(int i) { store_group(p + i, v); }
    __device__ __forceinline__ void load1(int) {}
    __device__ __forceinline__ void store1(int i) { p[i] = from_f32<T>(v[0]); }
};

// The first element (< kGroup) at which every stream is 16-byte aligned, or -1 if there is none.
template <typename... S> __device__ __forceinline__ int common_alignment(const S &...s) {
    int head = -1;
    for (int h = kGroup - 1; h >= 0; --h)
        if ((s.aligned_at(h) && ...)) head = h;
    return head;
}

// Runs body(v...) on every element of a chunk of n elements, v the streams' values (float &).
template <typename Body, typename... S>
__device__ __forceinline__ void stream_chunk(int n, Body body, S... s) {
    const int head = common_alignment(s...);
    const int first = head < 0 ? n : (head < n ? head : n);  // the vector path covers [first, last)
    const int groups = (n - first) / kGroup;
    const int last = first + groups * kGroup;
    for (int i = threadIdx.x; i < first; i += blockDim.x) {  // the head, one element at a time
        (s.load1(i), ...);
        body(s.v[0]...);
        (s.store1(i), ...);
    }
    for (int gi = threadIdx.x; gi < groups; gi += blockDim.x) {
        const int i = first + gi * kGroup;
        (s.load(i), ...);  // every load of the group before any math
        for (int k = 0; k < kGroup; ++k) body(s.v[k]...);
        (s.store(i), ...);
    }
    for (int i = last + threadIdx.x; i < n; i += blockDim.x) {  // the tail
        (s.load1(i), ...);
        body(s.v[0]...);
        (s.store1(i), ...);
    }
}

// Adam's moments of one element, updated in place: m = b1*m + (1-b1)*G, v = b2*v + (1-b2)*G^2 (Adam,
// AdamW, Nadam and LAMB's first phase).
__device__ __forceinline__ void adam_moments(float &m, float &v, float g, float beta1, float one_minus_beta1,
                                             float beta2, float one_minus_beta2) {
    m = beta1 * m + one_minus_beta1 * g;      // m = b1*m + (1-b1)*G
    v = beta2 * v + one_minus_beta2 * g * g;  // v = b2*v + (1-b2)*G^2
}

// Runs update(w, state values...) on every element of this block's chunk: w is the float32 weight
// (master copy or storage), updated in place, then stored (and rounded into the storage type when
// there is a master); `states` are further streams, based at the chunk's first element.
//
// Optional buffers (master here, a rule's optional state in the kernels below) are tested once per
// block, outside the element loop, never per element: on a GPU the branch is uniform either way, but the
// host build (one thread per block) can only vectorise a loop without conditional loads and stores.
template <typename T, typename Update, typename... S>
__device__ __forceinline__ void for_each_weight(T *weight, float *master, const Chunk &c, Update update,
                                                S... states) {
    const int n = (int)(c.end - c.begin);
    if (master) {
        stream_chunk(n, [&](float &w, float &out, auto &...v) { update(w, v...); out = w; },
                     InOut<float>{master + c.begin}, Out<T>{weight + c.begin}, states...);
    } else {
        stream_chunk(n, [&](float &w, auto &...v) { update(w, v...); }, InOut<T>{weight + c.begin}, states...);
    }
}

// As for_each_weight, with the gradient's value (float32) after the weight: update(w, g, state values...).
template <typename T, typename G, typename Update, typename... S>
__device__ __forceinline__ void for_each_element(T *weight, const G *grad, float *master, const Chunk &c,
                                                 Update update, S... states) {
    for_each_weight(weight, master, c, update, In<G>{grad + (c.begin + c.gshift)}, states...);
}

// A float32 state stream of this chunk (read and written, or read only).
__device__ __forceinline__ InOut<float> state(float *buf, const Chunk &c) { return InOut<float>{buf + c.begin}; }
__device__ __forceinline__ In<float> state_in(const float *buf, const Chunk &c) { return In<float>{buf + c.begin}; }

// Two float sums, for the per-parameter norms of LAMB and LARS.
struct SumPair {
    float a, b;
};

constexpr int kPartials = kGroup;  // partial sums per thread and per norm, see sum_chunk

// Sums the pairs body(v...) returns over this thread's elements of a chunk of n elements (body may also
// update the InOut streams). Each thread keeps kPartials partial sums per term, added pairwise at the
// end: kPartials independent additions per step instead of one long dependency chain (a few more
// registers on a GPU; in the host build one vector accumulator, so g++ vectorises the loop, which it may
// not do for a single chain without reordering the additions).
//
// Which element goes into which partial sum is fixed for one thread per block (R2, the serial build that
// mxlite/optimizer/_fused.py: serial_norm reproduces): element i of the chunk into sum i % kPartials, in
// order. The vector path keeps that order: it runs only when every stream is aligned at the chunk's
// first element (always so in an unsharded arena), element k of a group goes into sum k, and the tail
// element last + k into sum k. Otherwise the element-at-a-time loop: thread t's elements t + j*blockDim
// in turn into sum j % kPartials.
template <typename Body, typename... S>
__device__ __forceinline__ SumPair sum_chunk(int n, Body body, S... s) {
    float a[kPartials], b[kPartials];
    for (int k = 0; k < kPartials; ++k) a[k] = b[k] = 0.0f;
    if (common_alignment(s...) == 0) {
        const int groups = n / kGroup, last = groups * kGroup;
        for (int gi = threadIdx.x; gi < groups; gi += blockDim.x) {
            const int i = gi * kGroup;
            (s.load(i), ...);
            for (int k = 0; k < kGroup; ++k) {
                const SumPair t = body(s.v[k]...);
                a[k] += t.a;
                b[k] += t.b;
            }
            (s.store(i), ...);
        }
        for (int k = 0; k < kGroup; ++k) {  // the tail: element last + k by thread k % blockDim, into sum k
            if (last + k < n && k % (int)blockDim.x == (int)threadIdx.x) {
                (s.load1(last + k), ...);
                const SumPair t = body(s.v[0]...);
                a[k] += t.a;
                b[k] += t.b;
                (s.store1(last + k), ...);
            }
        }
    } else {
        const int step = blockDim.x;
        int i = threadIdx.x;
        for (; i + (kPartials - 1) * step < n; i += kPartials * step) {
            for (int k = 0; k < kPartials; ++k) {
                (s.load1(i + k * step), ...);
                const SumPair t = body(s.v[0]...);
                a[k] += t.a;
                b[k] += t.b;
                (s.store1(i + k * step), ...);
            }
        }
        for (int k = 0; k < kPartials; ++k) {  // the last < kPartials elements of this thread; a constant k
            if (i + k * step < n) {              // keeps a[] and b[] in registers on a GPU
                (s.load1(i + k * step), ...);
                const SumPair t = body(s.v[0]...);
                a[k] += t.a;
                b[k] += t.b;
                (s.store1(i + k * step), ...);
            }
        }
    }
    for (int width = kPartials / 2; width > 0; width /= 2) {
        for (int k = 0; k < width; ++k) {
            a[k] += a[k + width];
            b[k] += b[k + width];
        }
    }
    return SumPair{a[0], b[0]};
}

// Adds both sums of body(w, g, state values...) over the block's chunk to sums[0] and sums[1]; w is the
// master weight when there is one (read only here), g the gradient.
template <typename T, typename G, typename Body, typename... S>
__device__ __forceinline__ void sum_norms_into(double *sums, const T *weight, const G *grad, const float *master,
                                               const Chunk &c, Body body, S... states) {
    const int n = (int)(c.end - c.begin);
    const In<G> g{grad + (c.begin + c.gshift)};
    const SumPair total = master ? sum_chunk(n, body, In<float>{master + c.begin}, g, states...)
                                 : sum_chunk(n, body, In<T>{weight + c.begin}, g, states...);
    block_sum_into(&sums[0], total.a);
    block_sum_into(&sums[1], total.b);
}

}  // namespace

// seg_hp: [lr, wd]. SGD with momentum, and NAG (MXNet's nag_mom_update) when nesterov != 0: one kernel,
// the flag tested once per chunk, outside the element loops.
template <typename T, typename G = T>
__global__ void sgd_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                       float *__restrict__ mom, float *__restrict__ master,
                                                       CHUNK_TABLES, float rescale, float clip, float momentum,
                                                       float nesterov) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float lr = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1];
    if (!mom) {
        for_each_element(weight, grad, master, c, [&](float &w, float raw) {
            w -= lr * effective_grad(raw, w, rescale, clip, wd);  // w -= lr*G
        });
    } else if (nesterov != 0.0f) {
        for_each_element(weight, grad, master, c, [&](float &w, float raw, float &m) {
            const float g = effective_grad(raw, w, rescale, clip, wd);
            m = momentum * m - lr * g;                   // mom = mu*mom - lr*G
            w += momentum * m - lr * g;                  // w += mu*mom - lr*G
        }, state(mom, c));
    } else {
        for_each_element(weight, grad, master, c, [&](float &w, float raw, float &m) {
            const float g = effective_grad(raw, w, rescale, clip, wd);
            m = momentum * m - lr * g;                   // mom = mu*mom - lr*G
            w += m;                                      // w += mom
        }, state(mom, c));
    }
}

// seg_hp: [lr_t = lr*sqrt(1-b2^t)/(1-b1^t), wd]
template <typename T, typename G = T>
__global__ void adam_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                        float *__restrict__ mean, float *__restrict__ var,
                                                        float *__restrict__ master, CHUNK_TABLES, float rescale,
                                                        float clip, float beta1, float one_minus_beta1,
                                                        float beta2, float one_minus_beta2, float epsilon) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float lr_t = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1];
    for_each_element(weight, grad, master, c, [&](float &w, float raw, float &m, float &v) {
        const float g = effective_grad(raw, w, rescale, clip, wd);
        adam_moments(m, v, g, beta1, one_minus_beta1, beta2, one_minus_beta2);
        w -= lr_t * m / (sqrtf(v) + epsilon);                     // w -= lr_t*m/(sqrt(v)+eps)
    }, state(mean, c), state(var, c));
}

// seg_hp: [eta = lr (times the bias correction with correct_bias), wd (decoupled)]
template <typename T, typename G = T>
__global__ void adamw_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                         float *__restrict__ mean, float *__restrict__ var,
                                                         float *__restrict__ master, CHUNK_TABLES, float rescale,
                                                         float clip, float beta1, float one_minus_beta1,
                                                         float beta2, float one_minus_beta2, float epsilon) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float eta = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1];
    for_each_element(weight, grad, master, c, [&](float &w, float raw, float &m, float &v) {
        const float g = effective_grad(raw, w, rescale, clip, 0.0f);
        adam_moments(m, v, g, beta1, one_minus_beta1, beta2, one_minus_beta2);
        float d = m / (sqrtf(v) + epsilon);              // w -= eta*(m/(sqrt(v)+eps) + wd*w)
        if (wd != 0.0f) d = d + wd * w;                  //   (no wd*w term when wd == 0, R1)
        w -= eta * d;
    }, state(mean, c), state(var, c));
}

// Nadam. seg_hp: [a = lr*mu_t/(1 - S_t*mu_t+1), wd, b = lr*(1 - mu_t)/(1 - S_t), c2 = 1 - b2^t]: the
// per-parameter momentum schedule (mu_t, S_t of the parameter's update count t) folded in by the host
// (mxlite/optimizer/nadam.py: Nadam._coefficients, which the twin Nadam.step uses too).
template <typename T, typename G = T>
__global__ void nadam_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                         float *__restrict__ mean, float *__restrict__ var,
                                                         float *__restrict__ master, CHUNK_TABLES, float rescale,
                                                         float clip, float beta1, float one_minus_beta1,
                                                         float beta2, float one_minus_beta2, float epsilon) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float a = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1];
    const float b = seg_hp[HP * c.seg + 2], c2 = seg_hp[HP * c.seg + 3];
    for_each_element(weight, grad, master, c, [&](float &w, float raw, float &m, float &v) {
        const float g = effective_grad(raw, w, rescale, clip, wd);
        adam_moments(m, v, g, beta1, one_minus_beta1, beta2, one_minus_beta2);
        w -= (a * m + b * g) / (sqrtf(v / c2) + epsilon);         // w -= (a*m + b*G)/(sqrt(v/c2)+eps)
    }, state(mean, c), state(var, c));
}

// AdaBelief. seg_hp: [lr_t = lr*sqrt(1-b2^t)/(1-b1^t) (lr without correct_bias), wd]. The weight decay
// enters before clipping (MXNet 2.x), and only when wd != 0, as in AdaBelief.step.
template <typename T, typename G = T>
__global__ void adabelief_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                             float *__restrict__ mean, float *__restrict__ var,
                                                             float *__restrict__ master, CHUNK_TABLES,
                                                             float rescale, float clip, float beta1,
                                                             float one_minus_beta1, float beta2,
                                                             float one_minus_beta2, float epsilon) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float lr_t = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1];
    for_each_element(weight, grad, master, c, [&](float &w, float raw, float &mean_i, float &var_i) {
        float g = raw * rescale;
        if (wd != 0.0f) g = g + wd * w;                            // G = rescale*g + wd*w
        if (clip > 0.0f) g = clamp_keep_nan(g, -clip, clip);       //   then clipped
        const float m = beta1 * mean_i + one_minus_beta1 * g;      // m = b1*m + (1-b1)*G
        const float d = g - m;
        const float s = beta2 * var_i + one_minus_beta2 * d * d + epsilon;  // s = b2*s + (1-b2)*(G-m)^2 + eps
        mean_i = m;
        var_i = s;
        w -= lr_t * m / (sqrtf(s) + epsilon);                     // w -= lr_t*m/(sqrt(s)+eps)
    }, state(mean, c), state(var, c));
}

// seg_hp: [lr, wd]. mean and delta are null for plain RMSProp; clip_weights <= 0 disables clipping.
template <typename T, typename G = T>
__global__ void rmsprop_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                           float *__restrict__ n_buf, float *__restrict__ mean,
                                                           float *__restrict__ delta, float *__restrict__ master,
                                                           CHUNK_TABLES, float rescale, float clip, float rho,
                                                           float one_minus_rho, float momentum, float epsilon,
                                                           float clip_weights) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float lr = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1];
    if (mean) {
        for_each_element(weight, grad, master, c, [&](float &w, float raw, float &n_i, float &mean_i, float &delta_i) {
            const float g = effective_grad(raw, w, rescale, clip, wd);
            const float n = rho * n_i + one_minus_rho * g * g;       // n = rho*n + (1-rho)*G^2
            n_i = n;
            const float gbar = rho * mean_i + one_minus_rho * g;     // mean = rho*mean + (1-rho)*G
            mean_i = gbar;
            const float d = momentum * delta_i - lr * g / sqrtf(n - gbar * gbar + epsilon);
            delta_i = d;                                             // delta = mu*delta - lr*G/sqrt(n-mean^2+eps)
            w += d;
            if (clip_weights > 0.0f) w = clamp_keep_nan(w, -clip_weights, clip_weights);
        }, state(n_buf, c), state(mean, c), state(delta, c));
    } else {
        for_each_element(weight, grad, master, c, [&](float &w, float raw, float &n_i) {
            const float g = effective_grad(raw, w, rescale, clip, wd);
            const float n = rho * n_i + one_minus_rho * g * g;       // n = rho*n + (1-rho)*G^2
            n_i = n;
            w -= lr * g / (sqrtf(n) + epsilon);                      // w -= lr*G/(sqrt(n)+eps) (MXNet 2.x)
            if (clip_weights > 0.0f) w = clamp_keep_nan(w, -clip_weights, clip_weights);
        }, state(n_buf, c));
    }
}

// seg_hp: [lr, wd]
template <typename T, typename G = T>
__global__ void adagrad_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                           float *__restrict__ history, float *__restrict__ master,
                                                           CHUNK_TABLES, float rescale, float clip, float epsilon) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float lr = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1];
    for_each_element(weight, grad, master, c, [&](float &w, float raw, float &h_i) {
        const float g = effective_grad(raw, w, rescale, clip, wd);
        const float h = h_i + g * g;         // h = h + G^2
        h_i = h;
        w -= lr * g / (sqrtf(h) + epsilon);  // w -= lr*G/(sqrt(h)+eps)
    }, state(history, c));
}

// seg_hp: [lr, wd]
template <typename T, typename G = T>
__global__ void adadelta_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                            float *__restrict__ acc_g, float *__restrict__ acc_delta,
                                                            float *__restrict__ master, CHUNK_TABLES, float rescale,
                                                            float clip, float rho, float one_minus_rho,
                                                            float epsilon) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float lr = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1];
    for_each_element(weight, grad, master, c, [&](float &w, float raw, float &acc_g_i, float &acc_d_i) {
        const float g = effective_grad(raw, w, rescale, clip, wd);
        const float eg = rho * acc_g_i + one_minus_rho * g * g;          // Eg = rho*Eg + (1-rho)*G^2
        const float d = sqrtf(acc_d_i + epsilon) / sqrtf(eg + epsilon) * g;
        acc_g_i = eg;
        acc_d_i = rho * acc_d_i + one_minus_rho * d * d;                  // Ed = rho*Ed + (1-rho)*d^2
        w -= lr * d;                                                      // w -= lr*d
    }, state(acc_g, c), state(acc_delta, c));
}

// seg_hp: [lr, wd, decay]: decay = 1 - lr*wd_lh with momentum, 1 - lr*(wd + wd_lh) without.
template <typename T, typename G = T>
__global__ void signum_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                          float *__restrict__ mom, float *__restrict__ master,
                                                          CHUNK_TABLES, float rescale, float clip, float momentum,
                                                          float one_minus_momentum) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float lr = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1], decay = seg_hp[HP * c.seg + 2];
    if (mom) {
        for_each_element(weight, grad, master, c, [&](float &w, float raw, float &m_i) {
            const float g = effective_grad(raw, w, rescale, clip, wd);
            const float m = momentum * m_i - one_minus_momentum * g;  // mom = mu*mom - (1-mu)*G
            m_i = m;
            w = w * decay + lr * sign_of(m);                            // w = decay*w + lr*sign(mom)
        }, state(mom, c));
    } else {
        for_each_element(weight, grad, master, c, [&](float &w, float raw) {
            w = w * decay - lr * sign_of(raw);                          // signSGD on the raw gradient
        });
    }
}

// seg_hp: [lr (> 0, checked by the host), wd]
template <typename T, typename G = T>
__global__ void ftrl_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                        float *__restrict__ z_buf, float *__restrict__ n_buf,
                                                        float *__restrict__ master, CHUNK_TABLES, float rescale,
                                                        float clip, float lamda1, float beta) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float lr = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1];
    for_each_element(weight, grad, master, c, [&](float &w, float raw, float &z_i, float &n_i) {
        const float g = effective_grad(raw, w, rescale, clip, 0.0f);
        const float n_old = n_i;
        const float sigma = (sqrtf(n_old + g * g) - sqrtf(n_old)) / lr;  // sigma = (sqrt(n+g^2) - sqrt(n))/lr
        const float z = z_i + (g - sigma * w);                           // z += g - sigma*w
        const float n = n_old + g * g;                                   // n += g^2
        z_i = z;
        n_i = n;
        const float shrunk = sign_of(z) * max_keep_nan(fabsf(z) - lamda1, 0.0f);
        w = -shrunk / ((beta + sqrtf(n)) / lr + wd);                      // w = -shrunk/((beta+sqrt(n))/lr + wd)
    }, state(z_buf, c), state(n_buf, c));
}

// LAMB. seg_hp: [lr, wd, c1 = 1 - b1^t, c2 = 1 - b2^t] (1 without bias correction).
// u = (m/c1)/(sqrt(v/c2) + eps) + wd*w; phase 1 updates m, v and adds ||w||^2, ||u||^2 to seg_sums.
template <typename T, typename G = T>
__global__ void lamb_phase1(const T *__restrict__ weight, const G *__restrict__ grad,
                                                        float *__restrict__ mean, float *__restrict__ var,
                                                        const float *__restrict__ master, CHUNK_TABLES,
                                                        double *__restrict__ seg_sums, float rescale, float clip,
                                                        float beta1, float one_minus_beta1, float beta2,
                                                        float one_minus_beta2, float epsilon) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float wd = seg_hp[HP * c.seg + 1], c1 = seg_hp[HP * c.seg + 2], c2 = seg_hp[HP * c.seg + 3];
    sum_norms_into(&seg_sums[2 * c.seg], weight, grad, master, c, [&](float w, float raw, float &m, float &v) {
        const float g = effective_grad(raw, w, rescale, clip, 0.0f);
        adam_moments(m, v, g, beta1, one_minus_beta1, beta2, one_minus_beta2);
        float u = (m / c1) / (sqrtf(v / c2) + epsilon);
        if (wd != 0.0f) u = u + wd * w;                            // u += wd*w (R1: absent when wd == 0)
        return SumPair{w * w, u * u};                              // ||w||^2, ||u||^2
    }, state(mean, c), state(var, c));
}

// Phase 2: r1 = clamp(||w||, lower, upper) (a bound < 0 is absent), r2 = ||u||; w -= lr*r*u with
// r = r1/r2, or 1 when either norm is 0.
template <typename T>
__global__ void lamb_phase2(T *__restrict__ weight, const float *__restrict__ mean,
                                                        const float *__restrict__ var, float *__restrict__ master,
                                                        CHUNK_TABLES, const double *__restrict__ seg_sums,
                                                        float epsilon, float lower_bound, float upper_bound) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    const float lr = seg_hp[HP * c.seg], wd = seg_hp[HP * c.seg + 1];
    const float c1 = seg_hp[HP * c.seg + 2], c2 = seg_hp[HP * c.seg + 3];
    float r1 = (float)sqrt(seg_sums[2 * c.seg]);
    if (lower_bound >= 0.0f) r1 = max_keep_nan(r1, lower_bound);
    if (upper_bound >= 0.0f) r1 = min_keep_nan(r1, upper_bound);
    const float r2 = (float)sqrt(seg_sums[2 * c.seg + 1]);
    const float step = lr * ((r1 > 0.0f && r2 > 0.0f) ? r1 / r2 : 1.0f);
    for_each_weight(weight, master, c, [&](float &w, float m, float v) {
        float u = (m / c1) / (sqrtf(v / c2) + epsilon);
        if (wd != 0.0f) u = u + wd * w;
        w -= step * u;
    }, state_in(mean, c), state_in(var, c));
}

// LARS phase 1: ||w||^2 and ||g||^2 (raw gradient) of every parameter into seg_sums.
template <typename T, typename G = T>
__global__ void lars_norms(const T *__restrict__ weight, const G *__restrict__ grad,
                                                       const float *__restrict__ master, CHUNK_TABLES,
                                                       double *__restrict__ seg_sums) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    sum_norms_into(&seg_sums[2 * c.seg], weight, grad, master, c, [&](float w, float g) {
        return SumPair{w * w, g * g};  // ||w||^2, ||g||^2
    });
}

// LARS phase 2. seg_hp: [lr, wd, excluded (1: bias/batch-norm parameter, trust ratio 1)].
// lambda = eta*||w||/(||g||*|rescale| + wd*||w|| + eps) when both norms are > 0, else 1;
// G = clip(rescale*g) + wd*w; mom = mu*mom - lr*lambda*G; w += mom (no mom: w -= lr*lambda*G).
template <typename T, typename G = T>
__global__ void lars_update(T *__restrict__ weight, const G *__restrict__ grad,
                                                        float *__restrict__ mom, float *__restrict__ master,
                                                        CHUNK_TABLES, const double *__restrict__ seg_sums,
                                                        float rescale, float clip, float momentum, float eta,
                                                        float epsilon) {
    const Chunk c = this_chunk(chunk_seg, chunk_start, chunk_end, seg_gshift);
    float lr = seg_hp[HP * c.seg];
    const float wd = seg_hp[HP * c.seg + 1];
    if (seg_hp[HP * c.seg + 2] == 0.0f) {
        const float w_norm = (float)sqrt(seg_sums[2 * c.seg]);
        const float g_norm = (float)sqrt(seg_sums[2 * c.seg + 1]) * fabsf(rescale);
        if (w_norm > 0.0f && g_norm > 0.0f) {
            float d = g_norm;
            if (wd != 0.0f) d = d + wd * w_norm;  // R1: no wd*||w|| term when wd == 0
            lr *= eta * w_norm / (d + epsilon);
        }
    }
    if (mom) {
        for_each_element(weight, grad, master, c, [&](float &w, float raw, float &m_i) {
            const float g = effective_grad(raw, w, rescale, clip, wd);
            const float m = momentum * m_i - lr * g;  // mom = mu*mom - lr*lambda*G
            m_i = m;
            w += m;                                   // w += mom
        }, state(mom, c));
    } else {
        for_each_element(weight, grad, master, c, [&](float &w, float raw) {
            w -= lr * effective_grad(raw, w, rescale, clip, wd);  // w -= lr*lambda*G
        });
    }
}

// No explicit instantiations: each variant is compiled when named. On a GPU, mxlite compiles one
// variant per module (NVRTC name_expressions: mxlite/device/kernels.py); the host build and the nvcc check
// in the tests take the full list of names from the Python driver.

// Scaled dot-product attention without the T x T matrix: flash attention's online softmax forward, which
// keeps each query row's running maximum and sum and stores only its log-sum-exp, and a backward that
// recomputes the scores block by block from that log-sum-exp.
//
//   attention_forward<T>      q (BH, Tq, Dk), k (BH, Tk, Dk), v (BH, Tk, Dv), all C-contiguous T; writes
//                             out (BH, Tq, Dv) T and lse (BH, Tq) float32: per query row i
//                               s_ij = dot(q_i, k_j) * scale for every key j the row keeps (below),
//                               out_i = sum_j softmax(s_i)_j * dropout_ij * v_j,  lse_i = log(sum_j exp(s_ij))
//                             a row that keeps no key gets out_i = 0 and lse_i = -inf.
//   attention_backward_dq<T>  from dout (BH, Tq, Dv) T, out and lse: writes dq (BH, Tq, Dk) T and
//                             delta (BH, Tq) float32 = rowsum(dout * out), which the next launch reads.
//   attention_backward_dkv<T> from the same and delta: writes dk (BH, Tk, Dk) T and dv (BH, Tk, Dv) T.
//
// Which keys a row keeps: not (causal and j > i) (PyTorch's top-left alignment), not j >= valid_length[b]
// (valid_length: int64 (B,), or null), and mask[b, h, i, j] != 0 where mask (uint8, or null) is read with
// the element strides mask_b, mask_h, mask_q, mask_k (0 on a broadcast axis); bh = b * heads + h.
// Dropout (rng_state non-null): entry (bh, i, j) of the attention weights survives when u >= rate, where u
// is value n % 4 of Philox4x32-10 at counter offset + n / 4, n = (bh * Tq + i) * Tk + j, key and offset read
// from rng_state[0], rng_state[1], u = (word >> 8) * 2^-24: kernels/random.cu's dropout_mask over the
// (BH, Tq, Tk) weights, element for element (the same generator, written out again below). A surviving
// weight is multiplied by drop_scale (1 / (1 - rate), rounded to float32 by the host).
//
// Arithmetic (float32 for every T; T is float, __half or __nv_bfloat16 storage, rounded to nearest even
// when stored) and its order, which the NumPy twin (mxlite/ops/_attention_kernels.py) repeats:
//   dot(a, b): entry d goes to lane d % 8, each lane adds its products in order from 0, then lanes are
//     added pairwise, lane[l] += lane[l + s] for s = 4, 2, 1 (eight independent sums: one vector
//     register in the host build).
//   forward, per query row, keys in blocks of kKeys = 64 from key 0, each block:
//     m_blk = max of the kept s_ij in key order (a NaN wins); a block where the row keeps nothing leaves
//     the row as it was, else m_new = max(m, m_blk), alpha = exp(m - m_new), p_ij = exp(s_ij - m_new),
//     l = l * alpha, then l += p_ij for each kept j in order;
//     acc = acc * alpha, then acc += w_ij * v_j for each kept j that survives dropout, in order, where
//     w_ij = p_ij * drop_scale with dropout, p_ij without.
//     out_i = l == 0 ? 0 : acc / l; lse_i = l == 0 ? -inf : m + log(l) (l >= 1: the maximum's term is 1).
//   backward, per kept (i, j), identical in both launches: s_ij as above, p = exp(s_ij - lse_i),
//     dpd = dot(dout_i, v_j), dp = dropout ? (survives ? dpd * drop_scale : 0) : dpd, ds = p * (dp - delta_i),
//     delta_i = dot(dout_i, out_i);
//     dq_i = (sum over kept j in key order of ds * k_j) * scale,
//     dk_j = (sum over kept i in query order of ds * q_i) * scale,
//     dv_j = sum over kept, surviving i in query order of w_ij * dout_i.
//   exp and log are kernels/ieee_math.cuh's (arguments <= 0 and >= 1), so every target gives the twin's
//   bits; no contraction (--fmad=false, -ffp-contract=off). The block of kKeys keys is the only split that
//   changes a value; rows per thread block (kRows) and threads per block change none, so the emulated GPUs
//   and the serial host build give the twin's bits at any block size.
//
// Work split: a thread block takes kRows query rows (forward, dq) or key rows (dkv) of one (b, h) at a time;
// its threads share the scores of a block of keys (queries), each a whole dot product, and the rows'
// accumulators, each element owned by one thread, which adds in the order above. Accumulators live in shared
// memory (head dimensions up to kMaxHead = 256); the host build (one thread per block) runs the same phases
// as loops, the accumulations vectorised over the head dimension.
// Expected macros: none.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "ieee_math.cuh"

namespace {

constexpr int kLanes = 8;
constexpr int kKeys = 64;      // keys (backward dkv: queries) per block: fixes the rounding (the twin's KEY_BLOCK)
constexpr int kRows = 16;      // rows per thread block: changes no value
constexpr int kMaxHead = 256;  // the largest head dimension (the driver refuses larger)

__device__ __forceinline__ float widen(float x) { return x; }
__device__ __forceinline__ float widen(__half x) { return __half2float(x); }
__device__ __forceinline__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T narrow(float x);
template <> __device__ __forceinline__ float narrow<float>(float x) { return x; }
template <> __device__ __forceinline__ __half narrow<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float minus_infinity() { return __uint_as_float(0xff800000u); }
__device__ __forceinline__ float max_keep_nan(float a, float b) { return (b > a || b != b) ? b : a; }

__device__ __forceinline__ float exp_le0(float y) {
    const ExpParts<float> p = exp_parts(y);
    return p.s + p.s * p.q;
}

// sum of a[d] * b[d], d < n, in the lane order of the header
template <typename T>
__device__ __forceinline__ float dot(const T *__restrict__ a, const T *__restrict__ b, long long n) {
    float lane[kLanes];
    for (int l = 0; l < kLanes; ++l) lane[l] = 0.0f;
    long long d = 0;
    for (; d + kLanes <= n; d += kLanes) {
        for (int l = 0; l < kLanes; ++l) lane[l] = lane[l] + widen(a[d + l]) * widen(b[d + l]);
    }
    for (int l = 0; l < kLanes; ++l) {  // the tail; a constant trip count keeps lane[] in registers on a GPU
        if (d + l < n) lane[l] = lane[l] + widen(a[d + l]) * widen(b[d + l]);
    }
    for (int s = kLanes / 2; s > 0; s >>= 1) {
        for (int l = 0; l < s; ++l) lane[l] = lane[l] + lane[l + s];
    }
    return lane[0];
}

// ---- Philox4x32-10: kernels/random.cu's generator (see its header), for the dropout of the weights ----------
constexpr unsigned int kM0 = 0xD2511F53u;
constexpr unsigned int kM1 = 0xCD9E8D57u;
constexpr unsigned int kW0 = 0x9E3779B9u;
constexpr unsigned int kW1 = 0xBB67AE85u;

// word k (0..3) of the block at `counter` under `key`
__device__ __forceinline__ unsigned int philox_word(unsigned long long counter, unsigned long long key, int k) {
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
    return k == 0 ? c0 : (k == 1 ? c1 : (k == 2 ? c2 : c3));
}

// Which (bh, i, j) a query row keeps (the header's rules).
struct Masking {
    const unsigned char *mask;
    long long stride_b, stride_h, stride_q, stride_k;
    const long long *valid_length;
    long long heads;
    int causal;

    __device__ bool keep(long long bh, long long i, long long j) const {
        if (causal && j > i) return false;
        const long long b = bh / heads;
        if (valid_length != nullptr && j >= valid_length[b]) return false;
        if (mask == nullptr) return true;
        return mask[b * stride_b + (bh - b * heads) * stride_h + i * stride_q + j * stride_k] != 0;
    }

    // keys from which on no row up to `last_row` keeps any (the blocks past it are skipped: all masked)
    __device__ long long key_end(long long bh, long long last_row, long long tk) const {
        long long end = tk;
        if (causal && last_row + 1 < end) end = last_row + 1;
        if (valid_length != nullptr) {
            const long long valid = valid_length[bh / heads];
            if (valid < end) end = valid < 0 ? 0 : valid;
        }
        return end;
    }
};

struct Dropout {
    const unsigned long long *state;  // key, offset; null: no dropout
    float rate, scale;
    long long tq, tk;

    __device__ bool active() const { return state != nullptr; }

    __device__ bool survives(long long bh, long long i, long long j) const {
        const unsigned long long n = (unsigned long long)((bh * tq + i) * tk + j);
        const unsigned int w = philox_word(state[1] + n / 4, state[0], (int)(n % 4));
        return (float)(w >> 8) * 5.9604644775390625e-08f >= rate;  // 2^-24
    }
};

// p and ds of one kept (i, j), the same operations in both backward launches
struct ScoreGrad {
    float p, ds;
    bool survives;
};

template <typename T>
__device__ __forceinline__ ScoreGrad score_grad(const T *q_i, const T *k_j, const T *v_j, const T *dout_i, float lse_i,
                                                float delta_i, float scale, long long dk, long long dv,
                                                const Dropout &dropout, long long bh, long long i, long long j) {
    const float p = exp_le0(dot(q_i, k_j, dk) * scale - lse_i);
    const float dpd = dot(dout_i, v_j, dv);
    ScoreGrad out{p, 0.0f, true};
    float dp = dpd;
    if (dropout.active()) {
        out.survives = dropout.survives(bh, i, j);
        dp = out.survives ? dpd * dropout.scale : 0.0f;
    }
    out.ds = p * (dp - delta_i);
    return out;
}

// acc[r * n + d] += weight[r * kKeys + c] * rows[c][d] for each (r, c) with use[r * kKeys + c] >= need, c in
// order; each element owned by one thread (the host build: one loop over d per (r, c), vectorised).
template <typename T>
__device__ __forceinline__ void accumulate(float *acc, int rows, long long n, const float *weight,
                                           const unsigned char *use, int need, int cols, const T *first_row,
                                           long long row_stride) {
    if (blockDim.x == 1) {
        for (int r = 0; r < rows; ++r) {
            float *a = acc + r * n;
            for (int c = 0; c < cols; ++c) {
                if (use[r * kKeys + c] < need) continue;
                const float w = weight[r * kKeys + c];
                const T *x = first_row + c * row_stride;
                for (long long d = 0; d < n; ++d) a[d] = a[d] + w * widen(x[d]);
            }
        }
        return;
    }
    for (int idx = threadIdx.x; idx < rows * (int)n; idx += blockDim.x) {
        const int r = idx / (int)n, d = idx - r * (int)n;
        float a = acc[idx];
        for (int c = 0; c < cols; ++c) {
            if (use[r * kKeys + c] >= need) a = a + weight[r * kKeys + c] * widen(first_row[c * row_stride + d]);
        }
        acc[idx] = a;
    }
}

}  // namespace

template <typename T>
__global__ void attention_forward(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                  T *__restrict__ out, float *__restrict__ lse, const unsigned char *__restrict__ mask,
                                  long long mask_b, long long mask_h, long long mask_q, long long mask_k,
                                  const long long *__restrict__ valid_length,
                                  const unsigned long long *__restrict__ rng_state, float rate, float drop_scale,
                                  float scale, long long batch_heads, long long heads, long long tq, long long tk,
                                  long long dk, long long dv, int causal) {
    __shared__ float acc[kRows * kMaxHead];
    __shared__ float prob[kRows * kKeys];        // s, then p, of each (row, key) of the block
    __shared__ unsigned char use[kRows * kKeys];  // 0 masked, 1 kept but dropped, 2 kept
    __shared__ float row_max[kRows], row_sum[kRows], row_alpha[kRows];
    __shared__ unsigned char row_live[kRows];
    const Masking masking{mask, mask_b, mask_h, mask_q, mask_k, valid_length, heads, causal};
    const Dropout dropout{rng_state, rate, drop_scale, tq, tk};
    const long long tiles = (tq + kRows - 1) / kRows;
    for (long long tile = blockIdx.x; tile < batch_heads * tiles; tile += gridDim.x) {
        const long long bh = tile / tiles, i0 = (tile - bh * tiles) * kRows;
        const int rows = (int)(tq - i0 < kRows ? tq - i0 : kRows);
        const T *q0 = q + (bh * tq + i0) * dk, *k0 = k + bh * tk * dk, *v0 = v + bh * tk * dv;
        for (int idx = threadIdx.x; idx < rows * (int)dv; idx += blockDim.x) acc[idx] = 0.0f;
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
            row_max[r] = minus_infinity();
            row_sum[r] = 0.0f;
        }
        const long long end = masking.key_end(bh, i0 + rows - 1, tk);
        __syncthreads();
        for (long long j0 = 0; j0 < end; j0 += kKeys) {
            const int cols = (int)(end - j0 < kKeys ? end - j0 : kKeys);
            for (int idx = threadIdx.x; idx < rows * cols; idx += blockDim.x) {  // scores
                const int r = idx / cols, c = idx - r * cols;
                const bool kept = masking.keep(bh, i0 + r, j0 + c);
                use[r * kKeys + c] = kept ? 2 : 0;
                if (kept) prob[r * kKeys + c] = dot(q0 + r * dk, k0 + (j0 + c) * dk, dk) * scale;
            }
            __syncthreads();
            for (int r = threadIdx.x; r < rows; r += blockDim.x) {  // the rows' new maxima
                float m_blk = minus_infinity();
                bool live = false;
                for (int c = 0; c < cols; ++c) {
                    if (use[r * kKeys + c]) {
                        m_blk = max_keep_nan(m_blk, prob[r * kKeys + c]);
                        live = true;
                    }
                }
                row_live[r] = live ? 1 : 0;
                if (live) {
                    const float m_new = max_keep_nan(row_max[r], m_blk);
                    row_alpha[r] = exp_le0(row_max[r] - m_new);
                    row_max[r] = m_new;
                }
            }
            __syncthreads();
            for (int idx = threadIdx.x; idx < rows * cols; idx += blockDim.x) {  // weights, dropout
                const int r = idx / cols, c = idx - r * cols;
                if (!use[r * kKeys + c]) continue;
                prob[r * kKeys + c] = exp_le0(prob[r * kKeys + c] - row_max[r]);
                if (dropout.active() && !dropout.survives(bh, i0 + r, j0 + c)) use[r * kKeys + c] = 1;
            }
            __syncthreads();
            for (int r = threadIdx.x; r < rows; r += blockDim.x) {  // the rows' sums; the accumulators' rescaling
                if (!row_live[r]) continue;
                float l = row_sum[r] * row_alpha[r];
                for (int c = 0; c < cols; ++c) {
                    if (use[r * kKeys + c]) l = l + prob[r * kKeys + c];
                }
                row_sum[r] = l;
                if (dropout.active()) {
                    for (int c = 0; c < cols; ++c) prob[r * kKeys + c] = prob[r * kKeys + c] * dropout.scale;
                }
                float *a = acc + r * dv;
                for (long long d = 0; d < dv; ++d) a[d] = a[d] * row_alpha[r];
            }
            __syncthreads();
            accumulate(acc, rows, dv, prob, use, 2, cols, v0 + j0 * dv, dv);
            __syncthreads();
        }
        for (int idx = threadIdx.x; idx < rows * (int)dv; idx += blockDim.x) {
            const float l = row_sum[idx / (int)dv];
            out[(bh * tq + i0) * dv + idx] = narrow<T>(l == 0.0f ? 0.0f : acc[idx] / l);
        }
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
            lse[bh * tq + i0 + r] = row_sum[r] == 0.0f ? minus_infinity() : row_max[r] + log_ge1(row_sum[r]);
        }
        __syncthreads();
    }
}

template <typename T>
__global__ void attention_backward_dq(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                      const T *__restrict__ out, const T *__restrict__ dout,
                                      const float *__restrict__ lse, T *__restrict__ dq, float *__restrict__ delta,
                                      const unsigned char *__restrict__ mask, long long mask_b, long long mask_h,
                                      long long mask_q, long long mask_k, const long long *__restrict__ valid_length,
                                      const unsigned long long *__restrict__ rng_state, float rate, float drop_scale,
                                      float scale, long long batch_heads, long long heads, long long tq, long long tk,
                                      long long dk, long long dv, int causal) {
    __shared__ float acc[kRows * kMaxHead];
    __shared__ float ds[kRows * kKeys];
    __shared__ unsigned char use[kRows * kKeys];
    __shared__ float row_delta[kRows], row_lse[kRows];
    const Masking masking{mask, mask_b, mask_h, mask_q, mask_k, valid_length, heads, causal};
    const Dropout dropout{rng_state, rate, drop_scale, tq, tk};
    const long long tiles = (tq + kRows - 1) / kRows;
    for (long long tile = blockIdx.x; tile < batch_heads * tiles; tile += gridDim.x) {
        const long long bh = tile / tiles, i0 = (tile - bh * tiles) * kRows;
        const int rows = (int)(tq - i0 < kRows ? tq - i0 : kRows);
        const T *q0 = q + (bh * tq + i0) * dk, *k0 = k + bh * tk * dk, *v0 = v + bh * tk * dv;
        const T *dout0 = dout + (bh * tq + i0) * dv;
        for (int idx = threadIdx.x; idx < rows * (int)dk; idx += blockDim.x) acc[idx] = 0.0f;
        for (int r = threadIdx.x; r < rows; r += blockDim.x) {
            row_delta[r] = dot(dout0 + r * dv, out + (bh * tq + i0 + r) * dv, dv);
            row_lse[r] = lse[bh * tq + i0 + r];
            delta[bh * tq + i0 + r] = row_delta[r];
        }
        const long long end = masking.key_end(bh, i0 + rows - 1, tk);
        __syncthreads();
        for (long long j0 = 0; j0 < end; j0 += kKeys) {
            const int cols = (int)(end - j0 < kKeys ? end - j0 : kKeys);
            for (int idx = threadIdx.x; idx < rows * cols; idx += blockDim.x) {
                const int r = idx / cols, c = idx - r * cols;
                const long long i = i0 + r, j = j0 + c;
                const bool kept = masking.keep(bh, i, j);
                use[r * kKeys + c] = kept ? 1 : 0;
                if (kept) {
                    ds[r * kKeys + c] = score_grad(q0 + r * dk, k0 + j * dk, v0 + j * dv, dout0 + r * dv, row_lse[r],
                                                   row_delta[r], scale, dk, dv, dropout, bh, i, j).ds;
                }
            }
            __syncthreads();
            accumulate(acc, rows, dk, ds, use, 1, cols, k0 + j0 * dk, dk);
            __syncthreads();
        }
        for (int idx = threadIdx.x; idx < rows * (int)dk; idx += blockDim.x) {
            dq[(bh * tq + i0) * dk + idx] = narrow<T>(acc[idx] * scale);
        }
        __syncthreads();
    }
}

template <typename T>
__global__ void attention_backward_dkv(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                                       const T *__restrict__ dout, const float *__restrict__ lse,
                                       const float *__restrict__ delta, T *__restrict__ dk_out, T *__restrict__ dv_out,
                                       const unsigned char *__restrict__ mask, long long mask_b, long long mask_h,
                                       long long mask_q, long long mask_k, const long long *__restrict__ valid_length,
                                       const unsigned long long *__restrict__ rng_state, float rate, float drop_scale,
                                       float scale, long long batch_heads, long long heads, long long tq, long long tk,
                                       long long dk, long long dv, int causal) {
    __shared__ float acc_k[kRows * kMaxHead];
    __shared__ float acc_v[kRows * kMaxHead];
    __shared__ float ds[kRows * kKeys];
    __shared__ float weight[kRows * kKeys];
    __shared__ unsigned char use[kRows * kKeys];  // 0 masked, 1 kept but dropped (no dv term), 2 kept
    const Masking masking{mask, mask_b, mask_h, mask_q, mask_k, valid_length, heads, causal};
    const Dropout dropout{rng_state, rate, drop_scale, tq, tk};
    const long long tiles = (tk + kRows - 1) / kRows;
    for (long long tile = blockIdx.x; tile < batch_heads * tiles; tile += gridDim.x) {
        const long long bh = tile / tiles, j0 = (tile - bh * tiles) * kRows;
        const int rows = (int)(tk - j0 < kRows ? tk - j0 : kRows);
        const T *q0 = q + bh * tq * dk, *k0 = k + (bh * tk + j0) * dk, *v0 = v + (bh * tk + j0) * dv;
        const T *dout0 = dout + bh * tq * dv;
        for (int idx = threadIdx.x; idx < rows * (int)dk; idx += blockDim.x) acc_k[idx] = 0.0f;
        for (int idx = threadIdx.x; idx < rows * (int)dv; idx += blockDim.x) acc_v[idx] = 0.0f;
        // queries before j0 see none of these keys when causal; a tile past the valid length is all masked
        long long start = causal ? j0 : 0;
        if (valid_length != nullptr && j0 >= valid_length[bh / heads]) start = tq;
        __syncthreads();
        for (long long i0 = start; i0 < tq; i0 += kKeys) {
            const int cols = (int)(tq - i0 < kKeys ? tq - i0 : kKeys);
            for (int idx = threadIdx.x; idx < rows * cols; idx += blockDim.x) {
                const int r = idx / cols, c = idx - r * cols;
                const long long i = i0 + c, j = j0 + r;
                const bool kept = masking.keep(bh, i, j);
                use[r * kKeys + c] = kept ? 2 : 0;
                if (!kept) continue;
                const ScoreGrad g = score_grad(q0 + i * dk, k0 + r * dk, v0 + r * dv, dout0 + i * dv, lse[bh * tq + i],
                                               delta[bh * tq + i], scale, dk, dv, dropout, bh, i, j);
                ds[r * kKeys + c] = g.ds;
                weight[r * kKeys + c] = dropout.active() ? g.p * dropout.scale : g.p;
                if (!g.survives) use[r * kKeys + c] = 1;
            }
            __syncthreads();
            accumulate(acc_k, rows, dk, ds, use, 1, cols, q0 + i0 * dk, dk);
            accumulate(acc_v, rows, dv, weight, use, 2, cols, dout0 + i0 * dv, dv);
            __syncthreads();
        }
        for (int idx = threadIdx.x; idx < rows * (int)dk; idx += blockDim.x) {
            dk_out[(bh * tk + j0) * dk + idx] = narrow<T>(acc_k[idx] * scale);
        }
        for (int idx = threadIdx.x; idx < rows * (int)dv; idx += blockDim.x) {
            dv_out[(bh * tk + j0) * dv + idx] = narrow<T>(acc_v[idx]);
        }
        __syncthreads();
    }
}

// No explicit instantiations: each variant is compiled when named. On a GPU, mxlite compiles one
// variant per module (NVRTC name_expressions: mxlite/device/kernels.py); the host build and the nvcc check
// in the tests take the full list of names from the Python driver.

// How fast a float32 GEMM can run on this CPU core, for benchmarks/bench_gemm.py (not part of mxlite).
//
// fma_rate: the multiply-add rate of one register-blocked inner loop (14 rows x 32 columns of sums in
//   AVX-512 registers) on operands that stay in the L1 cache: the ceiling any GEMM on this core works under.
// blocked_sgemm: a cache-blocked GEMM built on that loop, the way high-performance BLAS libraries are
//   built: B laid out in blocks of 256 x 1024 (256 x 32 panels, in L2), A in blocks of 266 x 256 (14-row
//   panels), C updated in 14 x 32 tiles held in registers over 256 terms of the sum. Each element of C is
//   one chain of fused multiply-adds over k in order. It exists to show how much of the ceiling a GEMM
//   keeps once its operands come from memory, against the BLAS libraries the frameworks call.
//
// Build: g++ -O3 -march=native -shared -fPIC (bench_gemm.py does this). Needs AVX-512 (avx512f).

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace {

constexpr int kRows = 14;                            // rows of C per register tile
constexpr int kWidth = 32;                           // columns of C per register tile: two 16-float vectors
constexpr long kDepth = 256;                         // terms of the sum per pass over a tile (KC)
constexpr long kBlockRows = 19 * kRows;              // rows of A laid out at once (MC)
constexpr long kBlockColumns = 32 * kWidth;          // columns of B laid out at once (NC)
constexpr int kPrefetch = 256;                       // floats of B's panel fetched ahead of use

// C tile (rows x cols of it written) = its old value (when `accumulate`) + A panel @ B panel over `depth`
// terms; a_panel[i * kRows + r] = A(r, i), b_panel[i * kWidth + j] = B(i, j).
inline void tile(long depth, const float *a_panel, const float *b_panel, float *c, long ldc, int rows, int cols,
                 bool accumulate, const float *next_c) {
    __m512 lo[kRows], hi[kRows];
    const __mmask16 m0 = cols >= 16 ? 0xFFFF : (__mmask16)((1u << cols) - 1u);
    const __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1u);
    for (int r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm512_setzero_ps();
    if (accumulate)
        for (int r = 0; r < rows; ++r) {
            lo[r] = _mm512_maskz_loadu_ps(m0, c + r * ldc);
            hi[r] = _mm512_maskz_loadu_ps(m1, c + r * ldc + 16);
        }
    for (long i = 0; i < depth; ++i) {
        if (next_c != nullptr && i < kRows) _mm_prefetch((const char *)(next_c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(b_panel + i * kWidth + kPrefetch), _MM_HINT_T0);
        _mm_prefetch((const char *)(b_panel + i * kWidth + kPrefetch + 16), _MM_HINT_T0);
        const __m512 b0 = _mm512_load_ps(b_panel + i * kWidth), b1 = _mm512_load_ps(b_panel + i * kWidth + 16);
#pragma GCC unroll 14
        for (int r = 0; r < kRows; ++r) {
            const __m512 x = _mm512_set1_ps(a_panel[i * kRows + r]);
            lo[r] = _mm512_fmadd_ps(x, b0, lo[r]);
            hi[r] = _mm512_fmadd_ps(x, b1, hi[r]);
        }
    }
    for (int r = 0; r < rows; ++r) {
        _mm512_mask_storeu_ps(c + r * ldc, m0, lo[r]);
        _mm512_mask_storeu_ps(c + r * ldc + 16, m1, hi[r]);
    }
}

// Rows 0..rows-1 (<= kRows), terms 0..depth-1 of A (A(r, i) = a[r * ars + i * acs]) into a 14-row panel.
void pack_a(const float *a, long ars, long acs, long rows, long depth, float *panel) {
    for (long i = 0; i < depth; ++i)
        for (long r = 0; r < kRows; ++r) panel[i * kRows + r] = r < rows ? a[r * ars + i * acs] : 0.f;
}

// The 16 x 16 block v[j] (lane t) -> v[t] (lane j), in registers.
void transpose16(__m512 *v) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        v[i] = _mm512_shuffle_ps(t[i], t[i + 2], 0x44);
        v[i + 1] = _mm512_shuffle_ps(t[i], t[i + 2], 0xEE);
        v[i + 2] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        v[i + 3] = _mm512_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int i = 0; i < 4; ++i) {
        t[i] = _mm512_shuffle_f32x4(v[i], v[i + 4], 0x88);
        t[i + 4] = _mm512_shuffle_f32x4(v[i], v[i + 4], 0xDD);
        t[i + 8] = _mm512_shuffle_f32x4(v[i + 8], v[i + 12], 0x88);
        t[i + 12] = _mm512_shuffle_f32x4(v[i + 8], v[i + 12], 0xDD);
    }
    for (int i = 0; i < 8; ++i) {
        v[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        v[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xDD);
    }
}

// Terms 0..depth-1, columns 0..cols-1 (<= kWidth) of B (B(i, j) = b[i * brs + j * bcs]) into a panel.
void pack_b(const float *b, long brs, long bcs, long depth, int cols, float *panel) {
    if (bcs == 1 && cols == kWidth) {  // rows of B: copy along
        for (long i = 0; i < depth; ++i) {
            _mm512_store_ps(panel + i * kWidth, _mm512_loadu_ps(b + i * brs));
            _mm512_store_ps(panel + i * kWidth + 16, _mm512_loadu_ps(b + i * brs + 16));
        }
        return;
    }
    long i = 0;
    if (brs == 1 && cols == kWidth)  // columns of B are rows in memory (B = W^T): 16 x 16 transposes
        for (; i + 16 <= depth; i += 16)
            for (int half = 0; half < 2; ++half) {
                __m512 v[16];
                for (int j = 0; j < 16; ++j) v[j] = _mm512_loadu_ps(b + (half * 16 + j) * bcs + i);
                transpose16(v);
                for (int t = 0; t < 16; ++t) _mm512_store_ps(panel + (i + t) * kWidth + half * 16, v[t]);
            }
    for (; i < depth; ++i)
        for (int j = 0; j < kWidth; ++j) panel[i * kWidth + j] = j < cols ? b[i * brs + j * bcs] : 0.f;
}

}  // namespace

extern "C" {

// The register tile run `calls` times over `depth` terms on operands that stay in L1; returns the scalar
// multiply-adds done (2 flops each). The caller times the call: that rate is the core's ceiling.
double fma_rate_work(long depth, long calls) {
    float *a = static_cast<float *>(std::aligned_alloc(64, sizeof(float) * depth * kRows));
    float *b = static_cast<float *>(std::aligned_alloc(64, sizeof(float) * depth * kWidth));
    alignas(64) float c[kRows * kWidth] = {};
    for (long i = 0; i < depth * kRows; ++i) a[i] = 1e-3f;
    for (long i = 0; i < depth * kWidth; ++i) b[i] = 1e-3f;
    for (long t = 0; t < calls; ++t) tile(depth, a, b, c, kWidth, kRows, kWidth, true, nullptr);
    volatile float sink = c[0];
    (void)sink;
    std::free(a);
    std::free(b);
    return double(calls) * depth * kRows * kWidth;
}

// Floats of the two work areas blocked_sgemm needs (`which` 0: A's block, 1: B's), each 64-byte aligned.
long blocked_scratch_floats(int which) { return which == 0 ? kDepth * kBlockRows : kDepth * kBlockColumns; }

// C (m x n, rows ldc apart) = A @ B with A(r, i) = a[r * ars + i * acs] (m x k) and B(i, j) = b[i * brs +
// j * bcs] (k x n): any transposition of either operand through its strides. a_block and b_block: the
// caller's work areas (blocked_scratch_floats), one pair per thread, kept between calls (no page faults).
void blocked_sgemm(long m, long n, long k, const float *a, long ars, long acs, const float *b, long brs, long bcs,
                   float *c, long ldc, float *a_block, float *b_block) {
    if (k == 0)
        for (long r = 0; r < m; ++r) std::memset(c + r * ldc, 0, sizeof(float) * n);
    for (long n0 = 0; n0 < n; n0 += kBlockColumns) {
        const long nc = std::min(kBlockColumns, n - n0);
        for (long k0 = 0; k0 < k; k0 += kDepth) {
            const long depth = std::min(kDepth, k - k0);
            for (long j = 0; j < nc; j += kWidth)
                pack_b(b + k0 * brs + (n0 + j) * bcs, brs, bcs, depth, (int)std::min<long>(kWidth, nc - j),
                       b_block + j * depth);
            for (long m0 = 0; m0 < m; m0 += kBlockRows) {
                const long mc = std::min(kBlockRows, m - m0);
                for (long r = 0; r < mc; r += kRows)
                    pack_a(a + (m0 + r) * ars + k0 * acs, ars, acs, std::min<long>(kRows, mc - r), depth,
                           a_block + r * depth);
                for (long r = 0; r < mc; r += kRows)  // one A panel in L1 against every B panel of the block
                    for (long j = 0; j < nc; j += kWidth) {
                        float *tile_c = c + (m0 + r) * ldc + n0 + j;
                        tile(depth, a_block + r * depth, b_block + j * depth, tile_c, ldc,
                             (int)std::min<long>(kRows, mc - r), (int)std::min<long>(kWidth, nc - j), k0 > 0,
                             j + kWidth < nc ? tile_c + kWidth : nullptr);
                    }
            }
        }
    }
}

}  // extern "C"

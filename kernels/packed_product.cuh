// A product with a fixed right operand laid out once for many left operands, for the host build's native
// loops (CPU devices only): the recurrent layers' per-step products h @ W_h^T (forward) and
// d(gates) @ W_h (backward), T of them per layer and direction against the same W_h.
//
// Why not NumPy's BLAS per step: OpenBLAS lays its operands out anew on every call, and with a few dozen rows
// (the batch) that layout of the 256 x 1024 weight is a third of the call. Laid out once per pass, the
// product of 32 x 256 by 256 x 1024 takes about 95 us on one core of the 2-core VM against OpenBLAS's 165
// (benchmarks/RESULTS.md); at a few hundred rows and more the two are even, which is where a layer's
// whole-sequence products stay with the BLAS.
//
// Layout (pack_panels): B (k x n) as consecutive panels of `Panel<T>::width` columns (two 64-byte vectors: 32
// floats, 16 doubles); panel p holds rows 0..k-1 of columns p*width .. p*width+width-1, a row's values
// adjacent, zeros past column n. packed_elements() is its size.
//
// Arithmetic: every element of C is the sum over i = 0 .. k-1, in that order, of fused multiply-adds started
// from zero: c = fma(a[i], b[i], c). A fused multiply-add rounds once, so the AVX-512 loop and the portable
// loop (std::fma) give the same bits, on any machine, on any number of threads (the products run on the
// calling thread). The result is not always numpy.matmul's: OpenBLAS sums long rows in blocks.
// tests/test_rnn_packed.py holds both loops to each other and to a float64 reference.
//
// Included inside `#ifdef HOSTCUDA_SERIAL` (pasted in place by mxlite/device/kernels.py): NVRTC, nvcc and the
// emulated GPUs never see it.

#include <cmath>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace packed {

template <typename T> struct Panel {
    static constexpr int width = 128 / (int)sizeof(T);  // columns: two 64-byte vectors
};

// Elements of B (k x n) laid out by pack_panels.
template <typename T> long long packed_elements(long long k, long long n) {
    const long long w = Panel<T>::width;
    return k * ((n + w - 1) / w) * w;
}

// B (k x n) into `dst` (packed_elements(k, n) values): B[i][j] = src[j * ld + i] when `transposed`,
// else src[i * ld + j].
template <typename T> void pack_panels(const T *src, long long ld, bool transposed, long long k, long long n, T *dst) {
    constexpr long long w = Panel<T>::width;
    for (long long j0 = 0; j0 < n; j0 += w) {
        T *panel = dst + j0 * k;
        const long long cols = n - j0 < w ? n - j0 : w;
        if (cols < w)
            std::memset(panel, 0, sizeof(T) * k * w);
        if (transposed) {  // source row j is column j of B: read it along, write it down the panel
            for (long long j = 0; j < cols; ++j) {
                const T *column = src + (j0 + j) * ld;
                for (long long i = 0; i < k; ++i) panel[i * w + j] = column[i];
            }
        } else {
            for (long long i = 0; i < k; ++i) std::memcpy(panel + i * w, src + i * ld + j0, sizeof(T) * cols);
        }
    }
}

// R rows of A times one panel into R rows of C (`cols` of the panel's columns are stored), portable form.
template <typename T, int R>
inline void rows_by_panel_portable(const T *a, long long lda, const T *panel, long long k, T *c, long long ldc,
                                   int cols) {
    constexpr int w = Panel<T>::width;
    for (int r = 0; r < R; ++r) {
        T sum[w] = {};
        for (long long i = 0; i < k; ++i) {
            const T x = a[r * lda + i];
            for (int j = 0; j < w; ++j) sum[j] = std::fma(x, panel[i * w + j], sum[j]);
        }
        for (int j = 0; j < cols; ++j) c[r * ldc + j] = sum[j];
    }
}

#if defined(__AVX512F__)
template <typename T> struct Vec;
template <> struct Vec<float> {
    using V = __m512;
    static constexpr int lanes = 16;
    static V zero() { return _mm512_setzero_ps(); }
    static V load(const float *p) { return _mm512_loadu_ps(p); }
    static V splat(float x) { return _mm512_set1_ps(x); }
    static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static void store(float *p, V v, int n) {  // the first n lanes (none when n <= 0)
        if (n >= lanes)
            _mm512_storeu_ps(p, v);
        else if (n > 0)
            _mm512_mask_storeu_ps(p, (__mmask16)((1u << n) - 1u), v);
    }
};
template <> struct Vec<double> {
    using V = __m512d;
    static constexpr int lanes = 8;
    static V zero() { return _mm512_setzero_pd(); }
    static V load(const double *p) { return _mm512_loadu_pd(p); }
    static V splat(double x) { return _mm512_set1_pd(x); }
    static V fma(V a, V b, V c) { return _mm512_fmadd_pd(a, b, c); }
    static void store(double *p, V v, int n) {
        if (n >= lanes)
            _mm512_storeu_pd(p, v);
        else if (n > 0)
            _mm512_mask_storeu_pd(p, (__mmask8)((1u << n) - 1u), v);
    }
};

// The same with the panel's two vectors of every row in registers and R x 2 sums (R <= 8: 16 of the 32
// vector registers), each row's value of A broadcast once per i.
template <typename T, int R>
inline void rows_by_panel(const T *a, long long lda, const T *panel, long long k, T *c, long long ldc, int cols) {
    using W = Vec<T>;
    constexpr int L = W::lanes;
    typename W::V lo[R], hi[R];
    for (int r = 0; r < R; ++r) lo[r] = hi[r] = W::zero();
    for (long long i = 0; i < k; ++i) {
        const typename W::V b0 = W::load(panel + i * 2 * L), b1 = W::load(panel + i * 2 * L + L);
        for (int r = 0; r < R; ++r) {
            const typename W::V x = W::splat(a[r * lda + i]);
            lo[r] = W::fma(x, b0, lo[r]);
            hi[r] = W::fma(x, b1, hi[r]);
        }
    }
    for (int r = 0; r < R; ++r) {
        W::store(c + r * ldc, lo[r], cols);
        W::store(c + r * ldc + L, hi[r], cols - L);
    }
}
constexpr bool kVectorised = true;
#else
template <typename T, int R>
inline void rows_by_panel(const T *a, long long lda, const T *panel, long long k, T *c, long long ldc, int cols) {
    rows_by_panel_portable<T, R>(a, lda, panel, k, c, ldc, cols);
}
constexpr bool kVectorised = false;
#endif

// Rows r0 .. r0+rows-1 (rows <= 8) of C by one panel, through the vectorised or the portable form.
template <typename T, bool Portable>
inline void block_by_panel(int rows, const T *a, long long lda, const T *panel, long long k, T *c, long long ldc,
                           int cols) {
#define PACKED_ROWS(R)                                                               \
    case R:                                                                          \
        if (Portable)                                                                \
            rows_by_panel_portable<T, R>(a, lda, panel, k, c, ldc, cols);            \
        else                                                                         \
            rows_by_panel<T, R>(a, lda, panel, k, c, ldc, cols);                     \
        break;
    switch (rows) {
        PACKED_ROWS(8) PACKED_ROWS(7) PACKED_ROWS(6) PACKED_ROWS(5) PACKED_ROWS(4) PACKED_ROWS(3) PACKED_ROWS(2)
        PACKED_ROWS(1)
        default: break;
    }
#undef PACKED_ROWS
}

// C (m x n, rows ldc apart) = A (m x k, rows lda apart) @ B, B laid out by pack_panels. `Portable` forces the
// loop without vector intrinsics (the same bits; tests compare the two).
template <typename T, bool Portable = false>
void product(long long m, long long n, long long k, const T *a, long long lda, const T *packed, T *c,
             long long ldc) {
    constexpr long long w = Panel<T>::width;
    for (long long j0 = 0; j0 < n; j0 += w) {  // a panel stays in cache while every block of rows uses it
        const T *panel = packed + j0 * k;
        const int cols = (int)(n - j0 < w ? n - j0 : w);
        for (long long r = 0; r < m; r += 8)
            block_by_panel<T, Portable>((int)(m - r < 8 ? m - r : 8), a + r * lda, lda, panel, k, c + r * ldc + j0,
                                        ldc, cols);
    }
}

}  // namespace packed

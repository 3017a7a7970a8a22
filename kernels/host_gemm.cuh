// NumPy's own cblas_sgemm / cblas_dgemm, called from the native loops of the serial host build (CPU
// devices only): a convolution's per-sample products (conv.cu). The function's address and whether its integers are 64-bit come from
// mxlite.device.blas.host_gemm (NumPy's OpenBLAS, found through threadpoolctl); called with the
// arguments numpy.matmul passes for the same operands, it gives numpy.matmul's bits. Included inside
// `#ifdef HOSTCUDA_SERIAL` (the loader, mxlite/device/kernels.py, pastes it in place): NVRTC, nvcc and
// the emulated GPUs never see it.

namespace host_blas {

constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS_ORDER, CBLAS_TRANSPOSE

// C (m x n) = op(A) @ op(B), row-major, through `function` (cblas_?gemm of NumPy's BLAS).
template <typename T>
inline void gemm(void *function, long long ilp64, int ta, int tb, long long m, long long n, long long k, const T *a,
                 long long lda, const T *b, long long ldb, T *c, long long ldc) {
    if (ilp64) {
        using Gemm = void (*)(int, int, int, long long, long long, long long, T, const T *, long long, const T *,
                              long long, T, T *, long long);
        reinterpret_cast<Gemm>(function)(kRowMajor, ta, tb, m, n, k, T(1), a, lda, b, ldb, T(0), c, ldc);
    } else {
        using Gemm = void (*)(int, int, int, int, int, int, T, const T *, int, const T *, int, T, T *, int);
        reinterpret_cast<Gemm>(function)(kRowMajor, ta, tb, (int)m, (int)n, (int)k, T(1), a, (int)lda, b, (int)ldb,
                                         T(0), c, (int)ldc);
    }
}

}  // namespace host_blas

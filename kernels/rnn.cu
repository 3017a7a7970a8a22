// Recurrent cells: one fused kernel per cell type and direction of the pass, all gates of a time step
// in one pass over memory. The GEMMs (the input projection of the whole sequence, h @ W_h^T per step,
// and every weight gradient) are BLAS / cuBLAS calls made by the launcher, outside these kernels (on CPU
// devices the per-step products are packed_product.cuh's, see the host-only section at the end).
//
//   lstm_forward<T>   gates i, f, g, o (MXNet's order): c' = sig(f)*c + sig(i)*tanh(g), clipped to
//                     [lo, hi] when `clip`; h' = sig(o)*tanh(c'). Saves the activated gates (N, 4H).
//   lstm_backward<T>  from dh', dc' and the saved gates: d(pre-activations) (N, 4H) and dc (in place).
//   gru_forward<T>    gates r, z, n (MXNet's / cuDNN's variant): r = sig(x_r + hh_r), z likewise,
//                     n = tanh(x_n + r*hh_n), h' = (1 - z)*n + z*h. Saves r, z, n, hh_n (N, 4H).
//   gru_backward<T>   d(input projection) and d(recurrent projection) (N, 3H) each: they differ in the
//                     n gate, where r multiplies the recurrent term.
//   rnn_forward<T>    h' = tanh(pre) or relu(pre) (`relu` flag). Saves nothing: h' is the state.
//   rnn_backward<T>   d(pre-activation) (N, H) from dh' and h'.
//
// One launch is one time step (on CPU devices the host build adds, at the end of this file, a loop that runs a
// range of steps in one call: the product and the launch per step, as the launcher's Python loop does, which is
// its twin). Every forward kernel takes the input projection's slice of the step,
// xg = x @ W_i^T (N, G*H), the recurrent product hg = h @ W_h^T (N, G*H) and both biases (G*H each, zeros
// when the layer has none), added here rather than in passes of their own over the projections; the
// pre-activation of gate k is (xg[k] + b_i[k]) + (hg[k] + b_h[k]), the order of mxlite/gluon/rnn/_steps.py
// ((x W_i^T + b_i) + (h W_h^T + b_h)). The launcher is mxlite/ops/rnn_ops.py,
// whose NumPy twins (_lstm_forward, ...) are each kernel operation by operation; tests/test_rnn_kernels.py
// holds the kernels to them bit for bit.
//
// Sequence lengths (MXNet's use_sequence_length): `lengths` (N int32, or null) and `step`, the index of
// this launch in processing order. A row with step >= lengths[row] is past its end: the forward copies
// its state unchanged (h' = h, c' = c), writes 0 to its output y and leaves its saved gates alone; the
// backward writes zero gate gradients, leaves dc alone and passes the state gradient on through
// `carry`. y is null when there are no lengths (the launcher's outputs are the states then).
//
// Backward data flow per step. dh' = (dh_rec + carry) + dy: dh_rec is d(gates of the next step) @ W_h
// (a GEMM by the launcher; at the last step the final state's gradient), carry the part of dh' that does
// not go through W_h (GRU's z*dh', a frozen row's whole gradient; the kernel overwrites it with the
// value for the step before), dy the output's gradient (zeros when the output has none).
//
// Transcendentals. sigmoid and tanh are built on ieee_math.cuh's exp (+ - * / and bit moves only, so
// the host build, the emulated GPUs, a real GPU and the NumPy twins give the same bits):
//   sigmoid(x) = (x >= 0 ? 1 : e) / (1 + e), e = exp(-|x|)            (never overflows)
//   tanh(x) = copysign(-m / (2 + m), x), m = expm1(-2|x|) = (2^k - 1) + 2^k * q
// (expm1 keeps tanh's relative accuracy near 0 without a second polynomial). Measured against long
// double on a dense sweep: within 3 ulp of the exact value in float and double (NumPy's own tanh: 1.4
// ulp); tests/test_rnn_kernels.py checks it. The argument of exp is clamped at -87.3 (float) / -708.3
// (double), where 2^k is still a normal number: sigmoid(x) for x below that returns about 1.2e-38
// (2.4e-308) instead of a smaller number, tanh is exactly +-1 long before. NaN stays NaN (the clamp is a
// comparison and select). Polynomial coefficients are 1/n! rounded to double (exact n!, one correctly
// rounded division, as Python's 1 / math.factorial(n)), then to float for float math.
//
// Arithmetic, kept equal to the twins: float32 math for float and __half (stored as half, rounded to
// nearest even, as NumPy's astype), double for double; no contraction (--fmad=false; the host build
// uses -ffp-contract=off), so a*b + c rounds twice as in NumPy. CuPy builds with -ftz=true: subnormal
// inputs flush to zero on a GPU and not in the twins (no intermediate here is subnormal for normal
// inputs: 2^k stays normal by the clamp). NaN payloads: where two NaNs meet, which one comes out depends
// on operand order; tests compare NaNs as NaNs.
//
// Work split: block b handles rows b, b + gridDim.x, ... (a row is one sample of the batch); the threads
// of a block share the H columns of a row. A one-thread block (the serial host build CPU devices run,
// mxlite/device/_hostcuda) walks a row's columns in a unit-stride loop that g++ vectorises, the transcendentals
// included (they are straight-line arithmetic, not library calls). Optional buffers (saved gates, the
// output y) are tested once per launch, outside the element loop.
//
// Expected macros: none. Compiled by cupy.RawModule (NVRTC) with name_expressions for each
// instantiation, by `nvcc --ptx -arch=sm_80` in the test suite, and by g++ for the host
// (mxlite/device/_hostcuda: serial build for CPU devices, fiber build for the emulated GPUs).

#include <cuda_fp16.h>

#include "ieee_math.cuh"

namespace {

template <typename A> __device__ __forceinline__ A sigmoid(A x) {
    const ExpParts<A> p = exp_parts(-magnitude(x));
    const A e = p.s + p.s * p.q;  // exp(-|x|)
    return (x >= A(0) ? A(1) : e) / (A(1) + e);
}

template <typename A> __device__ __forceinline__ A tanh_of(A x) {
    const ExpParts<A> p = exp_parts(A(-2) * magnitude(x));
    const A m = (p.s - A(1)) + p.s * p.q;  // expm1(-2|x|)
    return with_sign(-m / (A(2) + m), x);
}

// min(max(x, lo), hi), NaN staying NaN (np.clip), as comparisons and selects.
template <typename A> __device__ __forceinline__ A clamp_keep_nan(A x, A lo, A hi) {
    x = x < lo ? lo : x;
    return x > hi ? hi : x;
}


// Whether row `row` is still inside its sequence at processing step `step`.
__device__ __forceinline__ bool active_row(const int *__restrict__ lengths, int row, int step) {
    return lengths == nullptr || step < lengths[row];
}

// A row past its end, forward: the state is carried over (h' = h and, with c, c' = c), the output is 0.
template <typename T>
__device__ __forceinline__ void freeze_row(const T *__restrict__ h_prev, T *__restrict__ h_next,
                                           const T *__restrict__ c_prev, T *__restrict__ c_next,
                                           T *__restrict__ y, int hidden) {
    for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
        h_next[j] = h_prev[j];
        if (c_next) c_next[j] = c_prev[j];
        if (y) y[j] = store_as<T>(Math<T>(0));
    }
}

// A row past its end, backward: zero gate gradients (width columns in each of d1 and, if given, d2);
// carry = dh_rec + carry, the state gradient handed on unchanged (dy does not reach a frozen row).
template <typename T>
__device__ __forceinline__ void pass_row(const T *__restrict__ dh_rec, T *__restrict__ carry,
                                         T *__restrict__ d1, T *__restrict__ d2, int width, int hidden) {
    for (int j = threadIdx.x; j < width; j += blockDim.x) {
        d1[j] = store_as<T>(Math<T>(0));
        if (d2) d2[j] = store_as<T>(Math<T>(0));
    }
    for (int j = threadIdx.x; j < hidden; j += blockDim.x)
        carry[j] = store_as<T>(arith(dh_rec[j]) + arith(carry[j]));
}

// Gate block k's pre-activation at column j of a row: (xg + b_i) + (hg + b_h), the order of _steps.
template <typename T>
__device__ __forceinline__ Math<T> pre_activation(const T *__restrict__ x, const T *__restrict__ p,
                                                  const T *__restrict__ bias_i, const T *__restrict__ bias_h,
                                                  int k, int H, int j) {
    const int c = k * H + j;
    return (arith(x[c]) + arith(bias_i[c])) + (arith(p[c]) + arith(bias_h[c]));
}

// A live row's results at column j of row r: the state h (and the output y when kOut) and, when kSave,
// four values into the H-wide blocks of the saved row (4H wide).
template <bool kOut, bool kSave, typename T, typename A>
__device__ __forceinline__ void store_live(T *__restrict__ h_next, T *__restrict__ y, T *__restrict__ saved,
                                           long long r, int j, int H, A h, A v0, A v1, A v2, A v3) {
    h_next[r * H + j] = store_as<T>(h);
    if constexpr (kOut) y[r * H + j] = store_as<T>(h);
    if constexpr (kSave) {
        T *__restrict__ row = saved + r * 4 * H;
        row[j] = store_as<T>(v0);
        row[H + j] = store_as<T>(v1);
        row[2 * H + j] = store_as<T>(v2);
        row[3 * H + j] = store_as<T>(v3);
    }
}

}  // namespace

// ---- LSTM -----------------------------------------------------------------------------------------
// xg, hg: (rows, 4H); bias_i, bias_h: (4H); h_prev, c_prev, h_next, c_next: (rows, H); y: (rows, H) or null;
// gates: (rows, 4H) or null (inference). clip != 0 bounds c' to [lo, hi] (+-inf for an open side).
template <typename T>
__global__ void lstm_forward(const T *__restrict__ xg, const T *__restrict__ hg, const T *__restrict__ bias_i,
                             const T *__restrict__ bias_h, const T *__restrict__ h_prev, const T *__restrict__ c_prev,
                             T *__restrict__ h_next, T *__restrict__ c_next, T *__restrict__ y, T *__restrict__ gates,
                             const int *__restrict__ lengths, int step, int rows, int hidden, int clip,
                             Math<T> lo, Math<T> hi) {
    using A = Math<T>;
    with_flags(gates != nullptr, y != nullptr, clip != 0, [&](auto save, auto out, auto clipped) {
        const int H = hidden, n_rows = rows, at = step;  // locals: loop bounds no store can change
        const A low = lo, high = hi;
        for (int row = blockIdx.x; row < n_rows; row += gridDim.x) {
            const long long r = row, g4 = r * 4 * H;
            if (!active_row(lengths, row, at)) {
                freeze_row<T>(h_prev + r * H, h_next + r * H, c_prev + r * H, c_next + r * H,
                              decltype(out)::value ? y + r * H : nullptr, H);
                continue;
            }
            const T *__restrict__ x = xg + g4;
            const T *__restrict__ p = hg + g4;
            for (int j = threadIdx.x; j < H; j += blockDim.x) {
                const A i = sigmoid(pre_activation(x, p, bias_i, bias_h, 0, H, j));
                const A f = sigmoid(pre_activation(x, p, bias_i, bias_h, 1, H, j));
                const A g = tanh_of(pre_activation(x, p, bias_i, bias_h, 2, H, j));
                const A o = sigmoid(pre_activation(x, p, bias_i, bias_h, 3, H, j));
                A c = f * arith(c_prev[r * H + j]) + i * g;
                if constexpr (decltype(clipped)::value) c = clamp_keep_nan(c, low, high);
                const A h = o * tanh_of(c);
                c_next[r * H + j] = store_as<T>(c);
                store_live<decltype(out)::value, decltype(save)::value>(h_next, y, gates, r, j, H, h, i, f, g, o);
            }
        }
    });
}

// gates: the forward's saved (rows, 4H); c_prev (rows, H); dy, dh_rec (rows, H); carry, dc (rows, H) in
// and out; dgates (rows, 4H) out: d(pre-activation) of i, f, g, o. c' is recomputed from the gates (its
// unclipped value decides where the clip passes the gradient, as ops.clip: lo <= c <= hi).
template <typename T>
__global__ void lstm_backward(const T *__restrict__ gates, const T *__restrict__ c_prev, const T *__restrict__ dy,
                              const T *__restrict__ dh_rec, T *__restrict__ carry, T *__restrict__ dc,
                              T *__restrict__ dgates, const int *__restrict__ lengths, int step, int rows,
                              int hidden, int clip, Math<T> lo, Math<T> hi) {
    using A = Math<T>;
    with_flag(clip != 0, [&](auto clipped) {
        const int H = hidden, n_rows = rows, at = step;  // locals: loop bounds no store can change
        const A low = lo, high = hi;
        for (int row = blockIdx.x; row < n_rows; row += gridDim.x) {
            const long long r = row, g4 = r * 4 * H;
            if (!active_row(lengths, row, at)) {
                pass_row<T>(dh_rec + r * H, carry + r * H, dgates + g4, nullptr, 4 * H, H);
                continue;
            }
            for (int j = threadIdx.x; j < H; j += blockDim.x) {
                const long long e = r * H + j;
                const A dh = (arith(dh_rec[e]) + arith(carry[e])) + arith(dy[e]);
                const A i = arith(gates[g4 + j]), f = arith(gates[g4 + H + j]);
                const A g = arith(gates[g4 + 2 * H + j]), o = arith(gates[g4 + 3 * H + j]);
                const A cp = arith(c_prev[e]);
                const A raw = f * cp + i * g;
                A c = raw;
                if constexpr (decltype(clipped)::value) c = clamp_keep_nan(raw, low, high);
                const A tc = tanh_of(c);
                A dct = arith(dc[e]) + (dh * o) * (A(1) - tc * tc);
                if constexpr (decltype(clipped)::value) dct = (raw >= low && raw <= high) ? dct : A(0);
                dgates[g4 + j] = store_as<T>((dct * g) * (i * (A(1) - i)));
                dgates[g4 + H + j] = store_as<T>((dct * cp) * (f * (A(1) - f)));
                dgates[g4 + 2 * H + j] = store_as<T>((dct * i) * (A(1) - g * g));
                dgates[g4 + 3 * H + j] = store_as<T>((dh * tc) * (o * (A(1) - o)));
                dc[e] = store_as<T>(dct * f);
                carry[e] = store_as<T>(A(0));
            }
        }
    });
}

// ---- GRU ------------------------------------------------------------------------------------------
// xg, hg: (rows, 3H); bias_i, bias_h (3H); h_prev, h_next: (rows, H); y: (rows, H) or null; saved: (rows, 4H) or
// null, r, z, n and hh_n = hg_n + bias_h_n (the recurrent term r multiplies).
template <typename T>
__global__ void gru_forward(const T *__restrict__ xg, const T *__restrict__ hg, const T *__restrict__ bias_i,
                            const T *__restrict__ bias_h, const T *__restrict__ h_prev, T *__restrict__ h_next,
                            T *__restrict__ y, T *__restrict__ saved, const int *__restrict__ lengths, int step,
                            int rows, int hidden) {
    using A = Math<T>;
    with_flags(saved != nullptr, y != nullptr, [&](auto save, auto out) {
        const int H = hidden, n_rows = rows, at = step;  // locals: loop bounds no store can change
        for (int row = blockIdx.x; row < n_rows; row += gridDim.x) {
            const long long r = row, g3 = r * 3 * H;
            if (!active_row(lengths, row, at)) {
                freeze_row<T>(h_prev + r * H, h_next + r * H, nullptr, nullptr,
                              decltype(out)::value ? y + r * H : nullptr, H);
                continue;
            }
            const T *__restrict__ x = xg + g3;
            const T *__restrict__ p = hg + g3;
            for (int j = threadIdx.x; j < H; j += blockDim.x) {
                const A rg = sigmoid(pre_activation(x, p, bias_i, bias_h, 0, H, j));
                const A z = sigmoid(pre_activation(x, p, bias_i, bias_h, 1, H, j));
                const A hn = arith(p[2 * H + j]) + arith(bias_h[2 * H + j]);
                const A n = tanh_of((arith(x[2 * H + j]) + arith(bias_i[2 * H + j])) + rg * hn);
                const A h = (A(1) - z) * n + z * arith(h_prev[r * H + j]);
                store_live<decltype(out)::value, decltype(save)::value>(h_next, y, saved, r, j, H, h, rg, z, n, hn);
            }
        }
    });
}

// saved: the forward's (rows, 4H); h_prev, dy, dh_rec: (rows, H); carry (rows, H) in and out (out:
// z*dh'); dx_gates: d(input projection) (rows, 3H); dh_gates: d(recurrent projection hg + bias_h) (rows, 3H).
template <typename T>
__global__ void gru_backward(const T *__restrict__ saved, const T *__restrict__ h_prev, const T *__restrict__ dy,
                             const T *__restrict__ dh_rec, T *__restrict__ carry, T *__restrict__ dx_gates,
                             T *__restrict__ dh_gates, const int *__restrict__ lengths, int step, int rows,
                             int hidden) {
    using A = Math<T>;
    const int H = hidden;
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const long long r = row, g3 = r * 3 * H, s4 = r * 4 * H;
        if (!active_row(lengths, row, step)) {
            pass_row<T>(dh_rec + r * H, carry + r * H, dx_gates + g3, dh_gates + g3, 3 * H, H);
            continue;
        }
        for (int j = threadIdx.x; j < H; j += blockDim.x) {
            const long long e = r * H + j;
            const A dh = (arith(dh_rec[e]) + arith(carry[e])) + arith(dy[e]);
            const A rg = arith(saved[s4 + j]), z = arith(saved[s4 + H + j]);
            const A n = arith(saved[s4 + 2 * H + j]), hn = arith(saved[s4 + 3 * H + j]);
            const A dn = (dh * (A(1) - z)) * (A(1) - n * n);  // d(pre-activation of n)
            const A dr = (dn * hn) * (rg * (A(1) - rg));
            const A dz = (dh * (arith(h_prev[e]) - n)) * (z * (A(1) - z));
            dx_gates[g3 + j] = store_as<T>(dr);
            dx_gates[g3 + H + j] = store_as<T>(dz);
            dx_gates[g3 + 2 * H + j] = store_as<T>(dn);
            dh_gates[g3 + j] = store_as<T>(dr);
            dh_gates[g3 + H + j] = store_as<T>(dz);
            dh_gates[g3 + 2 * H + j] = store_as<T>(dn * rg);
            carry[e] = store_as<T>(dh * z);
        }
    }
}

// ---- RNN (tanh or relu) -----------------------------------------------------------------------------
// xg, hg: (rows, H); bias_i, bias_h (H); h_prev, h_next: (rows, H); y: (rows, H) or null. relu != 0: max(pre, 0)
// (NaN stays NaN), else tanh.
template <typename T>
__global__ void rnn_forward(const T *__restrict__ xg, const T *__restrict__ hg, const T *__restrict__ bias_i,
                            const T *__restrict__ bias_h, const T *__restrict__ h_prev, T *__restrict__ h_next,
                            T *__restrict__ y, const int *__restrict__ lengths, int step, int rows, int hidden,
                            int relu) {
    using A = Math<T>;
    with_flags(relu != 0, y != nullptr, [&](auto rectify, auto out) {
        const int H = hidden, n_rows = rows, at = step;  // locals: loop bounds no store can change
        for (int row = blockIdx.x; row < n_rows; row += gridDim.x) {
            const long long r = row;
            if (!active_row(lengths, row, at)) {
                freeze_row<T>(h_prev + r * H, h_next + r * H, nullptr, nullptr,
                              decltype(out)::value ? y + r * H : nullptr, H);
                continue;
            }
            for (int j = threadIdx.x; j < H; j += blockDim.x) {
                const long long e = r * H + j;
                const A pre = pre_activation(xg + r * H, hg + r * H, bias_i, bias_h, 0, H, j);
                A h;
                if constexpr (decltype(rectify)::value) h = (pre > A(0) || pre != pre) ? pre : A(0);
                else h = tanh_of(pre);
                h_next[e] = store_as<T>(h);
                if constexpr (decltype(out)::value) y[e] = store_as<T>(h);
            }
        }
    });
}

// h_next: the forward's state after the step (= its output on a live row); dy, dh_rec: (rows, H); carry
// (rows, H) in and out (out: 0 on a live row); dgates (rows, H): d(pre-activation).
template <typename T>
__global__ void rnn_backward(const T *__restrict__ h_next, const T *__restrict__ dy, const T *__restrict__ dh_rec,
                             T *__restrict__ carry, T *__restrict__ dgates, const int *__restrict__ lengths,
                             int step, int rows, int hidden, int relu) {
    using A = Math<T>;
    with_flag(relu != 0, [&](auto rectify) {
        const int H = hidden, n_rows = rows, at = step;  // locals: loop bounds no store can change
        for (int row = blockIdx.x; row < n_rows; row += gridDim.x) {
            const long long r = row;
            if (!active_row(lengths, row, at)) {
                pass_row<T>(dh_rec + r * H, carry + r * H, dgates + r * H, nullptr, H, H);
                continue;
            }
            for (int j = threadIdx.x; j < H; j += blockDim.x) {
                const long long e = r * H + j;
                const A dh = (arith(dh_rec[e]) + arith(carry[e])) + arith(dy[e]);
                const A h = arith(h_next[e]);
                A d;
                if constexpr (decltype(rectify)::value) d = h > A(0) ? dh : A(0);
                else d = dh * (A(1) - h * h);
                dgates[e] = store_as<T>(d);
                carry[e] = store_as<T>(A(0));
            }
        }
    });
}

// No explicit instantiations: each variant is compiled when named. On a GPU, mxlite compiles one
// variant per module (NVRTC name_expressions: mxlite/device/kernels.py); the host build and the nvcc check
// in the tests take the full list of names from the Python driver.

#ifdef HOSTCUDA_SERIAL
#include "packed_product.cuh"
// ---- host build only (CPU devices): a layer's time loops in one call each -------------------------------------
// Per processing step s, what mxlite/ops/rnn_ops.py's _Layer.run (forward) and _Layer.run_back
// (backward) do from Python: the per-step product against W_h laid out once per pass (packed_product.cuh; the
// Python loop calls the same product through mxlite_packed_product_<T>, hence the same bits) and the cell
// kernel over every row, launched through the runtime as from Python. One call per chunk of steps: no
// interpreter between the steps, so the layers of a stack (rnn_stack.py) run side by side on the host
// threads instead of taking turns at the GIL. Not compiled for GPUs (NVRTC, nvcc): there the steps are
// CuPy calls, or one CUDA graph.
namespace {

// What both loops share, first in both argument structs (rnn_ops._STEPS_HEAD, ctypes).
struct StepsHead {
    long long mode;        // 0 LSTM, 1 GRU, 2 RNN tanh, 3 RNN relu
    long long length, batch, hidden;
    long long gate_rows;   // G*H: the gates' width (4H LSTM, 3H GRU, H RNN)
    long long saved_rows;  // the saved gates' width per row (rnn_ops._SAVED: 4H LSTM and GRU, none for RNN)
    long long backwards;   // steps run from the last time index down (slots as rnn_ops' _Layer._slots)
    long long threads;     // the cell launches' thread budget
};

struct Clip {
    long long on;
    double lo, hi;
};

struct ForwardSteps {  // laid out as rnn_ops._ForwardSteps
    StepsHead head;
    const void *proj, *bias_i, *bias_h, *w_packed;  // proj (T, N, G*H); W_h^T (H x G*H) laid out by pack_panels
    void *hg, *hs, *cs, *y, *saved;            // hg (N, G*H); hs, cs (T+1, N, H); y (T, N, H); saved (T, N, S)
    const int *lengths;
    Clip clip;
};

struct BackwardSteps {  // laid out as rnn_ops._BackwardSteps
    StepsHead head;
    const void *saved, *cs, *hs, *dy, *w_packed;  // W_h (G*H x H) laid out by pack_panels
    void *rec, *carry, *dc, *d_gates, *dh_gates;
    const int *lengths;
    Clip clip;
};

// C (m x n) = A (m x k) @ B, contiguous rows, B laid out by pack_panels.
template <typename T> void step_product(long long m, long long n, long long k, const T *a, const void *b, T *c) {
    packed::product<T>(m, n, k, a, k, static_cast<const T *>(b), c, n);
}

// Processing step s: its time index and the state slots it reads and writes (rnn_ops' _Layer._slots).
struct Slots {
    long long t, prev, next;
};
Slots slots_of(const StepsHead &p, int s) {
    if (p.backwards) {
        const long long t = p.length - 1 - s;
        return {t, t + 1, t};
    }
    return {s, s, s + 1LL};
}

template <typename T>
int forward_steps(const ForwardSteps &p, int s0, int s1, char *err, size_t err_len) {
    const StepsHead &q = p.head;
    const long long N = q.batch, H = q.hidden, G = q.gate_rows;
    const unsigned grid[3] = {(unsigned)(N < 65535 ? N : 65535), 1u, 1u}, block[3] = {1u, 1u, 1u};
    T *hg = static_cast<T *>(p.hg), *hs = static_cast<T *>(p.hs), *cs = static_cast<T *>(p.cs);
    const T *bias_i = static_cast<const T *>(p.bias_i), *bias_h = static_cast<const T *>(p.bias_h);
    const int *lengths = p.lengths;
    int rows = (int)N, hidden = (int)H, clip = (int)p.clip.on, relu = q.mode == 3;
    Math<T> lo = (Math<T>)p.clip.lo, hi = (Math<T>)p.clip.hi;
    for (int s = s0; s < s1; ++s) {
        const Slots at = slots_of(q, s);
        const T *x = static_cast<const T *>(p.proj) + at.t * N * G;
        const T *h_prev = hs + at.prev * N * H;
        T *h_next = hs + at.next * N * H;
        T *y = p.y ? static_cast<T *>(p.y) + at.t * N * H : nullptr;
        T *saved = p.saved ? static_cast<T *>(p.saved) + at.t * N * q.saved_rows : nullptr;
        step_product<T>(N, G, H, h_prev, p.w_packed, hg);
        const T *hgc = hg;
        int step = s, rc;
        if (q.mode == 0) {
            const T *c_prev = cs + at.prev * N * H;
            T *c_next = cs + at.next * N * H;
            void *args[] = {&x, &hgc, &bias_i, &bias_h, &h_prev, &c_prev, &h_next, &c_next, &y, &saved, &lengths,
                            &step, &rows, &hidden, &clip, &lo, &hi};
            rc = ::hostcuda::launch(&lstm_forward<T>, "lstm_forward", args, grid, block, 0, q.threads, err, err_len);
        } else if (q.mode == 1) {
            void *args[] = {&x, &hgc, &bias_i, &bias_h, &h_prev, &h_next, &y, &saved, &lengths, &step, &rows,
                            &hidden};
            rc = ::hostcuda::launch(&gru_forward<T>, "gru_forward", args, grid, block, 0, q.threads, err, err_len);
        } else {
            void *args[] = {&x, &hgc, &bias_i, &bias_h, &h_prev, &h_next, &y, &lengths, &step, &rows, &hidden, &relu};
            rc = ::hostcuda::launch(&rnn_forward<T>, "rnn_forward", args, grid, block, 0, q.threads, err, err_len);
        }
        if (rc != 0) return rc;
    }
    return 0;
}

// Processing steps s1-1 down to s0 of a layer's backward, as rnn_ops' _Layer.run_back: per step the cell's
// backward, then rec = dh_gates[t] @ W_h (the gradient reaching the previous step's state).
template <typename T>
int backward_steps(const BackwardSteps &p, int s0, int s1, char *err, size_t err_len) {
    const StepsHead &q = p.head;
    const long long N = q.batch, H = q.hidden, G = q.gate_rows;
    const unsigned grid[3] = {(unsigned)(N < 65535 ? N : 65535), 1u, 1u}, block[3] = {1u, 1u, 1u};
    const T *hs = static_cast<const T *>(p.hs), *cs = static_cast<const T *>(p.cs);
    T *rec = static_cast<T *>(p.rec), *carry = static_cast<T *>(p.carry), *dc = static_cast<T *>(p.dc);
    const int *lengths = p.lengths;
    int rows = (int)N, hidden = (int)H, clip = (int)p.clip.on, relu = q.mode == 3;
    Math<T> lo = (Math<T>)p.clip.lo, hi = (Math<T>)p.clip.hi;
    for (int s = s1 - 1; s >= s0; --s) {
        const Slots at = slots_of(q, s);
        const T *saved = p.saved ? static_cast<const T *>(p.saved) + at.t * N * q.saved_rows : nullptr;
        const T *dy = static_cast<const T *>(p.dy) + at.t * N * H;
        const T *recc = rec;
        T *d_gates = static_cast<T *>(p.d_gates) + at.t * N * G;
        T *dh_gates = static_cast<T *>(p.dh_gates) + at.t * N * G;
        int step = s, rc;
        if (q.mode == 0) {
            const T *c_prev = cs + at.prev * N * H;
            void *args[] = {&saved, &c_prev, &dy, &recc, &carry, &dc, &d_gates, &lengths, &step, &rows, &hidden,
                            &clip, &lo, &hi};
            rc = ::hostcuda::launch(&lstm_backward<T>, "lstm_backward", args, grid, block, 0, q.threads, err, err_len);
        } else if (q.mode == 1) {
            const T *h_prev = hs + at.prev * N * H;
            void *args[] = {&saved, &h_prev, &dy, &recc, &carry, &d_gates, &dh_gates, &lengths, &step, &rows,
                            &hidden};
            rc = ::hostcuda::launch(&gru_backward<T>, "gru_backward", args, grid, block, 0, q.threads, err, err_len);
        } else {
            const T *h_next = hs + at.next * N * H;
            void *args[] = {&h_next, &dy, &recc, &carry, &d_gates, &lengths, &step, &rows, &hidden, &relu};
            rc = ::hostcuda::launch(&rnn_backward<T>, "rnn_backward", args, grid, block, 0, q.threads, err, err_len);
        }
        if (rc != 0) return rc;
        step_product<T>(N, H, G, dh_gates, p.w_packed, rec);
    }
    return 0;
}

}  // namespace

// The entry points rnn_ops finds by name: mxlite_rnn_{forward,backward}_steps_{float,double}(steps, s0, s1, err, len).
#define RNN_STEPS_ENTRY(DIRECTION, STEPS, T)                                                                    \
    extern "C" __attribute__((visibility("default"))) int mxlite_rnn_##DIRECTION##_steps_##T(                  \
        const STEPS *p, int s0, int s1, char *err, size_t err_len) {                                          \
        return DIRECTION##_steps<T>(*p, s0, s1, err, err_len);                                                  \
    }
RNN_STEPS_ENTRY(forward, ForwardSteps, float)
RNN_STEPS_ENTRY(forward, ForwardSteps, double)
RNN_STEPS_ENTRY(backward, BackwardSteps, float)
RNN_STEPS_ENTRY(backward, BackwardSteps, double)

// The packed product on its own, for the Python loop and the tests (same argument order as packed::product;
// pack_panels' `transposed` as 0/1; `portable`: the loop without vector intrinsics). They cannot fail.
#define PACKED_ENTRIES(T)                                                                                       \
    extern "C" __attribute__((visibility("default"))) int mxlite_pack_panels_##T(                              \
        const T *src, long long ld, int transposed, long long k, long long n, T *dst, char *, size_t) {       \
        packed::pack_panels<T>(src, ld, transposed != 0, k, n, dst);                                          \
        return 0;                                                                                             \
    }                                                                                                         \
    extern "C" __attribute__((visibility("default"))) int mxlite_packed_product_##T(                           \
        long long m, long long n, long long k, const T *a, long long lda, const T *b, T *c, long long ldc,    \
        int portable, char *, size_t) {                                                                       \
        if (portable)                                                                                         \
            packed::product<T, true>(m, n, k, a, lda, b, c, ldc);                                             \
        else                                                                                                  \
            packed::product<T, false>(m, n, k, a, lda, b, c, ldc);                                            \
        return 0;                                                                                             \
    }
PACKED_ENTRIES(float)
PACKED_ENTRIES(double)

// Writes whether packed::product uses the AVX-512 loop in this build (1) or the portable one (0).
extern "C" __attribute__((visibility("default"))) int mxlite_packed_vectorised(int *out, char *, size_t) {
    *out = packed::kVectorised ? 1 : 0;
    return 0;
}
#endif  // HOSTCUDA_SERIAL

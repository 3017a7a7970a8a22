// Convolution and pooling data movement: im2col, col2im and the max-pool backward scatter.
//
// Templated on the element type T (float, double, __half); no arithmetic beyond the sums of
// col2im and the gradient-times-hit products of max pooling, done as the NumPy twins do them.
//
//   im2col<T>             cols[n, c, k, o] = img[n, c, o*stride + k*dilation - pad]   (a copy; 0 outside)
//   col2im<T>             img[n, c, p] = the sum, in tap order, of cols[n, c, k, o] over every
//                         (tap k, position o) with o*stride + k*dilation - pad == p; 0 where none reaches p
//   max_pool_forward<T>   each window's maximum and the tap that first holds it, from the image
//   max_pool_scatter<T>   col2im of grad[n, c, o] * (k == that tap): max_pool_forward's backward
//   max_pool_backward<T>  col2im of grad[n, c, o] * (k is the first maximum of window o), the
//                         first maximum in tap order found from the forward's tap columns
//
// The twins are in mxlite/ops/conv.py (_ConvGeom.im2col, _scatter_taps, _max_pool's
// backward) and are what mxlite/ops/_conv_kernels.py runs when a CPU device does not use the
// compiled kernels; tests/test_conv_kernels.py holds the kernels to them bit for bit.
//
// Geometry: every kernel takes 24 int64 values by value (GEOMETRY_PARAMS, see Geometry below): n
// samples of c channels, each an image ("plane") of pd x ph x pw elements (contiguous, (n, c, pd, ph,
// pw)); a kd x kh x kw kernel with strides sd/sh/sw and dilations dd/dh/dw; od x oh x ow output
// positions; the zero padding qd/qh/qw before each axis; the column strides s_n, s_c, s_k; and
// `accumulate` (below). Fewer spatial axes are the same geometry with leading axes of size 1 (extent,
// kernel, output, stride and dilation 1, padding 0).
//
// Padding: tap (a, b, e) at output position (x, y, z) reads image element (x*sd + a*dd - qd,
// y*sh + b*dh - qh, z*sw + e*dw - qw); where that lies outside the image, im2col writes +0.0 (the
// value the twin's zero-padded copy holds) and col2im and max_pool_backward drop the value (the twin
// sums into a zero-padded image and crops the margin away; the sums of the elements it keeps are the
// same). No padded copy of the image is made in either direction. Taps k count in row-major order over (kd, kh, kw), positions o in row-major order
// over (od, oh, ow). The columns put element (n, c, k, o) at n*s_n + c*s_c + k*s_k + o, positions
// contiguous; the strides give every layout the host uses: per sample (n, c, k, o), merged
// (c, k, n, o) and taps first (k, n, c, o). Values, not a pointer to a geometry array: a launch
// then needs no host-to-device copy and no device array that every stream may read.
//
// Order of the sums (col2im, max_pool_backward): the twin starts from zeros and adds one tap at a
// time over the whole batch, tap by tap in row-major order (`out[tap slices] += cols[tap]`), so an
// element's value is ((0 + v_first) + v_second) + ... over the taps that reach it, in tap order.
// The kernels add the same values in the same order, without atomics: each element is summed by
// one thread. When no two (tap, position) pairs reach the same element (`accumulate` == 0; the
// host's conservative test `_overlapping`), the twin assigns instead of adding to zero, which keeps
// a -0.0, and so do the kernels. Float16 sums round to half after every addition, as NumPy's do
// (the float32 sum of two halves rounded once to half is the correctly rounded half sum). Float32
// sums and products go through add.rn / mul.rn, so CuPy's -ftz=true keeps subnormals as NumPy does.
// What IEEE leaves open stays open: where two different NaNs meet in a sum (NaN + NaN, inf*0's
// default NaN + a data NaN), which one comes out depends on the operand order a compiler picks, and
// a GPU makes every NaN its canonical one; tests compare NaNs as NaNs there.
//
// Work split: block b handles planes b, b + gridDim.x, ..., except that a block of one thread handles
// a run of consecutive planes (plane_run): the serial host build deals blocks out to its threads one at
// a time, and with every other plane on another thread, two threads would write the two ends of every
// plane's output, sharing cache lines (2x2 max pooling of 128 x 32 x 32 x 32 dealt that way is slower on two
// threads than on one). A block of one thread (blockDim.x == 1:
// the serial host build CPU devices run, mxlite/device/_hostcuda) walks the plane in the twin's order: a
// tap at a time, a line of ow positions at a time, so the inner loops are unit-stride (or strided)
// copies and adds over a plane that stays in cache, and g++ vectorises them. A block of several
// threads gives each thread whole elements instead: im2col one output element per thread, col2im a
// gather per image element over the taps that reach it, in tap order. Both forms give the same
// bits; any block size is correct. max_pool_backward first finds each window's first maximum (a
// thread per window, into the `first` scratch), then, after a barrier, sums as col2im does.
//
// Expected macros: none. Compiled by cupy.RawModule (NVRTC) with name_expressions for each
// instantiation, by `nvcc --ptx -arch=sm_80` in the test suite, and by g++ for the host
// (mxlite/device/_hostcuda: serial build for CPU devices, fiber build for the emulated GPUs).

#include <cuda_fp16.h>

namespace {

// Values in the precision of the twin's arithmetic: half goes through float (as NumPy's float16
// ufuncs do), float and double stay themselves. A half NaN keeps its sign and payload as in
// NumPy's conversion (0x7e00 -> 0x7fc00000), where __half2float makes every NaN 0x7fffffff.
__device__ __forceinline__ float arith(__half x) {
    const unsigned h = __half_as_ushort(x);
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0u)
        return __uint_as_float(((h & 0x8000u) << 16) | 0x7f800000u | ((h & 0x03ffu) << 13));
    return __half2float(x);
}
__device__ __forceinline__ float arith(float x) { return x; }
__device__ __forceinline__ double arith(double x) { return x; }

template <typename T> __device__ __forceinline__ T store_as(float x);
template <> __device__ __forceinline__ float store_as<float>(float x) { return x; }
// float -> half rounded to nearest even; a NaN keeps its sign and top payload bits as NumPy's
// conversion does (0x7fc00000 -> 0x7e00), where __float2half_rn makes every NaN 0x7fff.
template <> __device__ __forceinline__ __half store_as<__half>(float x) {
    if (x == x) return __float2half_rn(x);
    const unsigned u = __float_as_uint(x);
    const unsigned short h = (unsigned short)(0x7c00u | ((u & 0x007fffffu) >> 13));
    return __ushort_as_half((unsigned short)(((u >> 16) & 0x8000u) | (h == 0x7c00u ? 0x7c01u : h)));
}
template <typename T> __device__ __forceinline__ T store_as(double x);
template <> __device__ __forceinline__ double store_as<double>(double x) { return x; }

// IEEE float32 sum and product that keep subnormals (PTX add.rn / mul.rn): CuPy compiles every
// RawModule with -ftz=true, which would flush them where NumPy keeps them. float64 never flushes.
__device__ __forceinline__ float add_ieee(float a, float b) {
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ double add_ieee(double a, double b) { return a + b; }
__device__ __forceinline__ float mul_ieee(float a, float b) {
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ double mul_ieee(double a, double b) { return a * b; }

// a == b as NumPy compares (NaN unequal to everything, -0.0 == +0.0), without the flush to zero
// that would make two different float32 subnormals equal under -ftz=true.
__device__ __forceinline__ bool same_value(float a, float b) {
    const unsigned ua = __float_as_uint(a), ub = __float_as_uint(b);
    return a == a && (ua == ub || ((ua | ub) & 0x7fffffffu) == 0u);
}
__device__ __forceinline__ bool same_value(double a, double b) { return a == b; }

template <typename T> __device__ __forceinline__ T zero() { return store_as<T>(decltype(arith(T()))(0)); }

// a + b rounded to T (NumPy's `+` for T).
template <typename T> __device__ __forceinline__ T add(T a, T b) { return store_as<T>(add_ieee(arith(a), arith(b))); }

// g * hit, hit as 1 or 0 in T (NumPy's multiply of a T array by a boolean one): keeps -0.0 for a
// negative gradient and NaN for a NaN or infinite one where hit is 0, as the twin does.
template <typename T> __device__ __forceinline__ T times_hit(T g, bool hit) {
    using A = decltype(arith(T()));
    return store_as<T>(mul_ieee(arith(g), hit ? A(1) : A(0)));
}

// The geometry, passed by value as 24 int64 kernel arguments (GEOMETRY_PARAMS: 192 bytes of the 4 KB
// of parameters a kernel may take), in this order (mxlite/ops/_conv_kernels.py: geometry, then the
// column strides and the accumulate flag): n, c, pd, ph, pw, kd, kh, kw, od, oh, ow, sd, sh, sw, dd,
// dh, dw, qd, qh, qw, s_n, s_c, s_k, accumulate.
#define GEOMETRY_PARAMS                                                                                        \
    long long geo_n, long long geo_c, long long geo_pd, long long geo_ph, long long geo_pw, long long geo_kd, \
        long long geo_kh, long long geo_kw, long long geo_od, long long geo_oh, long long geo_ow,             \
        long long geo_sd, long long geo_sh, long long geo_sw, long long geo_dd, long long geo_dh,             \
        long long geo_dw, long long geo_qd, long long geo_qh, long long geo_qw, long long geo_s_n,               \
        long long geo_s_c, long long geo_s_k, long long geo_accumulate
#define GEOMETRY_TYPES                                                                                         \
    long long, long long, long long, long long, long long, long long, long long, long long, long long,       \
        long long, long long, long long, long long, long long, long long, long long, long long, long long,   \
        long long, long long, long long, long long, long long, long long
#define GEOMETRY_FROM_PARAMS                                                                                   \
    Geometry(geo_n, geo_c, geo_pd, geo_ph, geo_pw, geo_kd, geo_kh, geo_kw, geo_od, geo_oh, geo_ow, geo_sd,    \
             geo_sh, geo_sw, geo_dd, geo_dh, geo_dw, geo_qd, geo_qh, geo_qw, geo_s_n, geo_s_c, geo_s_k,         \
             geo_accumulate)

struct Geometry {
    int n, c, pd, ph, pw, kd, kh, kw, od, oh, ow, sd, sh, sw, dd, dh, dw, qd, qh, qw;
    long long s_n, s_c, s_k;
    int accumulate;

    __device__ Geometry(GEOMETRY_PARAMS)
        : n((int)geo_n), c((int)geo_c), pd((int)geo_pd), ph((int)geo_ph), pw((int)geo_pw), kd((int)geo_kd),
          kh((int)geo_kh), kw((int)geo_kw), od((int)geo_od), oh((int)geo_oh), ow((int)geo_ow), sd((int)geo_sd),
          sh((int)geo_sh), sw((int)geo_sw), dd((int)geo_dd), dh((int)geo_dh), dw((int)geo_dw), qd((int)geo_qd),
          qh((int)geo_qh), qw((int)geo_qw), s_n(geo_s_n),
          s_c(geo_s_c), s_k(geo_s_k), accumulate((int)geo_accumulate) {}

    __device__ long long planes() const { return (long long)n * c; }
    __device__ long long plane_size() const { return (long long)pd * ph * pw; }
    __device__ int taps() const { return kd * kh * kw; }
    __device__ long long positions() const { return (long long)od * oh * ow; }
    // Offset of plane (sample, channel) = plane in the columns.
    __device__ long long cols_offset(long long plane) const { return plane / c * s_n + plane % c * s_c; }
    // Whether the windows tile the image: each element is read by exactly one (tap, position) pair.
    __device__ bool tiles() const {
        return kd == sd && kh == sh && kw == sw && dd == 1 && dh == 1 && dw == 1 && od * sd == pd && oh * sh == ph &&
               ow * sw == pw && qd == 0 && qh == 0 && qw == 0;
    }
    // The output positions z of a line whose tap e reads inside the image along w: [*lo, *hi).
    __device__ void inside_w(int e, int *lo, int *hi) const {
        const int first = qw - e * dw, end = pw + qw - e * dw;  // z*sw must reach first and stay below end
        const int l = first <= 0 ? 0 : (first + sw - 1) / sw;
        const int h = end <= 0 ? 0 : (end + sw - 1) / sw;
        *lo = l < ow ? l : ow;
        *hi = h < *lo ? *lo : (h < ow ? h : ow);
    }
};

// The planes of this block: every gridDim.x-th from blockIdx.x, or (one thread per block) a run of
// consecutive ones, the runs of the blocks in order (see "Work split" in the header).
struct PlaneRun {
    long long first, end, step;  // planes first, first + step, ... below end
};
__device__ __forceinline__ PlaneRun plane_run(const Geometry &g) {
    const long long planes = g.planes();
    if (blockDim.x != 1) return PlaneRun{(long long)blockIdx.x, planes, (long long)gridDim.x};
    const long long per = (planes + gridDim.x - 1) / gridDim.x;
    const long long first = (long long)blockIdx.x * per;
    return PlaneRun{first, first + per < planes ? first + per : planes, 1};
}

// The image coordinate read along one axis at output coordinate x by tap t (may lie outside [0, extent)).
__device__ __forceinline__ int image_coordinate(int x, int t, int stride, int dilation, int pad) {
    return x * stride + t * dilation - pad;
}

// The output coordinate reached along one axis by tap t from image coordinate p, or -1 if none.
__device__ __forceinline__ int position_of(int p, int t, int stride, int dilation, int out) {
    const int r = p - t * dilation;
    if (r < 0 || r % stride) return -1;
    const int x = r / stride;
    return x < out ? x : -1;
}

// Calls line(k, o, row, lo, hi) for every tap k, in tap order, and every output line (x, y) of ow
// positions, o the line's first position: row is the offset in the plane of the image element tap k reads
// at position lo of the line, or -1 where the whole line reads padding; positions [lo, hi) of the line
// read inside the image (Geometry::inside_w), the others padding. The one-thread kernels walk a plane
// with it, so that their short line loops (in `line`) run vectorised over a plane that stays in cache.
template <typename Line>
__device__ __forceinline__ void for_each_line(const Geometry &g, Line line) {
    int k = 0;
    for (int a = 0; a < g.kd; ++a)
        for (int b = 0; b < g.kh; ++b)
            for (int e = 0; e < g.kw; ++e, ++k) {
                int lo, hi;
                g.inside_w(e, &lo, &hi);
                const long long w0 = image_coordinate(lo, e, g.sw, g.dw, g.qw);
                for (int x = 0; x < g.od; ++x) {
                    const int i = image_coordinate(x, a, g.sd, g.dd, g.qd);
                    for (int y = 0; y < g.oh; ++y) {
                        const int j = image_coordinate(y, b, g.sh, g.dh, g.qh);
                        const bool inside = i >= 0 && i < g.pd && j >= 0 && j < g.ph;
                        line(k, ((long long)x * g.oh + y) * g.ow, inside ? ((long long)i * g.ph + j) * g.pw + w0 : -1LL,
                             lo, hi);
                    }
                }
            }
}

// The one-thread form of sum_taps_into_plane: tap by tap in order, a line at a time (for_each_line),
// the store (assign or add) and the unit stride compile-time constants.
template <bool kAccumulate, bool kUnitStride, typename T, typename Value>
__device__ __forceinline__ void sum_taps_serially(T *__restrict__ out, const Geometry &g, Value value) {
    const long long sw = kUnitStride ? 1 : g.sw;
    for_each_line(g, [&](int k, long long o, long long row, int lo, int hi) {
        if (row < 0) return;
        T *__restrict__ line = out + row;
        for (int z = lo; z < hi; ++z) {
            if constexpr (kAccumulate) line[(z - lo) * sw] = add(line[(z - lo) * sw], value(k, o + z));
            else line[(z - lo) * sw] = value(k, o + z);
        }
    });
}

// Writes one plane of the image, `out` (plane_size() elements): element p gets the sum, in tap
// order, of value(k, o) over the (tap k, position o) pairs that reach it (0 where none does; with
// g.accumulate == 0, the one value assigned). value(k, o) returns a T.
template <typename T, typename Value>
__device__ __forceinline__ void sum_taps_into_plane(T *__restrict__ out, const Geometry &g, Value value) {
    const int accumulate = g.accumulate;
    if (blockDim.x == 1) {
        // One thread: tap by tap, as the twin, over a plane that stays in cache.
        const long long size = g.plane_size();
        if (accumulate || !g.tiles())  // where the windows tile the plane, every element is assigned below
            for (long long p = 0; p < size; ++p) out[p] = zero<T>();
        if (accumulate) {
            if (g.sw == 1) sum_taps_serially<true, true>(out, g, value);
            else sum_taps_serially<true, false>(out, g, value);
        } else {
            if (g.sw == 1) sum_taps_serially<false, true>(out, g, value);
            else sum_taps_serially<false, false>(out, g, value);
        }
        return;
    }
    // Several threads: each element of the plane is a gather over the taps that reach it, in tap order.
    const long long size = g.plane_size();
    for (long long p = threadIdx.x; p < size; p += blockDim.x) {
        // the element's coordinates in the padded image
        const int i = (int)(p / ((long long)g.ph * g.pw)) + g.qd, j = (int)(p / g.pw % g.ph) + g.qh;
        const int m = (int)(p % g.pw) + g.qw;
        T acc = zero<T>();
        for (int a = 0; a < g.kd; ++a) {
            const int x = position_of(i, a, g.sd, g.dd, g.od);
            if (x < 0) continue;
            for (int b = 0; b < g.kh; ++b) {
                const int y = position_of(j, b, g.sh, g.dh, g.oh);
                if (y < 0) continue;
                for (int e = 0; e < g.kw; ++e) {
                    const int z = position_of(m, e, g.sw, g.dw, g.ow);
                    if (z < 0) continue;
                    const T v = value((a * g.kh + b) * g.kw + e, ((long long)x * g.oh + y) * g.ow + z);
                    acc = accumulate ? add(acc, v) : v;
                }
            }
        }
        out[p] = acc;
    }
}

}  // namespace

// The one-thread form of im2col for one plane: tap by tap, a line at a time (for_each_line), a
// unit-stride copy when the stride along w is 1; padding reads +0.
template <bool kUnitStride, typename T>
__device__ __forceinline__ void copy_lines_serially(const T *__restrict__ src, T *__restrict__ dst,
                                                    const Geometry &g) {
    const long long sw = kUnitStride ? 1 : g.sw;
    const int ow = g.ow;
    const T zero_value = zero<T>();
    for_each_line(g, [&](int k, long long o, long long row, int lo, int hi) {
        T *__restrict__ out = dst + k * g.s_k + o;
        if (row < 0) lo = hi = ow;  // a line of padding
        const T *__restrict__ line = src + (row < 0 ? 0 : row);
        for (int z = 0; z < lo; ++z) out[z] = zero_value;
        for (int z = lo; z < hi; ++z) out[z] = line[(z - lo) * sw];
        for (int z = hi; z < ow; ++z) out[z] = zero_value;
    });
}

// The one-thread im2col of one plane when a tap's columns are the image shifted by a constant: one or
// two spatial axes (pd == od == kd == 1), stride and dilation 1 along h and w, and as many output
// positions as image elements along w (ow == pw: "same" padding). Then tap (b, e)'s column at
// o = y * ow + z is img[o + (b - qh) * pw + (e - qw)] wherever that element is inside the image, so
// each tap is one contiguous copy of its inside rows, after which the positions whose element lies
// in the padding (rows above or below the image, the qw - e first or e - qw last columns of a row,
// which the copy filled from the neighbouring row) are set to +0: the values of copy_lines_serially,
// with the per-line work gone (lines are only 16-32 positions long in small images).
template <typename T>
__device__ __forceinline__ bool copy_shifted_taps(const T *__restrict__ src, T *__restrict__ dst, const Geometry &g) {
    if (!(g.pd == 1 && g.od == 1 && g.kd == 1 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.ow == g.pw))
        return false;
    const T zero_value = zero<T>();
    const long long plane = (long long)g.ph * g.pw, ow = g.ow;
    for (int b = 0, k = 0; b < g.kh; ++b) {
        // output rows y whose image row y + b - qh lies inside [0, ph)
        const int y0 = g.qh - b > 0 ? g.qh - b : 0;
        const int y1 = g.ph + g.qh - b < g.oh ? g.ph + g.qh - b : g.oh;
        for (int e = 0; e < g.kw; ++e, ++k) {
            T *__restrict__ out = dst + k * g.s_k;
            const int shift = e - g.qw;
            if (y1 <= y0) {
                for (long long o = 0; o < (long long)g.oh * ow; ++o) out[o] = zero_value;
                continue;
            }
            for (long long o = 0; o < (long long)y0 * ow; ++o) out[o] = zero_value;
            const long long first = (long long)y0 * ow, last = (long long)y1 * ow;  // [first, last) copied
            const long long from = (long long)(y0 + b - g.qh) * g.pw + shift;  // image offset of position first
            long long lo = first, hi = last;
            if (from < 0) lo = first - from;                  // before the plane: padding (column 0)
            if (from + (last - first) > plane) hi = first + (plane - from);  // past it: padding (last column)
            for (long long o = first; o < lo; ++o) out[o] = zero_value;
            const T *__restrict__ in = src + from - first;
            for (long long o = lo; o < hi; ++o) out[o] = in[o];
            for (long long o = hi; o < last; ++o) out[o] = zero_value;
            for (long long o = last; o < (long long)g.oh * ow; ++o) out[o] = zero_value;
            if (shift < 0) {  // the first -shift columns of every row read left of the image
                for (int y = y0; y < y1; ++y)
                    for (int z = 0; z < -shift && z < ow; ++z) out[(long long)y * ow + z] = zero_value;
            } else if (shift > 0) {  // the last shift columns read right of it
                for (int y = y0; y < y1; ++y)
                    for (int z = ow - shift > 0 ? ow - shift : 0; z < ow; ++z) out[(long long)y * ow + z] = zero_value;
            }
        }
    }
    return true;
}

// cols[n, c, k, o] = img[n, c, o*stride + k*dilation], the columns at n*s_n + c*s_c + k*s_k + o.
template <typename T>
__global__ void im2col(const T *__restrict__ img, T *__restrict__ cols, GEOMETRY_PARAMS) {
    const Geometry g = GEOMETRY_FROM_PARAMS;
    const long long s_k = g.s_k;
    const long long positions = g.positions();
    const PlaneRun run = plane_run(g);
    for (long long plane = run.first; plane < run.end; plane += run.step) {
        const T *__restrict__ src = img + plane * g.plane_size();
        T *__restrict__ dst = cols + g.cols_offset(plane);
        if (blockDim.x == 1) {  // one thread: a tap at a time as one shifted copy, or a line at a time
            if (copy_shifted_taps(src, dst, g)) continue;
            if (g.sw == 1) copy_lines_serially<true>(src, dst, g);
            else copy_lines_serially<false>(src, dst, g);
            continue;
        }
        const long long count = positions * g.taps();
        for (long long i = threadIdx.x; i < count; i += blockDim.x) {
            const int k = (int)(i / positions);
            const long long o = i % positions;
            const int a = k / (g.kh * g.kw), b = k / g.kw % g.kh, e = k % g.kw;
            const int x = (int)(o / ((long long)g.oh * g.ow)), y = (int)(o / g.ow % g.oh), z = (int)(o % g.ow);
            const int u = image_coordinate(x, a, g.sd, g.dd, g.qd), v = image_coordinate(y, b, g.sh, g.dh, g.qh);
            const int w = image_coordinate(z, e, g.sw, g.dw, g.qw);
            const bool inside = u >= 0 && u < g.pd && v >= 0 && v < g.ph && w >= 0 && w < g.pw;
            dst[k * s_k + o] = inside ? src[((long long)u * g.ph + v) * g.pw + w] : zero<T>();
        }
    }
}

// img[n, c, p] = sum, in tap order, of cols[n, c, k, o] over o*stride + k*dilation == p (every
// element of img is written; see the header for accumulate).
template <typename T>
__device__ __forceinline__ void col2im_plane(const T *__restrict__ cols, T *__restrict__ img, const Geometry &g,
                                             long long plane) {
    const T *__restrict__ src = cols + g.cols_offset(plane);
    const long long s_k = g.s_k;
    sum_taps_into_plane(img + plane * g.plane_size(), g, [&](int k, long long o) { return src[k * s_k + o]; });
}

template <typename T>
__global__ void col2im(const T *__restrict__ cols, T *__restrict__ img, GEOMETRY_PARAMS) {
    const Geometry g = GEOMETRY_FROM_PARAMS;
    const PlaneRun run = plane_run(g);
    for (long long plane = run.first; plane < run.end; plane += run.step) col2im_plane(cols, img, g, plane);
}

// The input gradient of max pooling (dilation 1): window o's gradient goes to its first maximum in
// tap order. taps: the forward's (taps, m) window values (taps first, m = n*c*positions; the
// column strides of the geometry are not used), maxima their maxima (m), grad the output gradient (m);
// first (m ints) is scratch. img (n, c, planes) is written whole: col2im of grad[w] * (k == the
// first maximum of w).
template <typename T>
__global__ void max_pool_backward(const T *__restrict__ taps, const T *__restrict__ maxima,
                                  const T *__restrict__ grad, int *__restrict__ first, T *__restrict__ img,
                                  GEOMETRY_PARAMS) {
    const Geometry g = GEOMETRY_FROM_PARAMS;
    const long long positions = g.positions();
    const long long m = g.planes() * positions;
    const int count = g.taps();
    const PlaneRun run = plane_run(g);
    for (long long plane = run.first; plane < run.end; plane += run.step) {
        const long long base = plane * positions;
        // Each thread finds the first maximum of its own windows (no sharing within this phase).
        for (long long o = threadIdx.x; o < positions; o += blockDim.x) first[base + o] = count;
        for (int k = 0; k < count; ++k) {
            const T *__restrict__ row = taps + k * m + base;
            for (long long o = threadIdx.x; o < positions; o += blockDim.x) {
                const int f = first[base + o];
                first[base + o] = (f == count && same_value(arith(row[o]), arith(maxima[base + o]))) ? k : f;
            }
        }
        __syncthreads();  // the gather below reads windows other threads resolved
        const int *__restrict__ hit = first + base;
        const T *__restrict__ gw = grad + base;
        sum_taps_into_plane(img + plane * g.plane_size(), g,
                            [&](int k, long long o) { return times_hit(gw[o], hit[o] == k); });
        // no barrier before the next plane: its windows, scratch and image are disjoint from these
    }
}

// One step of max_pool_forward's running maximum: tap k's value t replaces (b, f) when strictly greater
// or the first NaN; the first tap always sets them.
template <typename T>
__device__ __forceinline__ void keep_max(T &b, int &f, T t, int k) {
    const auto tv = arith(t), bv = arith(b);
    const bool take = k == 0 || tv > bv || (tv != tv && bv == bv);
    b = take ? t : b;
    f = take ? k : f;
}

// The one-thread form of max_pool_forward for one plane: tap by tap, a line at a time (for_each_line,
// a strided read of the image line, selects only), the running maxima and taps kept in the outputs;
// padding reads +0, as im2col.
template <bool kUnitStride, typename T>
__device__ __forceinline__ void max_lines_serially(const T *__restrict__ src, T *__restrict__ best,
                                                   int *__restrict__ at, const Geometry &g) {
    const long long sw = kUnitStride ? 1 : g.sw;
    const int ow = g.ow;
    const T zero_value = zero<T>();
    for_each_line(g, [&](int k, long long o, long long row, int lo, int hi) {
        T *__restrict__ bl = best + o;
        int *__restrict__ al = at + o;
        if (row < 0) lo = hi = ow;  // a line of padding
        const T *__restrict__ line = src + (row < 0 ? 0 : row);
        for (int z = 0; z < lo; ++z) keep_max(bl[z], al[z], zero_value, k);
        for (int z = lo; z < hi; ++z) keep_max(bl[z], al[z], line[(z - lo) * sw], k);
        for (int z = hi; z < ow; ++z) keep_max(bl[z], al[z], zero_value, k);
    });
    const long long positions = g.positions();
    const int count = g.taps();
    for (long long o = 0; o < positions; ++o) {
        const auto bv = arith(best[o]);
        at[o] = bv == bv ? at[o] : count;
    }
}

// The one-thread form of max_pool_forward for 2x2 windows that tile a 2-D plane (stride 2, no padding: the
// usual pooling after a convolution): each output element's four taps compared in tap order, as
// keep_max does tap by tap, with one store per output. The lines are too short (ow positions, 16 after a
// 32x32 image) for the tap-by-tap form's per-line setup to pay for itself; this gives the same bits.
template <typename T>
__device__ __forceinline__ void max_2x2_serially(const T *__restrict__ src, T *__restrict__ best,
                                                 int *__restrict__ at, const Geometry &g) {
    const long long pw = g.pw;
    for (int y = 0; y < g.oh; ++y) {
        const T *__restrict__ r0 = src + 2LL * y * pw;
        const T *__restrict__ r1 = r0 + pw;
        T *__restrict__ bl = best + (long long)y * g.ow;
        int *__restrict__ al = at + (long long)y * g.ow;
        for (int z = 0; z < g.ow; ++z) {
            T b = r0[2 * z];
            int f = 0;
            keep_max(b, f, r0[2 * z + 1], 1);
            keep_max(b, f, r1[2 * z], 2);
            keep_max(b, f, r1[2 * z + 1], 3);
            const auto bv = arith(b);
            bl[z] = b;
            al[z] = bv == bv ? f : 4;
        }
    }
}

// Whether a plane is pooled by 2x2 windows that tile it (max_2x2_serially, scatter_2x2_serially).
__device__ __forceinline__ bool tiles_2x2(const Geometry &g) {
    return g.tiles() && g.pd == 1 && g.kd == 1 && g.kh == 2 && g.kw == 2 && !g.accumulate;
}

// Max pooling's forward without a copy of the windows: maxima[n, c, o] = the maximum of window o of the
// image (NaN where a tap is NaN), first[n, c, o] = the tap, in tap order, that first holds it (taps()
// where it is NaN: no tap takes the gradient). Tap by tap over the window lines, a later tap replacing
// the running maximum only when strictly greater or the first NaN, so the value kept is the first
// maximum's own (its sign, for +-0 ties). Twin: conv.py's _max_pool_twin_forward. Dilation 1; the
// image may be padded (it is read with the geometry's padding, which max pooling leaves at 0).
template <typename T>
__global__ void max_pool_forward(const T *__restrict__ img, T *__restrict__ maxima, int *__restrict__ first,
                                 GEOMETRY_PARAMS) {
    const Geometry g = GEOMETRY_FROM_PARAMS;
    const long long positions = g.positions();
    const int count = g.taps();
    const PlaneRun run = plane_run(g);
    for (long long plane = run.first; plane < run.end; plane += run.step) {
        const T *__restrict__ src = img + plane * g.plane_size();
        T *__restrict__ best = maxima + plane * positions;
        int *__restrict__ at = first + plane * positions;
        if (blockDim.x == 1) {  // one thread: a line of ow positions at a time
            if (tiles_2x2(g)) max_2x2_serially(src, best, at, g);
            else if (g.sw == 1) max_lines_serially<true>(src, best, at, g);
            else max_lines_serially<false>(src, best, at, g);
            continue;
        }
        for (long long o = threadIdx.x; o < positions; o += blockDim.x) {
            const int x = (int)(o / ((long long)g.oh * g.ow)), y = (int)(o / g.ow % g.oh), z = (int)(o % g.ow);
            int k = 0, f = 0;
            T b = zero<T>();
            for (int a = 0; a < g.kd; ++a)
                for (int c = 0; c < g.kh; ++c)
                    for (int e = 0; e < g.kw; ++e, ++k) {
                        const int u = image_coordinate(x, a, g.sd, g.dd, g.qd);
                        const int v = image_coordinate(y, c, g.sh, g.dh, g.qh);
                        const int w = image_coordinate(z, e, g.sw, g.dw, g.qw);
                        const bool inside = u >= 0 && u < g.pd && v >= 0 && v < g.ph && w >= 0 && w < g.pw;
                        keep_max(b, f, inside ? src[((long long)u * g.ph + v) * g.pw + w] : zero<T>(), k);
                    }
            const auto bv = arith(b);
            best[o] = b;
            at[o] = bv == bv ? f : count;
        }
    }
}

// Max pooling's input gradient from the forward's `first` (max_pool_forward): col2im of
// grad[n, c, o] * (k == first[n, c, o]), summed as col2im sums (see the header). img is written whole.
template <typename T>
__global__ void max_pool_scatter(const int *__restrict__ first, const T *__restrict__ grad, T *__restrict__ img,
                                 GEOMETRY_PARAMS) {
    const Geometry g = GEOMETRY_FROM_PARAMS;
    const long long positions = g.positions();
    const PlaneRun run = plane_run(g);
    for (long long plane = run.first; plane < run.end; plane += run.step) {
        const int *__restrict__ hit = first + plane * positions;
        const T *__restrict__ gw = grad + plane * positions;
        if (blockDim.x == 1 && tiles_2x2(g)) {  // one thread, 2x2 tiles: each window's four elements assigned
            T *__restrict__ out = img + plane * g.plane_size();
            for (int y = 0; y < g.oh; ++y) {
                T *__restrict__ r0 = out + 2LL * y * g.pw;
                T *__restrict__ r1 = r0 + g.pw;
                const T *__restrict__ gl = gw + (long long)y * g.ow;
                const int *__restrict__ hl = hit + (long long)y * g.ow;
                for (int z = 0; z < g.ow; ++z) {
                    r0[2 * z] = times_hit(gl[z], hl[z] == 0);
                    r0[2 * z + 1] = times_hit(gl[z], hl[z] == 1);
                }
                for (int z = 0; z < g.ow; ++z) {
                    r1[2 * z] = times_hit(gl[z], hl[z] == 2);
                    r1[2 * z + 1] = times_hit(gl[z], hl[z] == 3);
                }
            }
            continue;
        }
        sum_taps_into_plane(img + plane * g.plane_size(), g,
                            [&](int k, long long o) { return times_hit(gw[o], hit[o] == k); });
    }
}

// No explicit instantiations: each variant is compiled when named. On a GPU, mxlite compiles one
// variant per module (NVRTC name_expressions: mxlite/device/kernels.py); the host build and the nvcc check
// in the tests take the full list of names from the Python driver.

#ifdef HOSTCUDA_SERIAL
#include "host_gemm.cuh"
// ---- host build only (CPU devices): a convolution's per-sample work in one call per direction ---------------------
// What mxlite/ops/conv.py's _ConvGeom.forward, input_grad and weight_grad do piece by piece from Python:
// each sample's product through NumPy's own BLAS (its cblas_sgemm/cblas_dgemm, host_gemm.cuh: the call
// numpy.matmul makes for these operands, hence the same bits), then Conv(activation='relu')'s bias and
// ReLU, col2im through the plane code of the kernel above, or the sum over a piece of the batch. One call
// deals the samples (the pieces) out to the host threads as blocks of the runtime; from Python, each
// piece's calls took turns at the interpreter's lock with the other threads' (a call that takes 12 us
// alone took about 180 us beside another thread's piece on a 2-core VM). mxlite/ops/_conv_native.py
// makes the calls; tests/test_conv_native.py holds them to the Python pieces' bits.
namespace {

using host_blas::kNoTrans;
using host_blas::kTrans;

// Laid out as _conv_native._Pieces (ctypes).
struct ConvPieces {
    void *gemm;              // cblas_sgemm (float) or cblas_dgemm (double) of NumPy's BLAS
    long long ilp64;         // its integer arguments are 64-bit
    const void *w;           // the weights (C_out, Kg), row-major
    const void *g;           // the output gradient (N, C_out, L); forward: the bias (C_out,) or null
    const void *cols;        // forward, weight_grad: the columns (N, Kg, L)
    void *out;               // forward: the output (N, C_out, L); input_grad: the input gradient (N, C, *S);
                             // weight_grad: the pieces' sums (P, Kg, C_out)
    long long n, c_out, kg, l;
    long long piece;         // samples per block
    long long geometry[24];  // input_grad: kernel_geometry(n) in GEOMETRY_PARAMS' order, for col2im
};

// C = op(A) @ op(B), row-major, through NumPy's BLAS.
template <typename T>
void product(const ConvPieces &p, int ta, int tb, long long m, long long n, long long k, const T *a, long long lda,
             const T *b, long long ldb, T *c, long long ldc) {
    host_blas::gemm<T>(p.gemm, p.ilp64, ta, tb, m, n, k, a, lda, b, ldb, c, ldc);
}

// Block b's samples: [first, end).
struct Samples {
    long long first, end;
};
__device__ Samples samples_of(const ConvPieces &p) {
    const long long first = (long long)blockIdx.x * p.piece;
    return {first, first + p.piece < p.n ? first + p.piece : p.n};
}

// This thread's scratch of at least `count` values, kept between calls (a sample's column gradient, a
// product: a few hundred KiB that stay in the core's cache from one sample to the next).
template <typename T>
__device__ T *thread_scratch(long long count) {
    static thread_local T *buffer = nullptr;
    static thread_local long long capacity = 0;
    if (capacity < count) {
        free(buffer);
        buffer = static_cast<T *>(malloc((size_t)count * sizeof(T)));
        capacity = buffer ? count : 0;
        if (!buffer) __trap();  // out of host memory: the launch fails with a message
    }
    return buffer;
}

// rows[c, i] = relu(rows[c, i] + bias[c]) as kernels/bias_act.cu's bias_relu_forward: the sum rounded to T
// (host code: + is the IEEE addition), kept where it is > 0 or NaN, else +0.
template <typename T>
void bias_relu_rows(T *__restrict__ rows, const T *__restrict__ bias, long long channels, long long width) {
    for (long long c = 0; c < channels; ++c) {
        const T b = bias[c];
        T *__restrict__ row = rows + c * width;
        for (long long i = 0; i < width; ++i) {
            const T v = row[i] + b;
            row[i] = (v > T(0) || v != v) ? v : T(0);
        }
    }
}

// The forward, a sample at a time: W @ cols_n (as numpy.matmul(w_mat, cols_n)), then, with a bias (`g`),
// relu(out + bias) in place.
template <typename T>
__global__ void conv_forward_pieces(const ConvPieces *pp) {
    const ConvPieces &p = *pp;
    const Samples at = samples_of(p);
    const T *w = static_cast<const T *>(p.w), *cols = static_cast<const T *>(p.cols);
    const T *bias = static_cast<const T *>(p.g);
    for (long long s = at.first; s < at.end; ++s) {
        T *out = static_cast<T *>(p.out) + s * p.c_out * p.l;
        product<T>(p, kNoTrans, kNoTrans, p.c_out, p.l, p.kg, w, p.kg, cols + s * p.kg * p.l, p.l, out, p.l);
        if (bias) bias_relu_rows(out, bias, p.c_out, p.l);
    }
}

// The input gradient, a sample at a time: its column gradient W^T @ g_n (as
// numpy.matmul(w_mat.transpose(0, 2, 1), g_n)) into this thread's scratch, then col2im of its planes.
template <typename T>
__global__ void conv_input_grad_pieces(const ConvPieces *pp) {
    const ConvPieces &p = *pp;
    const long long *v = p.geometry;
    const Geometry geo(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13], v[14],
                       v[15], v[16], v[17], v[18], v[19], v[20], v[21], v[22], v[23]);
    const Samples at = samples_of(p);
    const T *w = static_cast<const T *>(p.w), *g = static_cast<const T *>(p.g);
    T *dcols = thread_scratch<T>(p.kg * p.l);
    for (long long s = at.first; s < at.end; ++s) {
        product<T>(p, kTrans, kNoTrans, p.kg, p.l, p.c_out, w, p.kg, g + s * p.c_out * p.l, p.l, dcols, p.l);
        T *image = static_cast<T *>(p.out) + s * geo.c * geo.plane_size();  // sample s's planes
        for (long long plane = 0; plane < geo.c; ++plane) col2im_plane<T>(dcols, image, geo, plane);
    }
}

// The weight gradient's pieces (block b: samples b*piece ...): each sample's product cols_n @ g_n^T (as
// numpy.matmul(cols_n, g_n.T)), summed in sample order (as numpy.sum over the samples: the first product
// itself, then one addition each) into out[b].
template <typename T>
__global__ void conv_weight_grad_pieces(const ConvPieces *pp) {
    const ConvPieces &p = *pp;
    const Samples at = samples_of(p);
    const T *cols = static_cast<const T *>(p.cols), *g = static_cast<const T *>(p.g);
    const long long size = p.kg * p.c_out;
    T *product_n = thread_scratch<T>(size);
    T *sum = static_cast<T *>(p.out) + (long long)blockIdx.x * size;
    for (long long s = at.first; s < at.end; ++s) {
        T *into = s == at.first ? sum : product_n;
        product<T>(p, kNoTrans, kTrans, p.kg, p.c_out, p.l, cols + s * p.kg * p.l, p.l, g + s * p.c_out * p.l, p.l,
                   into, p.c_out);
        if (s != at.first)
            for (long long i = 0; i < size; ++i) sum[i] = sum[i] + product_n[i];
    }
}

template <typename T>
int conv_pieces(void (*kernel)(const ConvPieces *), const char *name, const ConvPieces *p, long long threads,
                char *err, size_t err_len) {
    const long long blocks = (p->n + p->piece - 1) / p->piece;
    const unsigned grid[3] = {(unsigned)blocks, 1u, 1u}, block[3] = {1u, 1u, 1u};
    void *args[] = {&p};
    return ::hostcuda::launch(kernel, name, args, grid, block, 0, (unsigned long long)threads, err, err_len);
}

}  // namespace

// The entry points _conv_native.py finds by name:
// mxlite_conv_{forward,input_grad,weight_grad}_{float,double}(pieces, threads, err, err_len).
#define CONV_PIECES_ENTRY(WHAT, T)                                                                           \
    extern "C" __attribute__((visibility("default"))) int mxlite_conv_##WHAT##_##T(                         \
        const ConvPieces *p, long long threads, char *err, size_t err_len) {                                \
        return conv_pieces<T>(&conv_##WHAT##_pieces<T>, "conv_" #WHAT "_pieces", p, threads, err, err_len); \
    }
CONV_PIECES_ENTRY(forward, float)
CONV_PIECES_ENTRY(forward, double)
CONV_PIECES_ENTRY(input_grad, float)
CONV_PIECES_ENTRY(input_grad, double)
CONV_PIECES_ENTRY(weight_grad, float)
CONV_PIECES_ENTRY(weight_grad, double)
#endif  // HOSTCUDA_SERIAL

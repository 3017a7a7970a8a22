// IEEE-exact building blocks shared by kernels that must give their NumPy twins' bits: storage and
// math types, exp from + - * / and bit moves, log of a value >= 1 likewise, and compile-time flags.
// Included by rnn.cu and softmax_ce.cu (the loader, mxlite/device/kernels.py, pastes it in place of
// the #include line for NVRTC and the host build; nvcc finds it beside the including file). The NumPy
// twins are mxlite/ops/rnn_ops.py (_exp_parts) and mxlite/ops/_loss_kernels.py (_log_ge1).
//
// exp. expf/tanhf/logf differ between glibc, CUDA's libdevice and NumPy's SIMD loops by an ulp here and
// there, so no twin could match all of them. These are built from + - * /, comparisons and bit moves
// only, which IEEE fixes exactly: the host build, the emulated GPUs, a real GPU (NVRTC's --fmad=false)
// and the NumPy twin all give the same bits. exp(y) for y <= 0 is 2^k * (1 + q): k = rint(y / ln 2) by
// the 1.5*2^m "magic number" rounding, r = y - k ln 2 with ln 2 split in two (Cody and Waite, fdlibm's
// split for double; k*LN2_HI is exact), q = r * Q(r) with Q the Taylor polynomial of (e^r - 1)/r to
// 1/8! (float) or 1/14! (double), whose truncation error is below 2^-26 (2^-55) relative to q for
// |r| <= ln(2)/2, and 2^k made from its exponent bits. The argument is clamped at -87.3 (float) /
// -708.3 (double), where 2^k is still a normal number: exp of anything below returns about 1.2e-38
// (2.4e-308) rather than a smaller number. NaN stays NaN (the clamp is a comparison and select).
// Polynomial coefficients are 1/n! rounded to double (exact n!, one correctly rounded division, as
// Python's 1 / math.factorial(n)), then to float for float math.
//
// log(s) for s >= 1 (log_ge1): s = 2^k * f with f in [sqrt(1/2), sqrt(2)) from the exponent bits,
// u = (f - 1) / (f + 1) (f - 1 exact), log f = 2 atanh(u) = 2u (1 + u^2/3 + u^4/5 + ...) to u^8/9
// (float) or u^20/21 (double): the first term left out is below 2^-28 (2^-57) relative for
// |u| <= 0.1716; then k ln 2 + log f with ln 2 split as for exp (k * LN2_HI exact). +inf and NaN are
// returned as they are. Within 2 ulp of the exact value (tests/test_softmax_ce.py sweeps it).
//
// Arithmetic: float32 math for float and __half (stored as half, rounded to nearest even, as NumPy's
// astype), double for double; no contraction (--fmad=false; the host build uses -ffp-contract=off),
// so a*b + c rounds twice as in NumPy. CuPy builds with -ftz=true: subnormal inputs flush to zero on a
// GPU and not in the twins.

#ifndef MXLITE_IEEE_MATH_CUH
#define MXLITE_IEEE_MATH_CUH

#include <cuda_fp16.h>

namespace {

// ---- storage and math types -----------------------------------------------------------------------
// Values in the precision of the twin's arithmetic: half goes through float (NumPy's float16 ufuncs
// compute in float32 and round), float and double stay themselves.
__device__ __forceinline__ float arith(__half x) { return __half2float(x); }
__device__ __forceinline__ float arith(float x) { return x; }
__device__ __forceinline__ double arith(double x) { return x; }

template <typename T> struct MathOf { using type = float; };
template <> struct MathOf<double> { using type = double; };
template <typename T> using Math = typename MathOf<T>::type;

template <typename T> __device__ __forceinline__ T store_as(Math<T> x);
template <> __device__ __forceinline__ float store_as<float>(float x) { return x; }
template <> __device__ __forceinline__ double store_as<double>(double x) { return x; }
template <> __device__ __forceinline__ __half store_as<__half>(float x) { return __float2half_rn(x); }

// ---- exp, sigmoid and tanh from IEEE arithmetic (see the header) -------------------------------------
// c0 + r*(c1 + r*(c2 + ...)): Horner's rule, innermost coefficient last.
template <typename A> __device__ __forceinline__ A horner(A, A c) { return c; }
template <typename A, typename... Rest> __device__ __forceinline__ A horner(A r, A c, Rest... rest) {
    return c + r * horner<A>(r, rest...);
}

template <typename A> struct Exp;
template <> struct Exp<float> {
    using Bits = unsigned int;
    static constexpr float kLowest = (float)-87.3;          // 2^k >= 2^-126, a normal number
    static constexpr float kLog2e = (float)1.4426950408889634;
    static constexpr float kLn2Hi = 0.693359375f;           // 9 significant bits: k * kLn2Hi is exact
    static constexpr float kLn2Lo = (float)(0.6931471805599453 - 0.693359375);
    static constexpr float kMagic = 12582912.0f;            // 1.5 * 2^23: adding it rounds to an integer
    static constexpr Bits kMagicBits = 0x4B400000u, kBias = 127u, kMantissa = 23u;
    __device__ static Bits bits(float x) { return __float_as_uint(x); }
    __device__ static float from_bits(Bits b) { return __uint_as_float(b); }
    // (e^r - 1) / r to 1/8!
    __device__ static float poly(float r) {
        return horner<float>(r, 1.0f, (float)(1.0 / 2), (float)(1.0 / 6), (float)(1.0 / 24), (float)(1.0 / 120),
                             (float)(1.0 / 720), (float)(1.0 / 5040), (float)(1.0 / 40320));
    }
};
template <> struct Exp<double> {
    using Bits = unsigned long long;
    static constexpr double kLowest = -708.3;               // 2^k >= 2^-1022
    static constexpr double kLog2e = 1.4426950408889634;
    static constexpr double kLn2Hi = 6.93147180369123816490e-01;  // fdlibm's split of ln 2
    static constexpr double kLn2Lo = 1.90821492927058770002e-10;
    static constexpr double kMagic = 6755399441055744.0;    // 1.5 * 2^52
    static constexpr Bits kMagicBits = 0x4338000000000000ull, kBias = 1023ull, kMantissa = 52ull;
    __device__ static Bits bits(double x) { return (Bits)__double_as_longlong(x); }
    __device__ static double from_bits(Bits b) { return __longlong_as_double((long long)b); }
    // (e^r - 1) / r to 1/14!
    __device__ static double poly(double r) {
        return horner<double>(r, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320,
                              1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0,
                              1.0 / 87178291200.0);
    }
};

// exp(y) = s * (1 + q) for y <= 0 (clamped at Exp<A>::kLowest), s = 2^k.
template <typename A> struct ExpParts {
    A s, q;
};

template <typename A> __device__ __forceinline__ ExpParts<A> exp_parts(A y) {
    using E = Exp<A>;
    y = y < E::kLowest ? E::kLowest : y;  // NaN stays NaN
    const A j = y * E::kLog2e + E::kMagic;  // k in the low bits of the mantissa
    const A kf = j - E::kMagic;
    const A r = (y - kf * E::kLn2Hi) - kf * E::kLn2Lo;
    const A q = r * E::poly(r);
    const typename E::Bits k = E::bits(j) - E::kMagicBits;  // two's complement k, modulo 2^32 (2^64)
    return ExpParts<A>{E::from_bits((k + E::kBias) << E::kMantissa), q};
}

// ---- log of a value >= 1 from IEEE arithmetic (see the header) ----------------------------------------
template <typename A> struct Log;
template <> struct Log<float> {
    static constexpr float kSqrt2 = (float)1.4142135623730951;
    // (atanh(u) / u - 1) / u^2 = 1/3 + u^2/5 + ... to u^6/9
    __device__ static float poly(float u2) {
        return horner<float>(u2, (float)(1.0 / 3), (float)(1.0 / 5), (float)(1.0 / 7), (float)(1.0 / 9));
    }
};
template <> struct Log<double> {
    static constexpr double kSqrt2 = 1.4142135623730951;
    // the same to u^18/21
    __device__ static double poly(double u2) {
        return horner<double>(u2, 1.0 / 3, 1.0 / 5, 1.0 / 7, 1.0 / 9, 1.0 / 11, 1.0 / 13, 1.0 / 15, 1.0 / 17,
                              1.0 / 19, 1.0 / 21);
    }
};

// log(s) for s >= 1; +inf and NaN come back unchanged.
template <typename A> __device__ __forceinline__ A log_ge1(A s) {
    using E = Exp<A>;
    using Bits = typename E::Bits;
    const Bits b = E::bits(s);
    const Bits mask = (Bits(1) << E::kMantissa) - Bits(1);
    A f = E::from_bits((b & mask) | (E::kBias << E::kMantissa));  // s's significand, in [1, 2)
    const bool big = f > Log<A>::kSqrt2;
    f = big ? f * A(0.5) : f;                                      // now in [sqrt(1/2), sqrt(2))
    const A kf = A((long long)(b >> E::kMantissa) - (long long)E::kBias + (big ? 1 : 0));
    const A u = (f - A(1)) / (f + A(1));
    const A t = (u * u) * Log<A>::poly(u * u);
    const A log_f = (u + u * t) * A(2);
    const A r = kf * E::kLn2Hi + (log_f + kf * E::kLn2Lo);
    return s - s == A(0) ? r : s;  // finite s: r; inf - inf and NaN are NaN
}

__device__ __forceinline__ float magnitude(float x) { return fabsf(x); }
__device__ __forceinline__ double magnitude(double x) { return fabs(x); }
__device__ __forceinline__ float with_sign(float x, float sign) { return copysignf(x, sign); }
__device__ __forceinline__ double with_sign(double x, double sign) { return copysign(x, sign); }

template <bool B> struct Flag {
    static constexpr bool value = B;
};

// Calls f(Flag<b>()): a runtime flag becomes a compile-time constant, tested once per launch (a flag
// tested inside the element loop stops g++ from vectorising it).
template <typename F> __device__ __forceinline__ void with_flag(bool b, F f) {
    if (b) f(Flag<true>());
    else f(Flag<false>());
}

template <typename F> __device__ __forceinline__ void with_flags(bool a, bool b, F f) {
    with_flag(a, [&](auto x) { with_flag(b, [&](auto y) { f(x, y); }); });
}

template <typename F> __device__ __forceinline__ void with_flags(bool a, bool b, bool c, F f) {
    with_flag(a, [&](auto x) { with_flag(b, [&](auto y) { with_flag(c, [&](auto z) { f(x, y, z); }); }); });
}

}  // namespace

#endif  // MXLITE_IEEE_MATH_CUH

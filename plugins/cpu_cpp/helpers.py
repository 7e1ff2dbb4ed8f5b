"""C++ helpers the rendered kernels call, with torch's semantics.

:data:`RENDER_PRELUDE` follows the toolchain's ``PRELUDE`` (which has the
includes, the libmvec declarations and the bf16/fp16 conversions) in every
translation unit of the cpu_cpp plugin: Python-style floordiv/remainder,
NaN-propagating max/min, torch's shifts and integer pow, index clamping and the
per-thread chunking of split reductions (:func:`sdk.clike.loop_helpers`, shared with C
targets), and Philox4x32-10 ``rand``/``randn``
bit-exact with ``triton.language.random`` (``tl.rand``; ``tl.randn`` up to the
last bits of its log/cos).
"""

import sdk.clike

RENDER_PRELUDE = (
    r"""
// ---- cpu_cpp renderer helpers: torch semantics ----
#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

// NaN-propagating (torch.maximum / torch.minimum); of equal values the first, as eager's
// scalar loop (std::max): relu(-0.0) = max(-0.0, 0) and clamp(-0.0, 0.0) keep -0.0
template <typename T> static inline T sdk_max(T a, T b) { return (a != a) ? a : (b > a || b != b) ? b : a; }
template <typename T> static inline T sdk_min(T a, T b) { return (a != a) ? a : (b < a || b != b) ? b : a; }

// A float converted to int32 / int64 as eager converts it on this CPU, where C leaves it
// undefined (out of range, NaN, inf), made defined so that no optimization changes it:
// x86-64's cvttss2si gives the "integer indefinite" INT_MIN, AArch64's fcvtzs saturates
// (NaN: 0). Narrower integers convert through these (see ops.py, cast).
#if defined(__x86_64__) || defined(__i386__)
template <typename F> static inline int32_t sdk_f2i32(F x) {
  return (x >= F(-2147483648.0) && x < F(2147483648.0)) ? int32_t(x) : INT32_MIN;
}
template <typename F> static inline int64_t sdk_f2i64(F x) {
  return (x >= F(-9223372036854775808.0) && x < F(9223372036854775808.0)) ? int64_t(x) : INT64_MIN;
}
#elif defined(__aarch64__)
template <typename F> static inline int32_t sdk_f2i32(F x) {
  return x != x ? 0 : x >= F(2147483648.0) ? INT32_MAX : x <= F(-2147483648.0) ? INT32_MIN : int32_t(x);
}
template <typename F> static inline int64_t sdk_f2i64(F x) {
  return x != x ? 0 : x >= F(9223372036854775808.0) ? INT64_MAX
       : x <= F(-9223372036854775808.0) ? INT64_MIN : int64_t(x);
}
#else
template <typename F> static inline int32_t sdk_f2i32(F x) { return int32_t(x); }
template <typename F> static inline int64_t sdk_f2i64(F x) { return int64_t(x); }
#endif

// Python floor division (c10 div_floor_*); integer division by zero gives 0
// (torch raises), never SIGFPE.
template <typename T> static inline T sdk_floordiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
    if (div == 0) return std::copysign(T(0), a / b);
    T fl = std::floor(div);
    if (div - fl > T(0.5)) fl += T(1);
    return fl;
  } else if constexpr (std::is_signed_v<T>) {
    if (b == 0) return T(0);
    if (b == -1) return T(std::make_unsigned_t<T>(0) - std::make_unsigned_t<T>(a));
    T q = T(a / b), r = T(a % b);
    return (r != 0 && ((r < 0) != (b < 0))) ? T(q - 1) : q;
  } else {
    return b == 0 ? T(0) : T(a / b);
  }
}

// Python remainder: the sign of b (torch.remainder)
template <typename T> static inline T sdk_remainder(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T mod = std::fmod(a, b);
    if (mod != 0 && ((b < 0) != (mod < 0))) mod += b;
    return mod;
  } else if constexpr (std::is_signed_v<T>) {
    if (b == 0 || b == -1) return T(0);
    T r = T(a % b);
    if (r != 0 && ((r < 0) != (b < 0))) r = T(r + b);
    return r;
  } else {
    return b == 0 ? T(0) : T(a % b);
  }
}

// C remainder on integers: the sign of a (torch.fmod)
template <typename T> static inline T sdk_fmod(T a, T b) {
  if constexpr (std::is_signed_v<T>) { if (b == -1) return T(0); }
  return b == 0 ? T(0) : T(a % b);
}

// integer power by squaring, wrapping; negative exponents as torch
template <typename T> static inline T sdk_ipow(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a || !b;
  } else {
    if constexpr (std::is_signed_v<T>) {
      if (b < 0) return a == 1 ? T(1) : a == -1 ? T((b & 1) ? -1 : 1) : T(0);
    }
    using U = std::make_unsigned_t<T>;
    U r = 1, x = U(a);
    for (U e = U(b); e; e >>= 1) { if (e & 1) r = U(r * x); x = U(x * x); }
    return T(r);
  }
}

// shifts: out-of-range amounts give 0 (left) or the sign (right), as torch
template <typename T> static inline T sdk_shl(T a, T b) {
  if (b < 0 || b >= T(sizeof(T) * 8)) return T(0);
  return T(std::make_unsigned_t<T>(a) << b);
}
template <typename T> static inline T sdk_shr(T a, T b) {
  if (b < 0 || b >= T(sizeof(T) * 8)) return a < 0 ? T(-1) : T(0);
  return T(a >> b);
}

"""
    + sdk.clike.loop_helpers(sdk.clike.CXX)
    + r"""
// Philox4x32-10, bit-exact with triton.language.random (tl.rand / tl.randn)
static inline uint32_t sdk_umulhi(uint32_t a, uint32_t b) {
  return uint32_t((uint64_t(a) * uint64_t(b)) >> 32);
}
static inline void sdk_philox(int64_t seed, int64_t offset, uint32_t& r0, uint32_t& r1) {
  uint32_t c0 = uint32_t(offset), c1 = uint32_t(uint64_t(offset) >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(uint64_t(seed) >> 32);
  #pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    uint32_t a0 = c0, a2 = c2;
    c0 = sdk_umulhi(0xCD9E8D57u, a2) ^ c1 ^ k0;
    c2 = sdk_umulhi(0xD2511F53u, a0) ^ c3 ^ k1;
    c1 = 0xCD9E8D57u * a2;
    c3 = 0xD2511F53u * a0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  r0 = c0;
  r1 = c1;
}
static inline float sdk_uint_to_uniform(uint32_t x) {
  int32_t i = int32_t(x);
  i = i < 0 ? ~i : i;
  return float(i) * 4.6566127342e-10f;
}
static inline float sdk_rand(int64_t seed, int64_t offset) {
  uint32_t r0, r1;
  sdk_philox(seed, offset, r0, r1);
  return sdk_uint_to_uniform(r0);
}
static inline float sdk_randn(int64_t seed, int64_t offset) {
  uint32_t r0, r1;
  sdk_philox(seed, offset, r0, r1);
  float u1 = sdk_uint_to_uniform(r0), u2 = sdk_uint_to_uniform(r1);
  u1 = u1 > 1.0e-7f ? u1 : 1.0e-7f;
  float th = 6.283185307179586f * u2;
  float r = sqrtf(-2.0f * logf(u1));
  return r * cosf(th);
}
// ---- end of renderer helpers ----
"""
)

#: The exported function of a translation unit with index checks (see
#: :data:`sdk.clike.TAKE_INDEX_ERROR`; :func:`sdk.clike.launchers` calls it).
TAKE_INDEX_ERROR = sdk.clike.TAKE_INDEX_ERROR

#: Follows :data:`RENDER_PRELUDE` in a translation unit where some kernel checks
#: its indirect indices (see :mod:`sdk.clike.emit`, "Index checks"): the SDK's one source,
#: spelt in C++ (``thread_local``, ``extern "C"``).
INDEX_CHECK_PRELUDE = sdk.clike.index_checks(sdk.clike.CXX)

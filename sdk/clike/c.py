"""What every C-like target shares: its types, the bf16/fp16 conversions, how C and C++ spell
the emitter's few structural pieces (:class:`Spelling`: :data:`C`, :data:`CXX`), the form of a
reduction table's entries (:class:`Reducer`), and the helpers the emitter's kernels call (index
clamping, per-thread chunks, index checks), written once and spelt per language
(:func:`loop_helpers`, :func:`index_checks`: C's ``_Thread_local`` or C++'s ``thread_local``,
an exported function with or without ``extern "C"``).

The bottom of :mod:`sdk.clike`: the emitter (:mod:`sdk.clike.expressions`,
:mod:`sdk.clike.emit`) and :class:`sdk.clike.CTarget` (:mod:`sdk.clike.target`) are built on
it, and it imports neither."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

#: The exported function of a translation unit with index checks:
#: ``int64_t sdk_take_index_error(int64_t* out)`` copies the calling thread's recorded
#: (index, extent) to ``out[0:2]``, clears the slot and returns its flag.
TAKE_INDEX_ERROR = "sdk_take_index_error"

#: Exact bf16 <-> float conversions (round to nearest even, NaN kept quiet) and a bf16 rounding
#: for values the IR computes in bf16: C that C++ compiles too.
BF16_HELPERS = r"""static inline float sdk_bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16; float f; __builtin_memcpy(&f, &u, 4); return f; }
static inline uint16_t sdk_float_to_bf16(float f) {
  uint32_t u; __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }
static inline float sdk_round_bf16(float f) { return sdk_bf16_to_float(sdk_float_to_bf16(f)); }
"""

#: :data:`BF16_HELPERS` and the exact fp16 <-> float conversions, for types stored as their
#: bits (:data:`C_HALF`): C that C++ compiles too.
HALF_HELPERS = (
    """\
static inline uint32_t sdk_f2u(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
static inline float sdk_u2f(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }

"""
    + BF16_HELPERS
    + """
static inline float sdk_fp16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, a = h & 0x7fffu;
  uint32_t bits = a >= 0x7c00u ? 0x7f800000u | (a << 13)   // inf, NaN
                : a >= 0x0400u ? (a << 13) + 0x38000000u   // normal: rebias 15 -> 127
                : sdk_f2u((float)a * 0x1p-24f);            // subnormal, zero: exact
  return sdk_u2f(sign | bits);
}

// Round to nearest even; NaN stays a quiet NaN with its sign.
static inline uint16_t sdk_float_to_fp16(float f) {
  uint32_t u = sdk_f2u(f), a = u & 0x7fffffffu;
  uint32_t bits = a > 0x7f800000u ? 0x7e00u | ((a >> 13) & 0x3ffu)                // NaN
                : a >= 0x477ff000u ? 0x7c00u                                      // to inf
                : a >= 0x38800000u ? (a - 0x38000000u + 0xfffu + ((a >> 13) & 1u)) >> 13
                : sdk_f2u(sdk_u2f(a) + 0.5f) - 0x3f000000u;  // subnormal: the FPU rounds
  return (uint16_t)(((u >> 16) & 0x8000u) | bits);
}
"""
)

#: C types of storage; bf16 and fp16 are stored as their bits (:data:`C_HALF`).
C_TYPES: dict[torch.dtype, str] = {
    torch.float32: "float", torch.float64: "double", torch.bfloat16: "uint16_t",
    torch.float16: "uint16_t", torch.int64: "int64_t", torch.int32: "int32_t",
    torch.int16: "int16_t", torch.int8: "int8_t", torch.uint8: "uint8_t", torch.bool: "bool",
}  # fmt: skip

#: Types stored as bits and computed in float: (to float, from float), over ``{x}``.
C_HALF: dict[torch.dtype, tuple[str, str]] = {
    torch.bfloat16: ("sdk_bf16_to_float({x})", "sdk_float_to_bf16({x})"),
    torch.float16: ("sdk_fp16_to_float({x})", "sdk_float_to_fp16({x})"),
}


@dataclass(frozen=True)
class Spelling:
    """The structural pieces the emitter writes, as format strings: they differ between C
    and C++ (:data:`C`, :data:`CXX`)."""

    head: str  # the kernel's signature: {ret} {name}({params})
    convert: str  # a value converted to type {T}: {x}
    ctor: str  # an integer made of type {T}: {x}
    umax: str  # the larger of two uint64_t {a}, {b}
    imin: str  # the smaller of two int64_t {a}, {b}
    partials: str  # declares array {name} of {n} elements of type {T}, shared by the threads
    chunk: str  # sets int64_t lo, hi to this thread's (tid of nth) chunk of {n} elements
    # the prelude's (sdk.clike.loop_helpers, sdk.clike.index_checks); defaults: C's
    thread_local: str = "_Thread_local"  # the storage class of a per-thread variable
    out_param: str = "int64_t* {name}"  # declares an int64_t out-parameter {name}
    out: str = "*{name}"  # the int64_t out-parameter {name}, written


#: C++: ``extern "C"`` kernels, ``static_cast``, the standard library.
CXX = Spelling(
    head='extern "C" {ret} {name}({params})',
    convert="static_cast<{T}>({x})",
    ctor="{T}({x})",
    umax="std::max<uint64_t>({a}, {b})",
    imin="std::min<int64_t>({a}, {b})",
    partials="std::vector<{T}> {name}({n});",
    chunk="sdk_chunk({n}, tid, nth, lo, hi);",
    thread_local="thread_local",
    out_param="int64_t& {name}",
    out="{name}",
)

#: C (C11): casts, the helpers of :data:`sdk.clike.C_PRELUDE`, partials on the stack.
C = Spelling(
    head="{ret} {name}({params})",
    convert="(({T})({x}))",
    ctor="(({T})({x}))",
    umax="sdk_umax({a}, {b})",
    imin="sdk_imin({a}, {b})",
    partials="{T} {name}[{n}];",
    chunk="sdk_chunk({n}, tid, nth, &lo, &hi);",
)


@dataclass(frozen=True)
class Reducer:
    """How one reduction accumulates, as C statements over ``{acc}`` (the accumulator),
    ``{v}`` (the value), ``{p}`` (another thread's partial), ``{T}`` (the accumulator's C
    type), ``{idx}`` and ``{pos}`` (the position, for ``arg`` reductions).

    ``init``: the accumulator's first value: one C value, a pair (floating, integer), or a
    function of the accumulator's dtype. ``update``: one step in the inner loop; for ``arg``
    reductions it also sets ``{idx} = {pos}`` and folds partials too. ``omp``: the OpenMP
    ``simd`` reduction identifier (``+``, ``max``, ...); None runs the inner loop scalar.
    ``combine``: folds a partial into ``{acc}``; None: rows are never split across threads.
    ``nan_flag``: floats keep a separate NaN flag, so ``max``/``min`` vectorize and still
    propagate NaN. ``arg``: the result is the position (argmax, argmin)."""

    init: str | tuple[str, str] | Callable[[torch.dtype], str]
    update: str
    omp: str | None = None
    combine: str | None = None
    nan_flag: bool = False
    arg: bool = False

    def initial(self, dtype: torch.dtype) -> str:
        """The accumulator's first value for an accumulator of ``dtype``."""
        if callable(self.init):
            return self.init(dtype)
        if isinstance(self.init, tuple):
            return self.init[0 if dtype.is_floating_point else 1]
        return self.init


#: The helpers the emitter's loops call: index clamping and per-thread chunks. Format fields:
#: ``{lo_param}``/``{hi_param}`` declare ``sdk_chunk``'s int64_t out-parameters, ``{lo}``/``{hi}``
#: write them (:func:`loop_helpers` fills them in from a :class:`~sdk.clike.Spelling`).
_LOOP_HELPERS = """\
static inline int64_t sdk_clamp_index(int64_t i, int64_t hi) {{ return i < 0 ? 0 : i > hi ? hi : i; }}
static inline int64_t sdk_imin(int64_t a, int64_t b) {{ return a < b ? a : b; }}

// [lo, hi) of n elements for thread tid of nth, in multiples of 16
static inline void sdk_chunk(int64_t n, int tid, int nth, {lo_param}, {hi_param}) {{
  int64_t c = ((n + nth - 1) / nth + 15) / 16 * 16;
  {lo} = sdk_imin(n, c * tid);
  {hi} = sdk_imin(n, {lo} + c);
}}
"""

#: The index checks: an index outside its extent is read clamped and reported to the calling
#: thread's slot, which :data:`TAKE_INDEX_ERROR` reads (see :mod:`sdk.clike.emit`, "Index
#: checks"). Format fields: ``{thread_local}`` and ``{take}``, the exported function's head.
_INDEX_CHECKS = r"""
// ---- index checks: an out-of-range indirect index is read clamped and reported ----
// The calling thread's slot: flag, index, extent. A checking kernel takes its
// address on entry (its OpenMP workers write through that pointer), clears it,
// and returns the flag; the first writer wins.
static {thread_local} int64_t sdk_index_error_slot[3];

static inline int64_t* sdk_index_errors(void) {{
  int64_t* err = sdk_index_error_slot;
  err[0] = 0;
  return err;
}}

static inline uint64_t sdk_umax(uint64_t a, uint64_t b) {{ return a > b ? a : b; }}

// wrap: the bind expression added the extent to a negative index; report the
// index as written (v - n), as torch does.
__attribute__((noinline, cold)) static void sdk_index_error(int64_t* err, int64_t v, int64_t n, int wrap) {{
  if (wrap && v < 0) v -= n;
  int64_t unset = 0;
  if (__atomic_compare_exchange_n(&err[0], &unset, (int64_t)1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {{
    err[1] = v;
    err[2] = n;
  }}
}}

// i if it lies in [0, n); else records the error and returns i clamped into it
static inline int64_t sdk_checked_index(int64_t* err, int64_t i, int64_t n, int wrap) {{
  if (__builtin_expect((uint64_t)i >= (uint64_t)n, 0)) {{
    sdk_index_error(err, i, n, wrap);
    return i < 0 ? 0 : n - 1;
  }}
  return i;
}}

{take} {{
  int64_t* err = sdk_index_error_slot;
  const int64_t flag = err[0];
  out[0] = err[1];
  out[1] = err[2];
  err[0] = 0;
  return flag;
}}
// ---- end of index checks ----
"""


def loop_helpers(spelling: Spelling) -> str:
    """``sdk_clamp_index``, ``sdk_imin`` and ``sdk_chunk`` in ``spelling``'s language: one
    source for C and C++, so the two cannot drift apart."""
    return _LOOP_HELPERS.format(
        lo_param=spelling.out_param.format(name="lo"),
        lo=spelling.out.format(name="lo"),
        hi_param=spelling.out_param.format(name="hi"),
        hi=spelling.out.format(name="hi"),
    )


def index_checks(spelling: Spelling) -> str:
    """The index-check helpers in ``spelling``'s language (its ``thread_local``; the exported
    :data:`TAKE_INDEX_ERROR` spelt by its ``head``): one source for C and C++."""
    take = spelling.head.format(ret="int64_t", name=TAKE_INDEX_ERROR, params="int64_t* out")
    return _INDEX_CHECKS.format(thread_local=spelling.thread_local, take=take)

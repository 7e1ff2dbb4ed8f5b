"""The C++ cpu_cpp writes for each IR op and reduction: data, not code.

In the shape of tinygrad's ``cstyle`` renderer, the tables of cpu_cpp's
:class:`sdk.clike.CTarget` (``render.TARGET``):

* :data:`TYPE_MAP`: torch dtype -> C type. bf16 and fp16 values are kept as
  their raw bits (``uint16_t``); an op that computes on one converts it to
  float with the toolchain prelude's helpers (:data:`HALF`) and rounds back
  (nearest even).
* :data:`CODE_FOR_OP`: IR op name -> small function returning a C++
  expression, called as ``fn(*operands, dtype=..., src=...)``: ``dtype`` is the
  type the result is computed in (bf16/fp16 -> float32), ``src`` the operands'
  (the same, except for predicates and ``cast``). The emitter has already
  converted the operands of arithmetic ops to ``dtype``, with ``cast``.
* :data:`REDUCERS`: reduction op -> accumulator init, update, OpenMP clause and
  combine step (:class:`sdk.clike.Reducer`).

A C++-like target that differs in a few ops copies these tables and overrides
those entries (``{**CODE_FOR_OP, "erf": ...}``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

import sdk
import sdk.clike
import sdk.ir
from sdk.clike import Reducer, truth

F32, F64, BOOL, I64 = torch.float32, torch.float64, torch.bool, torch.int64

#: :data:`sdk.clike.C_TYPES` (bf16 and fp16 kept as their raw bits, converted by the
#: prelude's exact helpers, :data:`HALF`), with the wide unsigned integers added.
TYPE_MAP: dict[torch.dtype, str] = {
    **sdk.clike.C_TYPES,
    torch.uint16: "uint16_t", torch.uint32: "uint32_t", torch.uint64: "uint64_t",
}  # fmt: skip

#: Half types: dtype -> (to float, from float) helpers of the toolchain prelude
#: (:data:`sdk.clike.HALF_HELPERS`).
HALF: dict[torch.dtype, tuple[str, str]] = dict(sdk.clike.C_HALF)


def ctype(dtype: torch.dtype) -> str:
    try:
        return TYPE_MAP[dtype]
    except KeyError:
        raise sdk.LoweringError(f"cpu_cpp: no C type for {dtype}") from None


# ----------------------------------------------------------------------------- op table


def _fn(name: str, dtype: torch.dtype) -> str:
    """libm name: ``expf`` for float32 (vectorized through libmvec), ``exp`` otherwise."""
    return name + "f" if dtype == F32 else name


def _one(dtype: torch.dtype) -> str:
    return "1.0f" if dtype == F32 else "1.0" if dtype == F64 else "1"


def _math(name: str) -> Callable[..., str]:
    return lambda *a, dtype, **_: f"{_fn(name, dtype)}({', '.join(a)})"


def _float_or(float_code: Callable[..., str], int_code: Callable[..., str]) -> Callable[..., str]:
    def code(*a: str, dtype: torch.dtype, src: torch.dtype) -> str:
        return (float_code if dtype.is_floating_point else int_code)(*a, dtype=dtype, src=src)

    return code


def _pred_float(code: Callable[[str], str], otherwise: str) -> Callable[..., str]:
    """A predicate on floats; ``otherwise`` is its value on integers."""
    return lambda x, src, **_: code(x) if src.is_floating_point else otherwise


def _signbit(a: str, src: torch.dtype) -> str:
    """The sign bit of ``a`` (a value of ``src``). A float is tested through its bits: GCC
    12.2 with ``-march=native`` stops with an internal compiler error vectorizing
    ``std::signbit`` of a float converted from bf16 bits (the graph then ran in ATen)."""
    if src == F32 or src in HALF:
        return f"((sdk_f2u({a}) >> 31) != 0u)"
    if src.is_floating_point:
        return f"std::signbit({a})"
    return f"{a} < 0" if src.is_signed else "false"


def _helper(name: str) -> Callable[..., str]:
    """A templated helper of :data:`RENDER_PRELUDE`, instantiated at the compute type."""
    return lambda *a, dtype, **_: f"{name}<{ctype(dtype)}>({', '.join(a)})"


#: The helpers of the prelude that convert a float as eager does on this CPU: C leaves a
#: value out of range (or NaN, inf) undefined, x86-64 gives INT_MIN (3e9 -> int32
#: -2147483648), AArch64 saturates (``plugins/cpu_cpp/helpers.py``).
FLOAT_TO_INT = {torch.int32: "sdk_f2i32", torch.int64: "sdk_f2i64"}


def cast(x: str, dtype: torch.dtype, src: torch.dtype) -> str:
    """``x`` converted from ``src`` to ``dtype`` as eager converts on this CPU, bit for bit
    (``tests/e2e/test_eager_edge_values.py``): a float to int32 or int64 through
    :data:`FLOAT_TO_INT`, to a narrower integer through ``sdk.ir.CAST_VIA``'s (3e9 -> int16
    0: x86-64's INT_MIN, truncated); unlike
    :meth:`sdk.clike.CTarget.cast` (a plain C conversion, undefined out of range), whose
    results ``tests/contract/test_clike_casts.py`` compares."""
    if dtype == src:
        return x
    if dtype == BOOL:
        return f"({x} != 0)"
    if src.is_floating_point and not dtype.is_floating_point:
        if dtype in FLOAT_TO_INT:
            return f"{FLOAT_TO_INT[dtype]}({x})"
        if dtype in sdk.ir.CAST_VIA:
            return f"static_cast<{ctype(dtype)}>({FLOAT_TO_INT[sdk.ir.CAST_VIA[dtype]]}({x}))"
        if dtype.itemsize < 8:  # uint32: wraps through int64
            return f"static_cast<{ctype(dtype)}>(static_cast<int64_t>({x}))"
    return f"static_cast<{ctype(dtype)}>({x})"


_UNARY_MATH = (
    "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "sin", "cos", "tan", "asin",
    "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf", "erfc",
)  # fmt: skip

CODE_FOR_OP: dict[str, Callable[..., str]] = {
    # arithmetic
    "add": lambda a, b, **_: f"{a} + {b}",
    "sub": lambda a, b, **_: f"{a} - {b}",
    "mul": lambda a, b, **_: f"{a} * {b}",
    "truediv": lambda a, b, **_: f"{a} / {b}",
    "floordiv": _helper("sdk_floordiv"),
    "remainder": _helper("sdk_remainder"),
    "fmod": _float_or(_math("fmod"), _helper("sdk_fmod")),
    "pow": _float_or(_math("pow"), _helper("sdk_ipow")),
    "atan2": _math("atan2"),
    "maximum": _helper("sdk_max"),
    "minimum": _helper("sdk_min"),
    "copysign": _math("copysign"),
    "fma": _math("fma"),
    "neg": lambda a, **_: f"-{a}",
    "abs": _float_or(
        _math("fabs"), lambda a, dtype, **_: f"({a} < 0 ? -{a} : {a})" if dtype.is_signed else a
    ),
    "reciprocal": lambda a, dtype, **_: f"{_one(dtype)} / {a}",
    "sign": lambda a, dtype, **_: f"static_cast<{ctype(dtype)}>((0 < {a}) - ({a} < 0))",
    # transcendental
    **{name: _math(name) for name in _UNARY_MATH},
    "rsqrt": lambda a, dtype, **_: f"{_one(dtype)} / {_fn('sqrt', dtype)}({a})",
    "sigmoid": lambda a, dtype, **_: f"{_one(dtype)} / ({_one(dtype)} + {_fn('exp', dtype)}(-{a}))",
    # rounding (identity on integers)
    "floor": _float_or(_math("floor"), lambda a, **_: a),
    "ceil": _float_or(_math("ceil"), lambda a, **_: a),
    "trunc": _float_or(_math("trunc"), lambda a, **_: a),
    "round": _float_or(_math("nearbyint"), lambda a, **_: a),  # nearest even
    # predicates and logic
    "eq": lambda a, b, **_: f"{a} == {b}",
    "ne": lambda a, b, **_: f"{a} != {b}",
    "lt": lambda a, b, **_: f"{a} < {b}",
    "le": lambda a, b, **_: f"{a} <= {b}",
    "gt": lambda a, b, **_: f"{a} > {b}",
    "ge": lambda a, b, **_: f"{a} >= {b}",
    "isnan": _pred_float(lambda a: f"{a} != {a}", "false"),
    "isinf": _pred_float(lambda a: f"std::isinf({a})", "false"),
    "signbit": lambda a, src, **_: _signbit(a, src),
    "logical_and": lambda a, b, src, **_: f"{truth(a, src)} & {truth(b, src)}",
    "logical_or": lambda a, b, src, **_: f"{truth(a, src)} | {truth(b, src)}",
    "logical_xor": lambda a, b, src, **_: f"{truth(a, src)} != {truth(b, src)}",
    "logical_not": lambda a, src, **_: f"!{truth(a, src)}",
    # integer bit ops
    "bitwise_and": lambda a, b, **_: f"{a} & {b}",
    "bitwise_or": lambda a, b, **_: f"{a} | {b}",
    "bitwise_xor": lambda a, b, **_: f"{a} ^ {b}",
    "bitwise_not": lambda a, dtype, **_: f"!{a}" if dtype == BOOL else f"~{a}",
    "lshift": _helper("sdk_shl"),
    "rshift": _helper("sdk_shr"),
    # selection and conversion
    "where": lambda c, a, b, **_: f"{c} ? {a} : {b}",
    "cast": lambda a, dtype, src: cast(a, dtype, src),
    # counter-based random numbers
    "rand": lambda seed, offset, **_: f"sdk_rand({seed}, {offset})",
    "randn": lambda seed, offset, **_: f"sdk_randn({seed}, {offset})",
}

# ----------------------------------------------------------------------------- reductions


def _lowest(dtype: torch.dtype) -> str:
    if dtype.is_floating_point:
        return "-INFINITY"
    return "false" if dtype == BOOL else f"std::numeric_limits<{ctype(dtype)}>::lowest()"


def _highest(dtype: torch.dtype) -> str:
    if dtype.is_floating_point:
        return "INFINITY"
    return "true" if dtype == BOOL else f"std::numeric_limits<{ctype(dtype)}>::max()"


REDUCERS: dict[str, Reducer] = {
    "sum": Reducer(lambda d: "0", "{acc} += {v};", "+", "{acc} += {p};"),
    "prod": Reducer(lambda d: "1", "{acc} *= {v};", "*", "{acc} *= {p};"),
    "max": Reducer(_lowest, "{acc} = {v} > {acc} ? {v} : {acc};", "max",
                   "{acc} = sdk_max<{T}>({acc}, {p});", nan_flag=True),
    "min": Reducer(_highest, "{acc} = {v} < {acc} ? {v} : {acc};", "min",
                   "{acc} = sdk_min<{T}>({acc}, {p});", nan_flag=True),
    "any": Reducer(lambda d: "0", "{acc} |= {v};", "|", "{acc} |= {p};"),
    "all": Reducer(lambda d: "1", "{acc} &= {v};", "&", "{acc} &= {p};"),
    # first occurrence; NaN counts as the maximum (and as the minimum), as in torch
    "argmax": Reducer(_lowest, "if ({v} > {acc} || ({v} != {v} && {acc} == {acc})) "
                      "{{ {acc} = {v}; {idx} = {pos}; }}", None, "", arg=True),
    "argmin": Reducer(_highest, "if ({v} < {acc} || ({v} != {v} && {acc} == {acc})) "
                      "{{ {acc} = {v}; {idx} = {pos}; }}", None, "", arg=True),
}  # fmt: skip

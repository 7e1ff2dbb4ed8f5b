"""What the Triton renderer emits for each IR dtype, op and reduction: data, not code.

* :data:`TYPE_MAP`: torch dtype -> Triton type.
* :data:`CODE_FOR_OP`: IR op -> ``fn(dtype, *operands) -> Triton expression``
  (float32 semantics); :data:`CODE_FOR_OP_F64` and :data:`CODE_FOR_OP_INT`
  override entries for float64 and integer/bool compute dtypes. ``dtype`` is
  the compute dtype: the node's for arithmetic, the operands' for predicates.
  Operands arrive already converted to it (and to bool for logical ops).
* :data:`REDUCE`: IR reduction -> identity, elementwise combine, final reduce.
* :data:`HELPERS`: ``@triton.jit`` helpers a kernel's source includes when it
  names them (NaN-propagating max, Python floor division, Philox RNG, ...).

Functions that Triton's ``tl`` lacks come from
``triton.language.extra.libdevice``; see :mod:`.interp` for how they run
under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

import sdk.ir

TYPE_MAP: dict[torch.dtype, str] = {
    torch.float32: "tl.float32",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64",
    torch.int8: "tl.int8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}
for _name in ("uint16", "uint32", "uint64"):
    if hasattr(torch, _name):
        TYPE_MAP[getattr(torch, _name)] = f"tl.{_name}"

HALF_TYPES = (torch.float16, torch.bfloat16)


def tl_type(dt: torch.dtype) -> str:
    return TYPE_MAP[dt]


def _sign_f(dt: torch.dtype, a: str) -> str:
    # torch.sign: NaN -> 0 (as cpu_cpp; the IR's OPS doc says NaN stays NaN)
    return f"(({a} > 0).to({tl_type(dt)}) - ({a} < 0).to({tl_type(dt)}))"


def _signbit_f(dt: torch.dtype, a: str) -> str:
    bits = {torch.float64: "tl.int64", torch.float32: "tl.int32"}.get(dt, "tl.int16")
    return f"({a}.to({bits}, bitcast=True) < 0)"


def _maximum_f(dt: torch.dtype, a: str, b: str) -> str:
    # NaN-propagating; of two zeros +0.0 (eager CUDA's fmax: relu(-0.0) is 0.0 there)
    return f"tl.where(({a} > {b}) | ({a} != {a}) | (({a} == {b}) & {_signbit_f(dt, b)}), {a}, {b})"


def _minimum_f(dt: torch.dtype, a: str, b: str) -> str:
    # NaN-propagating; of two zeros -0.0 (eager CUDA's fmin)
    return f"tl.where(({a} < {b}) | ({a} != {a}) | (({a} == {b}) & {_signbit_f(dt, a)}), {a}, {b})"


def cast_to(dt: torch.dtype, a: str, src: torch.dtype | None = None) -> str:
    """``a`` (of dtype ``src``, where known) converted to ``dt``; float downcasts round to
    nearest even (see :mod:`.interp` for the interpreter's float32 -> bfloat16), floats go
    to narrow integers through ``sdk.ir.CAST_VIA``'s wider one, as eager does: only values
    out of its range then depend on the device's conversion, which eager's shares (a GPU
    saturates, NaN -> 0; x86-64, the interpreter's numpy, gives INT_MIN). Straight to
    int8/int16/uint8 a GPU would saturate to the narrow range (-1.0 -> uint8 0, 40000.0 ->
    int16 32767) where eager wraps."""
    if dt == torch.bool:
        return f"({a} != 0)"
    via = sdk.ir.CAST_VIA.get(dt) if src is not None and src.is_floating_point else None
    if via is not None:
        return f"{a}.to({tl_type(via)}).to({tl_type(dt)})"
    return f"{a}.to({tl_type(dt)})"


def _libdevice(name: str) -> Callable[..., str]:
    return lambda dt, *a: f"libdevice.{name}({', '.join(a)})"


def _call(fn: str) -> Callable[..., str]:
    return lambda dt, *a: f"{fn}({', '.join(a)})"


def _binop(op: str) -> Callable[..., str]:
    return lambda dt, a, b: f"({a} {op} {b})"


OpCode = Callable[..., str]

#: IR op -> ``fn(dtype, *operands) -> Triton expression``. ``dtype`` is the
#: compute dtype: the node's for arithmetic, the operands' for predicates.
#: Floating point (float32) semantics; see the overriding tables below.
CODE_FOR_OP: dict[str, OpCode] = {
    "add": _binop("+"),
    "sub": _binop("-"),
    "mul": _binop("*"),
    "truediv": _binop("/"),
    "floordiv": _call("_floordiv_f"),
    "remainder": _call("_remainder"),
    "fmod": _binop("%"),  # Triton's % on floats and ints is C fmod / srem
    "pow": _libdevice("pow"),
    "atan2": _libdevice("atan2"),
    "maximum": _maximum_f,
    "minimum": _minimum_f,
    "copysign": _libdevice("copysign"),
    # tl.fma, not libdevice's: that one flushes subnormals to zero, eager's FMA does not
    "fma": _call("tl.fma"),
    "neg": lambda dt, a: f"(-{a})",
    "abs": _call("tl.abs"),
    "reciprocal": lambda dt, a: f"(1.0 / {a})",
    "sign": _sign_f,
    "exp": _call("tl.exp"),
    "exp2": _call("tl.exp2"),
    "expm1": _libdevice("expm1"),
    "log": _call("tl.log"),
    "log2": _call("tl.log2"),
    "log10": _libdevice("log10"),
    "log1p": _libdevice("log1p"),
    "sqrt": _call("tl.sqrt"),
    "rsqrt": _call("tl.rsqrt"),
    "sin": _call("tl.sin"),
    "cos": _call("tl.cos"),
    "tan": _libdevice("tan"),
    "asin": _libdevice("asin"),
    "acos": _libdevice("acos"),
    "atan": _libdevice("atan"),
    "sinh": _libdevice("sinh"),
    "cosh": _libdevice("cosh"),
    "tanh": _libdevice("tanh"),
    "asinh": _libdevice("asinh"),
    "acosh": _libdevice("acosh"),
    "atanh": _libdevice("atanh"),
    "erf": _call("tl.erf"),
    "erfc": _libdevice("erfc"),
    "sigmoid": lambda dt, a: f"(1.0 / (1.0 + tl.exp(-{a})))",
    "floor": _call("tl.floor"),
    "ceil": _call("tl.ceil"),
    "trunc": _libdevice("trunc"),
    "round": _libdevice("rint"),  # round half to even
    "eq": _binop("=="),
    "ne": _binop("!="),
    "lt": _binop("<"),
    "le": _binop("<="),
    "gt": _binop(">"),
    "ge": _binop(">="),
    "isnan": lambda dt, a: f"({a} != {a})",
    "isinf": lambda dt, a: f'(tl.abs({a}) == float("inf"))',
    "signbit": _signbit_f,
    # logical ops receive bool operands (the emitter converts)
    "logical_and": _binop("&"),
    "logical_or": _binop("|"),
    "logical_xor": _binop("^"),
    "logical_not": lambda dt, a: f"({a} == 0)",
    "where": lambda dt, c, a, b: f"tl.where({c}, {a}, {b})",
    "cast": cast_to,
    "rand": _call("_rand"),
    "randn": _call("_randn"),
}

#: float64: every transcendental through libdevice (tl.exp & co. are float32 paths).
CODE_FOR_OP_F64: dict[str, OpCode] = {
    **CODE_FOR_OP,
    **{
        name: _libdevice(name)
        for name in (
            "exp",
            "exp2",
            "log",
            "log2",
            "sqrt",
            "rsqrt",
            "sin",
            "cos",
            "erf",
            "floor",
            "ceil",
        )
    },
    "sigmoid": lambda dt, a: f"(1.0 / (1.0 + libdevice.exp(-{a})))",
}

#: Integer and bool operands.
CODE_FOR_OP_INT: dict[str, OpCode] = {
    **{
        k: v
        for k, v in CODE_FOR_OP.items()
        if k
        in (
            "add",
            "sub",
            "mul",
            "fmod",
            "neg",
            "abs",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "logical_and",
            "logical_or",
            "logical_xor",
            "logical_not",
            "where",
            "cast",
        )
    },
    "floordiv": _call("_floordiv_i"),
    "remainder": _call("_remainder"),
    "maximum": _call("tl.maximum"),
    "minimum": _call("tl.minimum"),
    # eager's integer power: wraps on overflow, a negative exponent gives 0 but for 1 and -1
    # (a power in float64 saturates, and gives inf, then an undefined cast, for 0 ** -1)
    "pow": lambda dt, a, b: f"_pow_i({a}, {b})" if dt != torch.bool else f"({a} | ({b} == 0))",
    "sign": lambda dt, a: f"(({a} > 0).to({tl_type(dt)}) - ({a} < 0).to({tl_type(dt)}))",
    "isnan": lambda dt, a: f"({a} != {a})",  # false, in the operand's shape
    "isinf": lambda dt, a: f"({a} != {a})",
    "signbit": lambda dt, a: f"({a} < 0)",
    "floor": lambda dt, a: a,
    "ceil": lambda dt, a: a,
    "trunc": lambda dt, a: a,
    "round": lambda dt, a: a,
    "bitwise_and": _binop("&"),
    "bitwise_or": _binop("|"),
    "bitwise_xor": _binop("^"),
    "bitwise_not": lambda dt, a: f"({a} == 0)" if dt == torch.bool else f"(~{a})",
    "lshift": _binop("<<"),
    "rshift": _binop(">>"),  # >> is arithmetic on signed ints
}

LOGICAL_OPS = ("logical_and", "logical_or", "logical_xor", "logical_not")


@dataclass(frozen=True)
class Reduce:
    """How one IR reduction is rendered: ``init`` is the identity (a function of
    the accumulator dtype), ``combine`` folds two accumulators elementwise,
    ``final`` reduces an ``[XBLOCK, R]`` accumulator along axis 1."""

    init: Callable[[torch.dtype], str]
    combine: Callable[[torch.dtype, str, str], str]
    final: Callable[[torch.dtype, str], str]


def lowest(dt: torch.dtype) -> str:
    return 'float("-inf")' if dt.is_floating_point else str(torch.iinfo(dt).min)


def highest(dt: torch.dtype) -> str:
    return 'float("inf")' if dt.is_floating_point else str(torch.iinfo(dt).max)


#: IR reduction -> rendering. argmax/argmin are handled with value/index pairs.
#: Final reductions go through ``tl.reduce`` with our own combine functions:
#: ``tl.sum``/``tl.max`` are ``@triton.jit`` library functions, which the
#: interpreter cannot run when Triton was imported before ``TRITON_INTERPRET``
#: was set; our helpers are decorated when the kernel module is imported.
REDUCE: dict[str, Reduce] = {
    "sum": Reduce(
        lambda dt: "0", lambda dt, a, b: f"{a} + {b}", lambda dt, a: f"tl.reduce({a}, 1, _sum)"
    ),
    "prod": Reduce(
        lambda dt: "1", lambda dt, a, b: f"{a} * {b}", lambda dt, a: f"tl.reduce({a}, 1, _prod)"
    ),
    "max": Reduce(
        lowest,
        lambda dt, a, b: f"_maximum({a}, {b})" if dt.is_floating_point else f"tl.maximum({a}, {b})",
        lambda dt, a: f"tl.reduce({a}, 1, _maximum)",
    ),
    "min": Reduce(
        highest,
        lambda dt, a, b: f"_minimum({a}, {b})" if dt.is_floating_point else f"tl.minimum({a}, {b})",
        lambda dt, a: f"tl.reduce({a}, 1, _minimum)",
    ),
    # any/all accumulate int32 0/1
    "any": Reduce(
        lambda dt: "0",
        lambda dt, a, b: f"tl.maximum({a}, {b})",
        lambda dt, a: f"tl.reduce({a}, 1, _maximum)",
    ),
    "all": Reduce(
        lambda dt: "1",
        lambda dt, a, b: f"tl.minimum({a}, {b})",
        lambda dt, a: f"tl.reduce({a}, 1, _minimum)",
    ),
}

#: Helper functions, included in a kernel's source when it names them.
HELPERS: dict[str, str] = {
    "_maximum": """
@triton.jit
def _maximum(a, b):
    # NaN-propagating max (torch.maximum, torch.max)
    return tl.where((a > b) | (a != a), a, b)
""",
    "_minimum": """
@triton.jit
def _minimum(a, b):
    return tl.where((a < b) | (a != a), a, b)
""",
    "_sum": """
@triton.jit
def _sum(a, b):
    return a + b
""",
    "_prod": """
@triton.jit
def _prod(a, b):
    return a * b
""",
    "_argmax_combine": """
@triton.jit
def _argmax_combine(a, ia, b, ib):
    # first occurrence of the maximum; NaN is the maximum
    a_nan = a != a
    b_nan = b != b
    take_a = (a > b) | ((a == b) & (ia < ib)) | (a_nan & ~b_nan) | (a_nan & b_nan & (ia < ib))
    return tl.where(take_a, a, b), tl.where(take_a, ia, ib)
""",
    "_argmin_combine": """
@triton.jit
def _argmin_combine(a, ia, b, ib):
    a_nan = a != a
    b_nan = b != b
    take_a = (a < b) | ((a == b) & (ia < ib)) | (a_nan & ~b_nan) | (a_nan & b_nan & (ia < ib))
    return tl.where(take_a, a, b), tl.where(take_a, ia, ib)
""",
    "_floordiv_f": """
@triton.jit
def _floordiv_f(a, b):
    # Python / torch floor division of floats (c10 div_floor_floating)
    mod = a % b
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)
    fl = tl.floor(div)
    fl = tl.where(div - fl > 0.5, fl + 1.0, fl)
    q = a / b
    fl = tl.where(div != 0, fl, libdevice.copysign(div * 0.0, q))
    return tl.where(b == 0, q, fl)
""",
    "_remainder": """
@triton.jit
def _remainder(a, b):
    # Python semantics on top of Triton's C-style %, for floats and integers alike
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
""",
    "_floordiv_i": """
@triton.jit
def _floordiv_i(a, b):
    q = a // b
    r = a % b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)
""",
    "_pow_i": """
@triton.jit
def _pow_i(a, b):
    # c10's powi: square and multiply in the operands' type (wrapping as eager's does), the
    # exponent's 63 bits in a loop; a negative exponent gives 1 for 1, -1 or 1 for -1, else 0
    e = b.to(tl.int64)
    x = a
    r = a * 0 + 1
    for _ in range(63):
        r = tl.where((e & 1) != 0, r * x, r)
        x = x * x
        e = e >> 1
    a64 = a.to(tl.int64)  # compared with -1 (an unsigned operand refuses that comparison)
    odd = (b & 1) != 0
    neg = tl.where(a64 == 1, 1, tl.where(a64 == -1, tl.where(odd, -1, 1), 0))
    return tl.where(b.to(tl.int64) < 0, neg.to(r.dtype), r)
""",
    "_philox": """
@triton.jit
def _philox(seed, offset):
    # Philox4x32-10 with key (seed lo, seed hi) and counter (offset lo, offset hi, 0, 0);
    # for offsets below 2**32 this is tl.randint4x(seed, offset)
    off = offset.to(tl.int64)
    s = seed.to(tl.int64)
    c0 = (off & 0xFFFFFFFF).to(tl.uint32)
    c1 = ((off >> 32) & 0xFFFFFFFF).to(tl.uint32)
    c2 = c0 * 0
    c3 = c0 * 0
    k0 = (s & 0xFFFFFFFF).to(tl.uint32) + c2
    k1 = ((s >> 32) & 0xFFFFFFFF).to(tl.uint32) + c2
    for _ in tl.static_range(10):
        a0 = c0
        a2 = c2
        c0 = tl.umulhi(0xCD9E8D57, a2) ^ c1 ^ k0
        c2 = tl.umulhi(0xD2511F53, a0) ^ c3 ^ k1
        c1 = a2 * 0xCD9E8D57
        c3 = a0 * 0xD2511F53
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    return c0, c1, c2, c3
""",
    "_uniform": """
@triton.jit
def _uniform(r):
    # uint32 -> float32 in [0, 1), as tl.rand
    x = r.to(tl.int32, bitcast=True)
    x = tl.where(x < 0, -x - 1, x)
    return x.to(tl.float32) * 4.6566127342e-10
""",
    "_rand": """
@triton.jit
def _rand(seed, offset):
    r0, r1, r2, r3 = _philox(seed, offset)
    return _uniform(r0)
""",
    "_randn": """
@triton.jit
def _randn(seed, offset):
    # Box-Muller on the first two Philox words, as tl.randn
    r0, r1, r2, r3 = _philox(seed, offset)
    u1 = tl.maximum(1.0e-7, _uniform(r0))
    u2 = _uniform(r1)
    return tl.sqrt(-2.0 * tl.log(u1)) * tl.cos(6.283185307179586 * u2)
""",
}
HELPER_DEPS = {"_rand": ("_philox", "_uniform"), "_randn": ("_philox", "_uniform")}

PRELUDE = """import triton
import triton.language as tl
from triton.language.extra import libdevice
"""


def unsupported_dtype(dt: torch.dtype) -> str | None:
    """Why the renderer cannot handle tensors of ``dt``, or None."""
    if dt.is_complex:
        return f"complex dtype {dt} is not supported by the Triton renderer"
    if dt not in TYPE_MAP:
        return f"dtype {dt} is not supported by the Triton renderer"
    return None

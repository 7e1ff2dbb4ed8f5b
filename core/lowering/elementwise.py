"""Lowerings of elementwise ops: math, comparisons, casts, fills, ranges, random numbers.

Each is one pointwise node (:func:`.helpers.elementwise` where it is a plain op)."""

from __future__ import annotations

from typing import Any

import sympy
import torch

from ..adapters.torch_private import aten, prims
from ..ir.expr import Const, Expr, IndexValue, Load, Op
from ..ir.graph import (
    Index,
    TensorValue,
    contiguous_strides,
)
from ..ir.kernel import Layout
from .helpers import bload, elementwise, out_dtype, promoted
from .layouts import shape_of
from .lowerer import Lowerer, cast, upcast
from .optable import Unsupported, register

_UNARY_FLOAT = {
    aten.exp: "exp",
    aten.exp2: "exp2",
    aten.expm1: "expm1",
    aten.log: "log",
    aten.log2: "log2",
    aten.log10: "log10",
    aten.log1p: "log1p",
    aten.sqrt: "sqrt",
    aten.rsqrt: "rsqrt",
    aten.sin: "sin",
    aten.cos: "cos",
    aten.tan: "tan",
    aten.asin: "asin",
    aten.acos: "acos",
    aten.atan: "atan",
    aten.sinh: "sinh",
    aten.cosh: "cosh",
    aten.tanh: "tanh",
    aten.asinh: "asinh",
    aten.acosh: "acosh",
    aten.atanh: "atanh",
    aten.erf: "erf",
    aten.erfc: "erfc",
    aten.sigmoid: "sigmoid",
    aten.reciprocal: "reciprocal",
}
_UNARY_SAME = {
    aten.neg: "neg",
    aten.abs: "abs",
    aten.floor: "floor",
    aten.ceil: "ceil",
    aten.trunc: "trunc",
    aten.round.default: "round",
    aten.sign: "sign",
    aten.bitwise_not: "bitwise_not",
}
_UNARY_PRED = {
    aten.isnan: "isnan",
    aten.isinf: "isinf",
    aten.signbit: "signbit",
    aten.logical_not: "logical_not",
}
_BINARY = {
    aten.mul: "mul",
    aten.maximum: "maximum",
    aten.minimum: "minimum",
    aten.atan2: "atan2",
    aten.bitwise_and: "bitwise_and",
    aten.bitwise_or: "bitwise_or",
    aten.bitwise_xor: "bitwise_xor",
    aten.copysign: "copysign",
    aten.bitwise_left_shift: "lshift",
    aten.bitwise_right_shift: "rshift",
    prims.mul: "mul",
}
_COMPARE = {
    aten.eq: "eq",
    aten.ne: "ne",
    aten.lt: "lt",
    aten.le: "le",
    aten.gt: "gt",
    aten.ge: "ge",
    aten.logical_and: "logical_and",
    aten.logical_or: "logical_or",
    aten.logical_xor: "logical_xor",
}


def _reg_unary(op: Any, name: str, kind: str) -> None:
    def lower(L: Lowerer, x: Any, *rest: Any, **kw: Any) -> Any:
        if kind == "pred":
            return elementwise(L, name, x, compute=upcast(x.dtype))
        if kind == "float":
            return elementwise(L, name, x)
        if name == "round" and (rest or kw.get("decimals")):
            raise Unsupported("round with decimals")
        return elementwise(L, name, x)

    register(op)(lower)


for _op, _name in _UNARY_FLOAT.items():
    _reg_unary(_op, _name, "float")
for _op, _name in _UNARY_SAME.items():
    _reg_unary(_op, _name, "same")
for _op, _name in _UNARY_PRED.items():
    _reg_unary(_op, _name, "pred")


def _reg_binary(op: Any, name: str) -> None:
    def lower(L: Lowerer, a: Any, b: Any, **kw: Any) -> Any:
        return elementwise(L, name, a, b)

    register(op)(lower)


for _op, _name in _BINARY.items():
    _reg_binary(_op, _name)


def _may_be_zero(b: Any) -> bool:
    """Whether divisor ``b`` can be 0 when the program runs: a tensor can, a scalar 0 is, a
    size can where sympy cannot tell it positive (a size symbol is)."""
    if isinstance(b, (bool, int, float)):
        return b == 0
    if isinstance(b, Const):
        return b.value == 0
    if isinstance(b, sympy.Expr):
        return not (b.is_positive or b.is_negative)
    return True


def _no_zero_divisor(L: Lowerer, what: str, b: Any) -> None:
    """Refuse an integer ``what`` whose divisor ``b`` may be 0: eager raises for it (on the
    CPU, ``RuntimeError: ZeroDivisionError``), and a kernel cannot; ATen then runs the op
    and answers as eager does on the device (raises, or a CUDA kernel's values)."""
    if not out_dtype(L).is_floating_point and _may_be_zero(b):
        raise Unsupported(
            f"integer {what} by "
            + ("a tensor, which may hold 0" if not isinstance(b, (bool, int, float)) else "0")
            + " (eager raises ZeroDivisionError; generated kernels cannot raise, so ATen "
            "runs it)"
        )


@register(aten.remainder)
def _remainder(L: Lowerer, a: Any, b: Any) -> Any:
    _no_zero_divisor(L, "remainder", b)
    return elementwise(L, "remainder", a, b)


@register(aten.fmod)
def _fmod(L: Lowerer, a: Any, b: Any) -> Any:
    _no_zero_divisor(L, "fmod", b)
    return elementwise(L, "fmod", a, b)


def _reg_compare(op: Any, name: str) -> None:
    def lower(L: Lowerer, a: Any, b: Any) -> Any:
        compute = torch.bool if name.startswith("logical") else upcast(promoted(a, b))
        return elementwise(L, name, a, b, compute=compute)

    register(op)(lower)


for _op, _name in _COMPARE.items():
    _reg_compare(_op, _name)


@register(aten.add, prims.add)
def _add(L: Lowerer, a: Any, b: Any, alpha: Any = 1) -> Any:
    if alpha != 1:
        return _alpha(L, "add", a, b, alpha)
    return elementwise(L, "add", a, b)


@register(aten.sub, prims.sub)
def _sub(L: Lowerer, a: Any, b: Any, alpha: Any = 1) -> Any:
    if alpha != 1:
        return _alpha(L, "sub", a, b, alpha)
    return elementwise(L, "sub", a, b)


def _alpha(L: Lowerer, name: str, a: Any, b: Any, alpha: Any) -> Any:
    dtype, sizes = out_dtype(L), shape_of(L.meta())
    c = upcast(dtype)

    def body(idx: Index) -> Expr:
        scaled = Op("mul", (bload(b, sizes, idx, c), Const(alpha, c)), c)
        return cast(Op(name, (bload(a, sizes, idx, c), scaled), c), dtype)

    return L.pointwise(sizes, dtype, body)


_PRODUCTS = {aten.mul.Tensor: "mul", aten.div.Tensor: "truediv"}


@register("prims::fma")
def _fma(L: Lowerer, a: Any, b: Any, c: Any) -> Any:
    """``a * b + c`` rounded once; any operand may be a Python number (Dynamo passes
    addcmul_'s ``value`` so). Integers have no rounding to keep: a multiply and an add.

    Dynamo makes ``addcmul_(x, y, value=v)`` ``fma(mul(x, y), v, self)`` (addcdiv_ with a
    ``div``). In bfloat16 or float16 the product, read here only, is computed in float32
    and not rounded first: eager's addcmul rounds once (as Inductor's kernel does)."""
    dtype = out_dtype(L)
    sizes, c_t = shape_of(L.meta()), upcast(dtype)
    product = _unrounded_product(L, dtype)
    if product is not None:
        name, x, y = product

        def fused(idx: Index) -> Expr:
            p = Op(name, (bload(x, sizes, idx, c_t), bload(y, sizes, idx, c_t)), c_t)
            return cast(
                Op("fma", (p, bload(b, sizes, idx, c_t), bload(c, sizes, idx, c_t)), c_t), dtype
            )

        return L.pointwise(sizes, dtype, fused)
    if dtype.is_floating_point:
        return elementwise(L, "fma", a, b, c)

    def body(idx: Index) -> Expr:
        product = Op("mul", (bload(a, sizes, idx, c_t), bload(b, sizes, idx, c_t)), c_t)
        return cast(Op("add", (product, bload(c, sizes, idx, c_t)), c_t), dtype)

    return L.pointwise(sizes, dtype, body)


def _unrounded_product(L: Lowerer, dtype: torch.dtype) -> tuple[str, Any, Any] | None:
    """(op, x, y) of the product ``fma``'s first operand is, where it is a reduced-precision
    ``mul``/``div`` of the same dtype that nothing else reads."""
    first = L.node().args[0]
    if dtype == upcast(dtype) or not isinstance(first, torch.fx.Node):
        return None
    name = _PRODUCTS.get(first.target)
    val = first.meta.get("val")
    if name is None or len(first.users) != 1 or getattr(val, "dtype", None) != dtype:
        return None
    x, y = (L.env[v] if isinstance(v, torch.fx.Node) else v for v in first.args[:2])
    L.absorb(first)
    return name, x, y


@register(aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor, prims.div)
def _div(L: Lowerer, a: Any, b: Any) -> Any:
    dtype = out_dtype(L)
    if not dtype.is_floating_point:  # prims.div on integers truncates
        return _div_mode(L, a, b, rounding_mode="trunc")
    return elementwise(L, "truediv", a, b)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(L: Lowerer, a: Any, b: Any, *, rounding_mode: str | None = None) -> Any:
    if rounding_mode is None:
        return elementwise(L, "truediv", a, b)
    _no_zero_divisor(L, f"division (rounding_mode={rounding_mode!r})", b)
    dtype, sizes = out_dtype(L), shape_of(L.meta())
    c = upcast(dtype)

    def body(idx: Index) -> Expr:
        x, y = bload(a, sizes, idx, c), bload(b, sizes, idx, c)
        if rounding_mode == "floor":
            return cast(Op("floordiv", (x, y), c), dtype)
        if c.is_floating_point:
            return cast(Op("trunc", (Op("truediv", (x, y), c),), c), dtype)
        # integer truncating division: sign-aware on top of floor division
        q = Op("floordiv", (x, y), c)
        r = Op("fmod", (x, y), c)
        fix = Op(
            "logical_and",
            (
                Op("ne", (r, Const(0, c)), torch.bool),
                Op(
                    "ne",
                    (
                        Op("lt", (x, Const(0, c)), torch.bool),
                        Op("lt", (y, Const(0, c)), torch.bool),
                    ),
                    torch.bool,
                ),
            ),
            torch.bool,
        )
        return cast(Op("where", (fix, Op("add", (q, Const(1, c)), c), q), c), dtype)

    return L.pointwise(sizes, dtype, body)


@register(aten.pow.Tensor_Scalar, aten.pow.Tensor_Tensor, aten.pow.Scalar, prims.pow)
def _pow(L: Lowerer, a: Any, b: Any) -> Any:
    dtype, sizes = out_dtype(L), shape_of(L.meta())
    if not dtype.is_floating_point and isinstance(b, (int, float)) and b < 0:
        # eager checks the exponent when called: RuntimeError, "Integers to negative integer
        # powers are not allowed."; ATen runs it and raises so
        raise Unsupported(
            f"an integer tensor to a negative power ({b}): eager raises 'Integers to "
            "negative integer powers are not allowed.', so ATen runs it"
        )
    c = upcast(dtype)
    if (
        isinstance(b, (int, float))
        and not isinstance(a, (int, float))
        and b == int(b)
        and 0 <= b <= 4
    ):

        def body(idx: Index) -> Expr:  # small integer powers as products
            x = bload(a, sizes, idx, c)
            out: Expr = Const(1, c)
            for _ in range(int(b)):
                out = x if isinstance(out, Const) and out.value == 1 else Op("mul", (out, x), c)
            return cast(out, dtype)

        return L.pointwise(sizes, dtype, body)
    if isinstance(b, float) and b == 0.5:
        return elementwise(L, "sqrt", a)
    return elementwise(L, "pow", a, b)


@register(aten.fmax, aten.fmin, prims.fmax, prims.fmin)
def _fmax(L: Lowerer, a: Any, b: Any) -> Any:
    """The larger (smaller) of two values where one is NaN is the other, as eager's
    ``fmax``/``fmin``; NaN only where both are."""
    dtype = out_dtype(L)
    sizes = shape_of(L.meta())
    c = upcast(dtype)
    pick = "maximum" if L._fx.target in (aten.fmax.default, prims.fmax.default) else "minimum"

    def body(idx: Any) -> Expr:
        x, y = bload(a, sizes, idx, c), bload(b, sizes, idx, c)
        v = Op(pick, (x, y), c)
        if c.is_floating_point:
            v = Op("where", (Op("isnan", (x,), torch.bool), y, v), c)
            v = Op("where", (Op("isnan", (y,), torch.bool), x, v), c)
        return cast(v, dtype)

    return L.pointwise(sizes, dtype, body)


@register(aten.relu)
def _relu(L: Lowerer, x: Any) -> Any:
    return elementwise(L, "maximum", x, 0)


@register(aten.clamp.default, aten.clamp.Tensor)
def _clamp(L: Lowerer, x: Any, min: Any = None, max: Any = None) -> Any:
    dtype, sizes = out_dtype(L), shape_of(L.meta())
    c = upcast(dtype)

    def body(idx: Index) -> Expr:
        v = bload(x, sizes, idx, c)
        if min is not None:
            v = Op("maximum", (v, bload(min, sizes, idx, c)), c)
        if max is not None:
            v = Op("minimum", (v, bload(max, sizes, idx, c)), c)
        return cast(v, dtype)

    return L.pointwise(sizes, dtype, body)


@register(aten.clamp_min)
def _clamp_min(L: Lowerer, x: Any, m: Any) -> Any:
    return _clamp(L, x, min=m)


@register(aten.clamp_max)
def _clamp_max(L: Lowerer, x: Any, m: Any) -> Any:
    return _clamp(L, x, max=m)


@register(aten.hardtanh.default)
def _hardtanh(L: Lowerer, x: Any, lo: float = -1.0, hi: float = 1.0) -> Any:
    return _clamp(L, x, min=lo, max=hi)


@register(aten.elu.default)
def _elu(
    L: Lowerer, x: Any, alpha: float = 1.0, scale: float = 1.0, input_scale: float = 1.0
) -> Any:
    """``scale * x`` above 0, else ``alpha * scale * expm1(input_scale * x)``, as ATen
    computes it (SELU is ELU with its constants). A plugin's ``sdk_lower_op`` comes first."""
    dtype, sizes = out_dtype(L), shape_of(L.meta())
    c = upcast(dtype)

    def body(idx: Index) -> Expr:
        v = bload(x, sizes, idx, c)
        inner = Op("mul", (v, bload(input_scale, sizes, idx, c)), c)
        neg = Op("mul", (Op("expm1", (inner,), c), bload(alpha * scale, sizes, idx, c)), c)
        pos = Op("mul", (v, bload(scale, sizes, idx, c)), c)
        below = Op("lt", (v, Const(0, c)), torch.bool)  # (a zero passes as scale * x)
        return cast(Op("where", (below, neg, pos), c), dtype)

    return L.pointwise(sizes, dtype, body)


@register(
    aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar, prims.where
)
def _where(L: Lowerer, cond: Any, a: Any, b: Any) -> Any:
    dtype, sizes = out_dtype(L), shape_of(L.meta())
    c = upcast(dtype)

    def body(idx: Index) -> Expr:
        return cast(
            Op(
                "where",
                (
                    bload(cond, sizes, idx, torch.bool),
                    bload(a, sizes, idx, c),
                    bload(b, sizes, idx, c),
                ),
                c,
            ),
            dtype,
        )

    return L.pointwise(sizes, dtype, body)


@register(aten.masked_fill.Scalar, aten.masked_fill.Tensor)
def _masked_fill(L: Lowerer, x: Any, mask: Any, value: Any) -> Any:
    return _where(L, mask, value, x)


@register(
    aten._to_copy.default,
    prims.convert_element_type.default,
    aten.clone.default,
    aten.copy.default,
    aten.lift_fresh_copy.default,
    aten.alias.default,
    aten.detach.default,
    aten.contiguous.default,
)
def _copy(L: Lowerer, x: Any, *rest: Any, **kw: Any) -> Any:
    if L._fx.target is aten.copy.default:
        x = rest[0]  # copy(self, src): the values of src
    if L._fx.target in (aten.alias.default, aten.detach.default):
        L.views.add(L.origin)
        return x
    val = L.meta()
    if kw.get("device") is not None and torch.device(kw["device"]).type != L.ctx.device_type:
        raise Unsupported("copy to another device")
    dtype, sizes = val.dtype, shape_of(val)
    if not isinstance(x, TensorValue):
        return L.pointwise(sizes, dtype, lambda idx: Const(x, dtype))
    layout = None
    if kw.get("memory_format") is torch.contiguous_format:
        # asked for (reshape's decomposition clones so that a view follows): contiguous,
        # not the channels-last its input may have
        layout = Layout(tuple(sizes), contiguous_strides(sizes), 0, dtype, L.ctx.device_type)
    return L.pointwise(
        sizes, dtype, lambda idx: cast(bload(x, sizes, idx, x.dtype), dtype), layout=layout
    )


@register(
    aten.full.default,
    aten.full_like.default,
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.empty_like.default,
    aten.zeros.default,
    aten.ones.default,
    aten.empty.memory_format,
    aten.new_zeros.default,
    aten.new_ones.default,
    aten.new_empty.default,
    aten.new_full.default,
    aten.scalar_tensor.default,
    aten.fill.Scalar,
    aten.empty_strided.default,
    aten.new_empty_strided.default,
    aten.empty_permuted.default,  # (empty_like's decomposition)
)
def _full(L: Lowerer, *args: Any, **kw: Any) -> Any:
    target = L._fx.target
    val = L.meta()
    fill: Any = 0
    if target in _EMPTY:
        fill = uninitialized(L, val.dtype)
    elif target in (aten.full.default, aten.full_like.default, aten.fill.Scalar):
        fill = args[1]
    elif target is aten.new_full.default:
        fill = args[2]
    elif target in (aten.ones_like.default, aten.ones.default, aten.new_ones.default):
        fill = 1
    elif target is aten.scalar_tensor.default:
        fill = args[0]
    if isinstance(fill, TensorValue):
        raise Unsupported("fill with a tensor value")
    # (a number, a symbolic size or a float computed from sizes)
    return L.pointwise(shape_of(val), val.dtype, lambda idx: bload(fill, (), (), val.dtype))


#: ``sdk.explain``'s note on a graph compiled with empty tensors under deterministic mode
DETERMINISTIC_EMPTY = (
    "torch.use_deterministic_algorithms(True): torch.empty and its family hold what eager "
    "fills them with where read or returned (NaN, or the dtype's largest value)"
)
_EMPTY = (
    aten.empty.memory_format,
    aten.empty_like.default,
    aten.empty_strided.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
    aten.empty_permuted.default,
)


def uninitialized(L: Lowerer, dtype: torch.dtype) -> Any:
    """What an empty tensor (``torch.empty`` and its family) holds where it is read or
    returned. Under ``torch.use_deterministic_algorithms(True)`` what eager fills it with
    (``torch.utils.deterministic.fill_uninitialized_memory``, aten's
    ``fill_empty_deterministic_``): NaN for floating and complex dtypes, the dtype's largest
    value otherwise (True for bool). Else 0: any value would do, and the kernel that writes
    it costs the same. Decided at compile time: Dynamo guards on the deterministic mode (a
    change recompiles) and the whole-graph cache's key holds it. The fill is made under
    deterministic mode whether or not ``fill_uninitialized_memory`` is set (Dynamo does not
    guard on that flag, so it could change under a compiled graph; with it off any value
    is right, NaN as well), and an empty whose values are all written before anything reads
    them is no kernel at all, in either mode."""
    if not torch.are_deterministic_algorithms_enabled():
        return 0
    L.ctx.note(DETERMINISTIC_EMPTY)
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype is torch.bool:
        return True
    return torch.iinfo(dtype).max


@register(aten.fill.Tensor)
def _fill_tensor(L: Lowerer, x: Any, value: Any) -> Any:
    val = L.meta()
    return L.pointwise(shape_of(val), val.dtype, lambda idx: cast(value.load(()), val.dtype))


@register(aten.arange.start_step, aten.arange.default, aten.arange.start, prims.iota.default)
def _arange(L: Lowerer, *args: Any, **kw: Any) -> Any:
    val = L.meta()
    target = L._fx.target
    if target is prims.iota.default:
        start, step = kw.get("start", 0), kw.get("step", 1)
    elif target is aten.arange.default:
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if len(args) > 2 else kw.get("step", 1)
    dtype = val.dtype
    c = upcast(dtype)

    def body(idx: Index) -> Expr:
        i = IndexValue(idx[0])
        return cast(
            Op("add", (Const(start, c), Op("mul", (cast(i, c), Const(step, c)), c)), c), dtype
        )

    return L.pointwise(shape_of(val), dtype, body)


# random numbers: counter-based, seeded per call from torch's default generator
@register(aten.rand.default, aten.rand_like.default, aten.randn.default, aten.randn_like.default)
def _rand(L: Lowerer, *args: Any, **kw: Any) -> Any:
    val = L.meta()
    name = "randn" if L._fx.target in (aten.randn.default, aten.randn_like.default) else "rand"
    if kw.get("generator") is not None:
        raise Unsupported("an explicit generator")
    L.needs_seed = True
    seed = Load(SEED_BUFFER, sympy.Integer(0), torch.int64)
    offset_base = L.fresh("rng")  # distinct streams per op: salt the seed
    salt = int(offset_base[3:]) * 0x9E3779B9
    sizes = shape_of(val)
    strides = contiguous_strides(sizes)
    dtype = val.dtype

    def body(idx: Index) -> Expr:
        lin = sum((st * i for st, i in zip(strides, idx)), sympy.Integer(0))
        s = Op("add", (seed, Const(salt, torch.int64)), torch.int64) if salt else seed
        return cast(Op(name, (s, IndexValue(lin)), torch.float32), dtype)

    return L.pointwise(sizes, dtype, body)


SEED_BUFFER = "seed"

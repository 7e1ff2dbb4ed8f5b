"""Scalar expressions: the body of every loop-IR kernel.

An expression is an immutable DAG node with a dtype. Equal expressions are
equal Python objects (structural ``==`` and ``hash``), so a renderer gets
common-subexpression elimination by memoising on the node.

Index arithmetic is sympy (``sympy.Expr`` over loop variables, integer and
non-negative); a :class:`Load` reads a buffer at an index. During lowering an
index is a tuple (one entry per dimension of the buffer, its *logical*
coordinates); the kernels handed to plugins carry one linear sympy index per
load, with the buffer's strides and offset already applied.

The op vocabulary (``Op.name``) is closed and documented in :data:`OPS`;
renderers map each name to target code and may refuse the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import sympy
import torch

from .index import index_bounds

# name -> (arity, doc). Comparisons and logical ops return torch.bool.
OPS: dict[str, tuple[int, str]] = {
    # arithmetic
    "add": (2, "a + b"),
    "sub": (2, "a - b"),
    "mul": (2, "a * b"),
    "truediv": (2, "a / b (floating)"),
    "floordiv": (2, "floor(a / b), Python semantics; an integer b is never 0 (see fmod)"),
    "remainder": (2, "a - floor(a / b) * b, Python semantics (torch.remainder)"),
    "fmod": (
        2,
        "C fmod / integer %, sign of a (torch.fmod); integer floordiv, remainder and fmod come "
        "only with a divisor that cannot be 0 (eager raises for it: ATen runs those)",
    ),
    "pow": (2, "a ** b"),
    "atan2": (2, "atan2(a, b)"),
    "maximum": (
        2,
        "max, NaN-propagating (torch.maximum); of two zeros, the one eager gives on the "
        "target's device (relu and clamp are maximum(x, lo) and minimum(x, hi), x first)",
    ),
    "minimum": (2, "min, NaN-propagating (torch.minimum); of two zeros: as maximum"),
    "copysign": (2, "copysign(a, b)"),
    "fma": (
        3,
        "a * b + c rounded once (floating; torch's prims.fma, which Dynamo makes of "
        "addcmul_, addcdiv_ and add_ with a tensor alpha)",
    ),
    "neg": (1, "-a"),
    "abs": (1, "|a|"),
    "reciprocal": (1, "1 / a"),
    "sign": (1, "-1, 0 or 1; NaN gives 0 (torch.sign)"),
    # transcendental
    "exp": (1, ""),
    "exp2": (1, ""),
    "expm1": (1, ""),
    "log": (1, ""),
    "log2": (1, ""),
    "log10": (1, ""),
    "log1p": (1, ""),
    "sqrt": (1, ""),
    "rsqrt": (1, "1 / sqrt(a)"),
    "sin": (1, ""),
    "cos": (1, ""),
    "tan": (1, ""),
    "asin": (1, ""),
    "acos": (1, ""),
    "atan": (1, ""),
    "sinh": (1, ""),
    "cosh": (1, ""),
    "tanh": (1, ""),
    "asinh": (1, ""),
    "acosh": (1, ""),
    "atanh": (1, ""),
    "erf": (1, ""),
    "erfc": (1, ""),
    "sigmoid": (1, "1 / (1 + exp(-a))"),
    # rounding
    "floor": (1, ""),
    "ceil": (1, ""),
    "trunc": (1, ""),
    "round": (1, "round half to even (torch.round)"),
    # predicates and logic (result torch.bool)
    "eq": (2, ""),
    "ne": (2, ""),
    "lt": (2, ""),
    "le": (2, ""),
    "gt": (2, ""),
    "ge": (2, ""),
    "isnan": (1, ""),
    "isinf": (1, ""),
    "signbit": (1, ""),
    "logical_and": (2, ""),
    "logical_or": (2, ""),
    "logical_xor": (2, ""),
    "logical_not": (1, ""),
    # integer bit ops
    "bitwise_and": (2, ""),
    "bitwise_or": (2, ""),
    "bitwise_xor": (2, ""),
    "bitwise_not": (1, ""),
    "lshift": (2, ""),
    "rshift": (2, ""),
    # selection and conversion
    "where": (3, "a ? b : c"),
    "cast": (
        1,
        "convert to the node's dtype (bool: a != 0; float->int truncates; a float out of the "
        "integer's range, NaN or inf as eager converts it on the target's device: to int8, "
        "int16 through int32, to uint8 through int64)",
    ),
    # counter-based random numbers: a = seed (int64), b = element offset (int64)
    "rand": (2, "uniform [0, 1) float32 from Philox4x32-10(seed, offset)"),
    "randn": (2, "standard normal float32 from Philox4x32-10(seed, offset), Box-Muller"),
}

#: The "cast" op's narrow integers: a float goes to each through the wider integer named,
#: as eager converts (c10's ``static_cast_with_inter_type`` to uint8 through int64; a C cast
#: to int8 or int16 compiles to the 32-bit conversion, then truncates): 300.0 -> int8 44,
#: -1.0 -> uint8 255. Only values out of the wider type's range then depend on the device.
CAST_VIA: dict[torch.dtype, torch.dtype] = {
    torch.int8: torch.int32,
    torch.int16: torch.int32,
    torch.uint16: torch.int32,
    torch.uint8: torch.int64,
}

#: The ops that cost far more than a load: the SDK's one table of what an op costs
#: (``sdk.ir.TRANSCENDENTAL``, for plugins to read too). Each is a math-library call on a
#: CPU (libm, or libmvec's vector variants) and a libdevice call or a sequence of
#: special-function instructions on a GPU. The scheduler keeps a value computed with one of
#: them rather than recompute it: stored once instead of recomputed at every point of a
#: larger reader that broadcasts it, unless the plugin declares
#: ``Preferences.cheap_transcendentals``; and, with ``Capability.STORE_THEN_LOAD``, stored by
#: one stage of a kernel and loaded back by the next (a softmax's exp). ``sqrt`` and
#: ``rsqrt`` are not here: each is a hardware instruction, on CPUs (x86's ``sqrtps``, Arm's
#: ``fsqrt``; ``rsqrt`` is that and a division) and on GPUs (``MUFU.RSQ``, a multiply or a
#: few FMAs more for an IEEE-rounded ``sqrt``), and costs less than a store and a load back
#: (BatchNorm's per-channel ``rsqrt(var + eps) * weight`` is recomputed in the kernel that
#: broadcasts it over the activation, as Inductor does).
TRANSCENDENTAL: frozenset[str] = frozenset(
    {
        "exp",
        "exp2",
        "expm1",
        "log",
        "log2",
        "log10",
        "log1p",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "tanh",
        "asinh",
        "acosh",
        "atanh",
        "erf",
        "erfc",
        "sigmoid",
        "pow",
        "atan2",
    }
)

PREDICATES = frozenset(
    {
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "isnan",
        "isinf",
        "signbit",
        "logical_and",
        "logical_or",
        "logical_xor",
        "logical_not",
    }
)

#: Reduction ops of :class:`sdk.ir.Reduction`; argmax/argmin give int64 positions
#: (first occurrence, NaN counts as the maximum as in torch).
REDUCTIONS = ("sum", "prod", "max", "min", "argmax", "argmin", "any", "all")


class Expr:
    """Base of the scalar expression nodes."""

    __slots__ = ("dtype", "_key", "_hash")

    def _init(self, dtype: torch.dtype, key: tuple) -> None:
        self.dtype = dtype
        self._key = (type(self).__name__, dtype, *key)
        self._hash = hash(self._key)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (
            isinstance(other, Expr) and self._hash == other._hash and self._key == other._key
        )

    def children(self) -> tuple[Expr, ...]:
        return ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self._key[2:]}"


class Const(Expr):
    """A constant ``value`` of ``dtype``: ``Const(0.5, torch.float32)``. The value is
    converted to the dtype's Python type (float, int or bool) when built."""

    __slots__ = ("value",)

    def __init__(self, value: Any, dtype: torch.dtype) -> None:
        if isinstance(value, Expr) or (isinstance(value, sympy.Basic) and value.free_symbols):
            # (bool() of one would be True)
            raise TypeError(f"a constant of a computed value: {value!r}")
        if dtype.is_floating_point:
            value = float(value)
        elif dtype == torch.bool:
            value = bool(value)
        else:
            value = int(value)
        self.value = value
        # 0.0 and -0.0 hash alike but differ; NaN != NaN: key on repr
        self._init(dtype, (repr(value),))


class IndexValue(Expr):
    """The value of an index expression (e.g. ``arange``), as an integer."""

    __slots__ = ("expr",)

    def __init__(self, expr: sympy.Expr, dtype: torch.dtype = torch.int64) -> None:
        self.expr = sympy.sympify(expr)
        self._init(dtype, (self.expr,))


class Load(Expr):
    """Read ``buffer`` at ``index``.

    ``index`` is a tuple of per-dimension sympy expressions while lowering and
    one linear sympy expression in a scheduled :class:`sdk.ir.Kernel`.
    ``binds`` names the indirect indices used in ``index``: each is a sympy
    symbol and the integer expression whose value it takes (gather, embedding),
    together with the extent it must lie in.
    """

    __slots__ = ("buffer", "index", "binds")

    def __init__(
        self,
        buffer: str,
        index: Any,
        dtype: torch.dtype,
        binds: tuple[tuple[sympy.Symbol, Expr, Any], ...] = (),
    ) -> None:
        self.buffer = buffer
        self.index = (
            tuple(sympy.sympify(i) for i in index)
            if isinstance(index, tuple)
            else sympy.sympify(index)
        )
        self.binds = binds
        self._init(dtype, (buffer, self.index, binds))

    def children(self) -> tuple[Expr, ...]:
        return tuple(b[1] for b in self.binds)


class Op(Expr):
    """``name`` (one of :data:`OPS`) applied to ``args``, computed in ``dtype``:
    ``Op("mul", (a, b), torch.float32)``. The arguments' dtypes are not converted: build
    them in the dtype you compute in (``LoweringBuilder.cast``); ``Op("cast", (a,), t)``
    converts ``a`` to ``t``. Comparisons and logical ops take ``torch.bool``."""

    __slots__ = ("name", "args")

    def __init__(self, name: str, args: tuple[Expr, ...], dtype: torch.dtype) -> None:
        if name not in OPS:
            raise ValueError(f"{name!r} is not in the IR op vocabulary")
        if len(args) != OPS[name][0]:
            raise ValueError(f"op {name} takes {OPS[name][0]} arguments, got {len(args)}")
        self.name = name
        self.args = tuple(args)
        self._init(dtype, (name, self.args))

    def children(self) -> tuple[Expr, ...]:
        return self.args


class LocalRef(Expr):
    """The result of a reduction computed in an earlier stage of the same kernel."""

    __slots__ = ("name",)

    def __init__(self, name: str, dtype: torch.dtype) -> None:
        self.name = name
        self._init(dtype, (name,))


def walk(roots: Iterator[Expr] | list[Expr]) -> list[Expr]:
    """Every node reachable from ``roots``, each once, children before parents."""
    seen: set[int] = set()
    order: list[Expr] = []
    stack: list[tuple[Expr, bool]] = [(r, False) for r in reversed(list(roots))]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(node.children()))
    # structurally equal nodes reached through different objects collapse here
    out, keys = [], set()
    for n in order:
        if n not in keys:
            keys.add(n)
            out.append(n)
    return out


def rewrite(root: Expr, fn: Callable[[Expr], Expr | None], memo: dict | None = None) -> Expr:
    """Rebuild ``root`` bottom-up; ``fn(node)`` returns a replacement or None."""
    memo = {} if memo is None else memo

    def go(node: Expr) -> Expr:
        hit = memo.get(node)
        if hit is not None:
            return hit
        out = fn(node)
        if out is None:
            if isinstance(node, Op):
                args = tuple(go(a) for a in node.args)
                out = node if args == node.args else Op(node.name, args, node.dtype)
            elif isinstance(node, Load) and node.binds:
                binds = tuple((s, go(e), n) for s, e, n in node.binds)
                out = (
                    node
                    if binds == node.binds
                    else Load(node.buffer, node.index, node.dtype, binds)
                )
            else:
                out = node
        memo[node] = out
        return out

    return go(root)


def subs_index(root: Expr, mapping: dict[sympy.Symbol, sympy.Expr]) -> Expr:
    """Substitute loop variables in every index of ``root``."""
    if not mapping:
        return root

    def fn(node: Expr) -> Expr | None:
        if isinstance(node, Load):
            binds = tuple((s, subs_index(e, mapping), n) for s, e, n in node.binds)
            idx = node.index
            idx = (
                tuple(sympy.sympify(i).xreplace(mapping) for i in idx)
                if isinstance(idx, tuple)
                else idx.xreplace(mapping)
            )
            return Load(node.buffer, idx, node.dtype, binds)
        if isinstance(node, IndexValue):
            return IndexValue(node.expr.xreplace(mapping), node.dtype)
        return None

    return rewrite(root, fn)


def loads(root: Expr) -> list[Load]:
    return [n for n in walk([root]) if isinstance(n, Load)]


def cast(e: Expr, dtype: torch.dtype) -> Expr:
    """``e`` as a value of ``dtype``: itself if it has that dtype, a constant converted, else
    the op ``cast`` (``LoweringBuilder.cast``)."""
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        return Const(e.value if dtype != torch.bool else bool(e.value), dtype)
    # fp32 -> bf16 -> fp32 is not an identity; keep it (stores round on purpose)
    return Op("cast", (e,), dtype)


def value_bounds(e: Expr, ranges: dict[sympy.Symbol, tuple[Any, Any]]) -> tuple[int, int] | None:
    """Inclusive integer bounds of the value of ``e`` over the loop ``ranges`` (as for
    :func:`sdk.ir.index_bounds`), or None where they are unknown: a load, a float, a
    symbolic size, an op without an interval rule. Integer arithmetic only (``add``,
    ``sub``, ``mul``, ``neg``, ``floordiv`` and ``remainder`` by a positive constant,
    ``maximum``, ``minimum``, ``where``, integer ``cast``), so a computed index (a pooling
    window's row) can be proven inside its buffer, and its load needs no check."""
    memo: dict[Expr, tuple[int, int] | None] = {}

    def go(n: Expr) -> tuple[int, int] | None:
        if n in memo:
            return memo[n]
        out = _value_bounds(n, ranges, go) if n.dtype in _INTEGERS else None
        if out is not None:  # a value that could wrap around its type is unknown
            info = torch.iinfo(n.dtype)
            out = out if info.min <= out[0] and out[1] <= info.max else None
        memo[n] = out
        return out

    return go(e)


_INTEGERS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
#: the ops of two integer operands (``where``: of its two values) with an interval rule
_BINARY = frozenset({"add", "sub", "mul", "maximum", "minimum", "floordiv", "remainder", "where"})


def _value_bounds(n: Expr, ranges: dict, go: Callable) -> Any:
    if isinstance(n, Const):
        return n.value, n.value
    if isinstance(n, IndexValue):
        b = index_bounds(n.expr, ranges)
        return b if b is not None and all(isinstance(v, int) for v in b) else None
    if not isinstance(n, Op):
        return None
    if n.name == "cast":  # of an integer: the value is kept where it fits (checked by go)
        return go(n.args[0])
    if n.name == "neg":
        a = go(n.args[0])
        return None if a is None else (-a[1], -a[0])
    if n.name not in _BINARY:
        return None
    args = [go(a) for a in (n.args[1:] if n.name == "where" else n.args)]
    if any(a is None for a in args):
        return None
    (alo, ahi), (blo, bhi) = args
    if n.name == "where":
        return min(alo, blo), max(ahi, bhi)
    if n.name == "add":
        return alo + blo, ahi + bhi
    if n.name == "sub":
        return alo - bhi, ahi - blo
    if n.name == "mul":
        corners = (alo * blo, alo * bhi, ahi * blo, ahi * bhi)
        return min(corners), max(corners)
    if n.name == "maximum":
        return max(alo, blo), max(ahi, bhi)
    if n.name == "minimum":
        return min(alo, blo), min(ahi, bhi)
    if n.name in ("floordiv", "remainder") and blo == bhi and blo > 0:
        if n.name == "floordiv":  # floor division is monotonic in the dividend
            return alo // blo, ahi // blo
        return (alo, ahi) if alo >= 0 and ahi < blo else (0, blo - 1)
    return None

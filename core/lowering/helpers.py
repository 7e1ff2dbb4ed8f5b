"""What op lowerings share: broadcasting, broadcast loads, result dtypes,
:func:`elementwise`, the one pointwise node most lowerings build, and the indices that
data movement computes (:func:`index_in_range`, :func:`indirect_loader`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch

from ..ir.expr import PREDICATES as _PRED
from ..ir.expr import Const, Expr, Load, Op
from ..ir.graph import (
    ComputedView,
    Index,
    TensorValue,
)
from ..ir.index import Mod, is_static, var
from .layouts import shape_of
from .lowerer import Lowerer, cast, upcast
from .optable import Unsupported
from .sizes import scalar_value, size_value


def broadcast_shapes(*shapes: tuple[Any, ...]) -> tuple[Any, ...]:
    """torch's broadcasting of sizes, also over symbolic sizes (each >= 2, so a symbolic
    size broadcasts only against 1 or an equal size; anything else raises)."""
    if all(is_static(x) for s in shapes for x in s):
        return tuple(torch.broadcast_shapes(*[torch.Size(s) for s in shapes]))
    rank = max(len(s) for s in shapes)
    out: list[Any] = []
    for d in range(rank):
        size: Any = 1
        for s in shapes:
            x = s[d - rank + len(s)] if d - rank + len(s) >= 0 else 1
            if x == 1 or x == size:
                continue
            if size == 1:
                size = x
            else:
                raise TypeError(
                    f"cannot broadcast sizes {size} and {x} (unequal for some "
                    "values of the size symbols)"
                )
        out.append(size)
    return tuple(out)


def bload(x: Any, sizes: tuple[int, ...], idx: Index, dtype: torch.dtype) -> Expr:
    """Load ``x`` broadcast to ``sizes`` at ``idx``, as ``dtype``."""
    if isinstance(x, TensorValue):
        nd = len(x.sizes)
        sub = idx[len(idx) - nd :] if nd else ()
        sub = tuple(sympy.Integer(0) if s == 1 else i for s, i in zip(x.sizes, sub))
        return cast(x.load(sub), dtype)
    return scalar_value(x, dtype)  # (a mean's count: a symbolic size used as a scalar)


def tensor_args(*xs: Any) -> list[TensorValue]:
    return [x for x in xs if isinstance(x, TensorValue)]


def out_dtype(L: Lowerer, i: int | None = None) -> torch.dtype:
    return L.meta(i).dtype


def promoted(a: Any, b: Any) -> torch.dtype:
    """torch's type promotion of two operands (tensors by dtype and rank, or Python scalars)."""

    def meta(x: Any) -> Any:
        if isinstance(x, TensorValue):
            return torch.empty((1,) * x.ndim, dtype=x.dtype, device="meta")
        if isinstance(x, sympy.Expr):  # a symbolic size: a Python int
            return 2
        return x

    return torch.result_type(meta(a), meta(b))


def elementwise(
    L: Lowerer,
    name: str,
    *xs: Any,
    compute: torch.dtype | None = None,
    result: torch.dtype | None = None,
) -> ComputedView:
    """``name(*xs)`` broadcast, computed in ``compute`` and stored as the graph's dtype."""
    dtype = out_dtype(L)
    sizes = shape_of(L.meta())
    compute = compute or upcast(dtype)
    res = result or (torch.bool if name in _PRED else compute)

    if compute == torch.bool and name.startswith("bitwise_"):
        name = "logical_" + name[len("bitwise_") :]
        res = torch.bool

    def body(idx: Index) -> Expr:
        return cast(Op(name, tuple(bload(x, sizes, idx, compute) for x in xs), res), dtype)

    return L.pointwise(sizes, dtype, body)


def index_in_range(i: sympy.Expr, lo: int, n: int, reach: int) -> sympy.Expr:
    """``i - lo`` folded into [0, n): exact where it is in range, in bounds elsewhere.

    ``reach`` (>= 0: a number, or a sum of sizes) bounds how far below zero ``i - lo`` can
    go. (Not its absolute value: sympy cannot always tell the sign of a polynomial in sizes,
    BEiT's ``(2 * (s // 8) - 1) ** 2 + 3`` relative distances, and keeps an ``Abs`` that no
    renderer prints.)
    """
    if is_static(n) and n <= 0:
        return sympy.Integer(0)
    # a multiple of n at least reach (a symbolic n is >= 2: n * reach is one)
    span = n * ((reach + n - 1) // n) if is_static(n) and is_static(reach) else n * reach
    return Mod(i - lo + span, n)


def from_the_end(v: Expr, n: Any) -> Expr:
    """An int64 index ``v`` into a dim of size ``n``, Python's way: -1 is the last element."""
    return Op(
        "where",
        (
            Op("lt", (v, Const(0, torch.int64)), torch.bool),
            Op("add", (v, size_value(n, torch.int64)), torch.int64),
            v,
        ),
        torch.int64,
    )


def indirect_loader(L: Lowerer, x: TensorValue, extents: list[int], wrap: bool = False) -> Callable:
    """Loader of ``x`` where some dims take computed (indirect) indices.

    ``wrap``: negative indices count from the end (``x[idx]``); otherwise they
    are out of range, as for embedding, gather and index_select in eager.
    """
    src = x.storage
    # a whole computed node is read at its own index (linearized when scheduled), so the
    # scheduler can recompute the few gathered elements instead of storing the node
    whole = (
        isinstance(x, ComputedView) and x.reindex is None and tuple(x.sizes) == tuple(x.node.sizes)
    )
    if src is None and not whole:
        # a view that is no strided buffer (RoBERTa gathers from an expanded buffer of
        # token types): its elements stored in its own shape, then gathered from
        src = L.realize(x)
    if src is None:
        raise Unsupported("indexing into a non-strided view")

    def load(idx_parts: list[Any]) -> Expr:
        binds, full = [], []
        for part, n in zip(idx_parts, extents):
            if isinstance(part, Expr):
                sym = var(L.fresh("ind"))
                v = cast(part, torch.int64)
                if wrap:
                    v = from_the_end(v, n)
                binds.append((sym, v, n))
                full.append(sym)
            else:
                full.append(part)
        index = tuple(full) if whole else src.layout.linear(tuple(full))
        return Load(src.buffer, index, src.dtype, tuple(binds))

    return load

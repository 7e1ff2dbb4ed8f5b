"""What op lowerings share: broadcasting, broadcast loads, result dtypes, and
:func:`elementwise`, the one pointwise node most lowerings build."""

from __future__ import annotations

from typing import Any

import sympy
import torch

from ..ir.expr import PREDICATES as _PRED
from ..ir.expr import Expr, Op
from ..ir.graph import (
    ComputedView,
    Index,
    TensorValue,
)
from ..ir.index import is_static
from .layouts import shape_of
from .lowerer import Lowerer, cast, upcast
from .sizes import scalar_value


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

"""Lowerings of reductions: sum, prod, mean, max/min and their arg forms, any/all,
var/var_mean. Each is a reduction node over the reduced dims (:func:`reduce_over`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy
import torch

from ..adapters.torch_private import aten, prims
from ..ir.expr import Const, Expr, Op
from ..ir.graph import (
    ComputedView,
    Index,
    TensorValue,
)
from ..ir.index import is_static
from .helpers import out_dtype
from .lowerer import Lowerer, cast, upcast
from .optable import register
from .sizes import size_value
from .views import reshape_reindex


def _dims(dims: Any, ndim: int) -> list[int]:
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(ndim))
    if isinstance(dims, int):
        dims = [dims]
    return sorted(d % ndim if ndim else 0 for d in dims)


def reduce_over(
    L: Lowerer,
    x: TensorValue,
    dims: list[int],
    keepdim: bool,
    op: str,
    dtype: torch.dtype,
    prologue: Callable[[Expr], Expr] | None = None,
) -> ComputedView:
    """``op`` over ``dims`` of ``x``; the kept dims come first in the output's loop order."""
    nd = len(x.sizes)
    out_sizes = tuple(
        1 if (keepdim and d in dims) else x.sizes[d] for d in range(nd) if keepdim or d not in dims
    )
    rsizes = tuple(x.sizes[d] for d in dims)

    def body(idx: Index, ridx: Index) -> Expr:
        full: list[Any] = [None] * nd
        pos = iter(idx)
        for d in range(nd):
            if keepdim:
                i = next(pos)
                full[d] = i if d not in dims else None
            elif d not in dims:
                full[d] = next(pos)
        for d, r in zip(dims, ridx):
            full[d] = r
        v = x.load(tuple(full))
        return prologue(v) if prologue else v

    return L.reduction(out_sizes, rsizes, op, dtype, body)


@register(aten.sum.dim_IntList, aten.sum.default, prims.sum.default)
def _sum(
    L: Lowerer,
    x: Any,
    dims: Any = None,
    keepdim: bool = False,
    *,
    dtype: Any = None,
    output_dtype: Any = None,
) -> Any:
    out = out_dtype(L)
    return reduce_over(
        L, x, _dims(dims, x.ndim), keepdim, "sum", out, lambda v: cast(v, upcast(out))
    )


@register(aten.prod.dim_int, aten.prod.default)
def _prod(L: Lowerer, x: Any, dim: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    out = out_dtype(L)
    return reduce_over(
        L, x, _dims(dim, x.ndim), keepdim, "prod", out, lambda v: cast(v, upcast(out))
    )


@register(aten.mean.dim, aten.mean.default)
def _mean(L: Lowerer, x: Any, dims: Any = None, keepdim: bool = False, *, dtype: Any = None) -> Any:
    out = out_dtype(L)
    c = upcast(out)
    d = _dims(dims, x.ndim)
    n = math.prod(x.sizes[i] for i in d)
    s = reduce_over(L, x, d, keepdim, "sum", c, lambda v: cast(v, c))
    return L.pointwise(
        s.sizes, out, lambda idx: cast(Op("truediv", (s.load(idx), size_value(n, c)), c), out)
    )


@register(aten.amax, aten.amin, aten.max.default, aten.min.default, prims.amax, prims.amin)
def _amax(L: Lowerer, x: Any, dims: Any = None, keepdim: bool = False) -> Any:
    target = L._fx.target
    op = "max" if target in (aten.amax.default, aten.max.default, prims.amax.default) else "min"
    return reduce_over(L, x, _dims(dims, x.ndim), keepdim, op, x.dtype)


@register(aten.max.dim, aten.min.dim)
def _max_dim(L: Lowerer, x: Any, dim: int, keepdim: bool = False) -> Any:
    op = "max" if L._fx.target is aten.max.dim else "min"
    d = _dims(dim, x.ndim)
    vals = reduce_over(L, x, d, keepdim, op, x.dtype)
    idx = reduce_over(L, x, d, keepdim, "arg" + op, torch.int64)
    return vals, idx


@register(aten.argmax.default, aten.argmin.default)
def _argmax(L: Lowerer, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    op = "argmax" if L._fx.target is aten.argmax.default else "argmin"
    if dim is None:
        flat = L.view(
            x,
            (math.prod(x.sizes),),
            reshape_reindex(x.sizes, (math.prod(x.sizes),)),
            aten.reshape.default,
            ((math.prod(x.sizes),),),
        )
        out = reduce_over(L, flat, [0], False, op, torch.int64)
        return out
    return reduce_over(L, x, _dims(dim, x.ndim), keepdim, op, torch.int64)


@register(
    aten.any.dim, aten.any.dims, aten.any.default, aten.all.dim, aten.all.dims, aten.all.default
)
def _any(L: Lowerer, x: Any, dim: Any = None, keepdim: bool = False) -> Any:
    op = "any" if L._fx.target in (aten.any.dim, aten.any.dims, aten.any.default) else "all"
    return reduce_over(
        L, x, _dims(dim, x.ndim), keepdim, op, torch.bool, lambda v: cast(v, torch.bool)
    )


@register(
    aten.var_mean.correction,
    aten.var.correction,
    aten.var.dim,
    aten.var_mean.dim,
    prims.var.default,
)
def _var_mean(
    L: Lowerer,
    x: Any,
    dims: Any = None,
    *args: Any,
    correction: Any = None,
    keepdim: bool = False,
    unbiased: Any = None,
) -> Any:
    """Two passes (mean, then the sum of squared deviations): numerically stable."""
    target = L._fx.target
    if target is prims.var.default:
        correction = args[0] if args else correction
    elif target in (aten.var.dim, aten.var_mean.dim):
        unbiased = args[0] if args else (True if unbiased is None else unbiased)
        keepdim = args[1] if len(args) > 1 else keepdim
        correction = 1 if unbiased else 0
    correction = 1 if correction is None else correction
    if float(correction).is_integer():
        # (``x.std()`` traces correction=1.0: a float in the count made the divisor a
        # float index expression no plugin prints, and the graph ran in ATen)
        correction = int(correction)
    d = _dims(dims, x.ndim)
    n = math.prod(x.sizes[i] for i in d)
    is_pair = target in (aten.var_mean.correction, aten.var_mean.dim)
    out = L.meta(0).dtype if is_pair else L.meta().dtype
    c = upcast(out)
    total = reduce_over(L, x, d, True, "sum", c, lambda v: cast(v, c))
    mean_k = L.pointwise(
        total.sizes, c, lambda idx: Op("truediv", (total.load(idx), size_value(n, c)), c)
    )

    def sq(idx: Index, ridx: Index) -> Expr:
        full: list[Any] = list(idx)
        for dd, r in zip(d, ridx):
            full[dd] = r
        dev = Op("sub", (cast(x.load(tuple(full)), c), mean_k.load(idx)), c)
        return Op("mul", (dev, dev), c)

    ssq = L.reduction(mean_k.sizes, tuple(x.sizes[i] for i in d), "sum", c, sq)
    if is_static(n):
        denom = max(int(n) - correction, 0)
    elif correction in (0, 1):  # a size symbol is >= 2: the count stays positive
        denom = n - correction
    else:
        raise TypeError(f"a correction of {correction} over a symbolic count")
    out_sizes = (
        tuple(1 if i in d else s for i, s in enumerate(x.sizes))
        if keepdim
        else tuple(s for i, s in enumerate(x.sizes) if i not in d)
    )
    if not keepdim:
        squeeze = [i for i in range(x.ndim) if i not in d]

        def drop(idx: Index) -> Index:
            full = [sympy.Integer(0)] * x.ndim
            for k, i in zip(squeeze, idx):
                full[k] = i
            return tuple(full)
    else:

        def drop(idx: Index) -> Index:
            return idx

    var_ = L.pointwise(
        out_sizes,
        out,
        lambda idx: cast(
            Op(
                "truediv",
                (
                    ssq.load(drop(idx)),
                    size_value(denom, c) if denom != 0 else Const(float("nan"), c),
                ),
                c,
            )
            if denom != 0
            else Op("truediv", (ssq.load(drop(idx)), Const(0.0, c)), c),
            out,
        ),
    )
    if not is_pair:
        return var_
    mean = L.pointwise(out_sizes, out, lambda idx: cast(mean_k.load(drop(idx)), out))
    return var_, mean

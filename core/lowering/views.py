"""Lowerings of view ops: index arithmetic only, never a copy.

A view of a strided buffer keeps a strided layout where one exists
(:func:`.layouts._meta_view`); otherwise reads go through the index mapping."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy
import torch

from ..adapters.torch_private import aten, prims
from ..ir.expr import Const
from ..ir.graph import (
    Index,
    ScalarValue,
    StorageView,
    TensorValue,
)
from ..ir.index import FloorDiv, Mod, is_static, provably_nonneg, size_hint, static
from ..ir.kernel import Layout
from .layouts import _slice_length, identity_restride, shape_of
from .lowerer import Lowerer
from .optable import Unsupported, register


def reshape_reindex(old: tuple[int, ...], new: tuple[int, ...]) -> Callable[[Index], Index]:
    """Map an index of shape ``new`` to the same element's index in shape ``old`` (row-major)."""
    old, new = tuple(old), tuple(new)
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(old) or j < len(new):
        go, gn = [], []
        po = pn = 1
        # take size-1 dims greedily, then grow until the products agree (symbolic sizes:
        # the compiling call's values pick the side to grow, and a group closes only where
        # its products are the same expression, so it holds for every size)
        while True:
            if (
                sympy.expand(po - pn) == 0
                and (go or gn)
                and not (i < len(old) and old[i] == 1)
                and not (j < len(new) and new[j] == 1)
            ):
                break
            if i < len(old) and (size_hint(po) <= size_hint(pn) or j >= len(new)):
                go.append(i)
                po *= old[i]
                i += 1
            elif j < len(new):
                gn.append(j)
                pn *= new[j]
                j += 1
            else:
                break
        groups.append((go, gn))

    def fn(idx: Index) -> Index:
        out: list[Any] = [sympy.Integer(0)] * len(old)
        for go, gn in groups:
            lin = sympy.Integer(0)
            for k in gn:
                lin = lin * new[k] + idx[k]
            for pos, k in enumerate(go):
                inner = math.prod(old[m] for m in go[pos + 1 :])
                v = FloorDiv(lin, inner) if inner != 1 else lin
                out[k] = Mod(v, old[k]) if pos > 0 else v
                if old[k] == 1:
                    out[k] = sympy.Integer(0)
        return tuple(out)

    return fn


@register(aten.view.default, aten._unsafe_view.default, aten.reshape.default, prims.reshape.default)
def _view(L: Lowerer, x: Any, sizes: Any) -> Any:
    sizes = list(sizes)
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = (
            static(FloorDiv(sympy.sympify(math.prod(x.sizes)), known)) if known else 0
        )
    sizes = tuple(static(s) for s in sizes)
    return L.view(x, sizes, reshape_reindex(x.sizes, sizes), aten.reshape.default, (sizes,))


@register(aten.permute.default, prims.transpose.default)
def _permute(L: Lowerer, x: Any, dims: Any) -> Any:
    dims = [d % x.ndim for d in dims]
    sizes = tuple(x.sizes[d] for d in dims)

    def fn(idx: Index) -> Index:
        out = [None] * x.ndim
        for k, d in enumerate(dims):
            out[d] = idx[k]
        return tuple(out)

    return L.view(x, sizes, fn, aten.permute.default, (dims,))


@register(aten.t.default)
def _t(L: Lowerer, x: Any) -> Any:
    return _permute(L, x, list(range(x.ndim))[::-1])


@register(aten.transpose.int)
def _transpose(L: Lowerer, x: Any, a: int, b: int) -> Any:
    dims = list(range(x.ndim))
    a, b = a % max(x.ndim, 1), b % max(x.ndim, 1)
    dims[a], dims[b] = dims[b], dims[a]
    return _permute(L, x, dims)


@register(aten.expand.default, prims.broadcast_in_dim.default)
def _expand(L: Lowerer, x: Any, sizes: Any, bdims: Any = None, *, implicit: bool = False) -> Any:
    if not isinstance(x, TensorValue):
        return ScalarValue(Const(x, L.meta().dtype), tuple(sizes))
    sizes = tuple(static(s) for s in sizes)
    if bdims is not None:  # prims.broadcast_in_dim: x's dims land at bdims

        def fn(idx: Index) -> Index:
            return tuple(
                sympy.Integer(0) if x.sizes[k] == 1 else idx[d] for k, d in enumerate(bdims)
            )

        return L.view(x, sizes, fn, prims.broadcast_in_dim.default, (sizes, bdims))
    sizes = tuple(x.sizes[k - (len(sizes) - x.ndim)] if s == -1 else s for k, s in enumerate(sizes))
    lead = len(sizes) - x.ndim

    def fn(idx: Index) -> Index:
        return tuple(sympy.Integer(0) if x.sizes[k] == 1 else idx[k + lead] for k in range(x.ndim))

    return L.view(x, sizes, fn, aten.expand.default, (sizes,))


@register(aten.unsqueeze.default)
def _unsqueeze(L: Lowerer, x: Any, dim: int) -> Any:
    dim = dim % (x.ndim + 1)
    sizes = x.sizes[:dim] + (1,) + x.sizes[dim:]
    return L.view(x, sizes, lambda idx: idx[:dim] + idx[dim + 1 :], aten.unsqueeze.default, (dim,))


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, prims.squeeze.default)
def _squeeze(L: Lowerer, x: Any, dims: Any = None) -> Any:
    if dims is None:
        dims = [d for d, s in enumerate(x.sizes) if s == 1]
    elif isinstance(dims, int):
        dims = [dims]
    dims = sorted({d % x.ndim for d in dims if x.ndim and x.sizes[d % x.ndim] == 1})
    sizes = tuple(s for d, s in enumerate(x.sizes) if d not in dims)

    def fn(idx: Index) -> Index:
        it = iter(idx)
        return tuple(sympy.Integer(0) if d in dims else next(it) for d in range(x.ndim))

    return L.view(x, sizes, fn, aten.squeeze.dims, (dims,))


@register(aten.slice.Tensor)
def _slice(
    L: Lowerer, x: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Any:
    dim = dim % x.ndim
    n = x.sizes[dim]
    if all(is_static(v) for v in (n, start or 0, end or 0)):
        start = 0 if start is None else (start + n if start < 0 else start)
        end = n if end is None else (end + n if end < 0 else end)
        start, end = min(max(start, 0), n), min(max(end, 0), n)
        length = max(0, (end - start + step - 1) // step)
    else:  # symbolic sizes: only bounds that hold for every size, or the trace's
        try:
            lo = 0 if start is None else _slice_bound(start, n)
            hi = n if end is None else _slice_bound(end, n)
            if not (lo == 0 or provably_nonneg(hi - lo)):
                raise TypeError(f"a slice [{lo}:{hi}] whose length's sign depends on the sizes")
        except TypeError:
            lo, hi = _traced_bounds(L, dim, n, start, end, step)
        start, end = lo, hi
        length = _slice_length(start, end, step)
    sizes = x.sizes[:dim] + (length,) + x.sizes[dim + 1 :]

    def fn(idx: Index) -> Index:
        return idx[:dim] + (start + step * idx[dim],) + idx[dim + 1 :]

    return L.view(x, sizes, fn, aten.slice.Tensor, (dim, start, end, step))


def _traced_bounds(L: Lowerer, dim: int, n: Any, start: Any, end: Any, step: int) -> Any:
    """A slice's clamped ``(start, end)`` where the sizes alone do not place its bounds in
    ``[0, n]`` (BERT's ``position_ids[:, :seq_len]`` over a buffer of 512 positions;
    Mistral's sliding window, ``[-4095:]`` of a sequence), taken from the trace: the way of
    clamping that gives the slice node's traced length (:func:`clamped_to`). The tracer
    made that length under its guards (``seq_len <= 512``); the program requires them
    (:attr:`Lowerer.requires`), since a graph of the same text may be traced under the
    other side of a guard. TypeError where none fits."""
    val = L._fx.meta.get("val") if L._fx.target is aten.slice.Tensor else None
    if isinstance(val, torch.Tensor):
        found = clamped_to(shape_of(val)[dim], n, start, end, step)
        if found is not None:
            lo, hi, needs = found
            L.requires.extend((e, 0) for e in needs)
            return lo, hi
    raise TypeError(
        f"a slice [{start}:{end}] over a dimension of size {n} clamps differently for "
        "different sizes"
    )


def clamped_to(
    length: Any,
    n: Any,
    start: Any,
    end: Any,
    step: int,
    start_ok: Callable[[Any], bool] = lambda lo: True,
) -> tuple[Any, Any, list[Any]] | None:
    """The way of clamping ``[start:end:step]`` into a dimension of ``n`` (:func:`_clamps`,
    each bound; a start ``start_ok`` takes) whose slice has ``length`` elements: ``(start,
    end, the conditions, each <= 0, where it is that way)``; None where no way has it."""
    for lo, lo_needs in _clamps(0 if start is None else start, n):
        if not start_ok(lo):
            continue
        for hi, hi_needs in _clamps(n if end is None else end, n):
            needs = [*lo_needs, *hi_needs]
            if not (lo == 0 or provably_nonneg(hi - lo)):
                needs.append(sympy.expand(lo - hi))  # (Swin's [1::2] of a size // 4)
            if sympy.expand(sympy.sympify(length) - _slice_length(lo, hi, step)) == 0:
                return lo, hi, needs
    return None


def _clamps(v: Any, n: Any) -> list[tuple[Any, list[Any]]]:
    """The ways Python may clamp slice bound ``v`` into ``[0, n]``: (the bound, the
    expressions that are each ``<= 0`` where it is that one). Those whose condition holds
    for no size are left out."""
    try:
        return [(_slice_bound(v, n), [])]
    except TypeError:
        pass
    if is_static(v) and v < 0:
        # Python's negative bound, counted from the end once: below 0 then, it clamps to 0
        v = v + n
        ways = [(v, [-v, v - n]), (0, [v]), (n, [n - v])]
    else:
        # a bound that is itself negative at a call counts from the end (ATen's slice): the
        # ways here hold it >= 0 (0 itself only where it is 0)
        ways = [(v, [-v, v - n]), (0, [v, -v]), (n, [n - v])]
    out = []
    for bound, needs in ways:
        needs = [sympy.expand(e) for e in needs if not provably_nonneg(-e)]
        if not any(is_static(e) and static(e) > 0 for e in needs):
            out.append((bound, needs))
    return out


def _slice_bound(v: Any, n: Any) -> Any:
    """A slice bound clamped into ``[0, n]`` as Python clamps it, where a size is symbolic:
    the bound for every size, or TypeError where that depends on the sizes."""
    if is_static(v) and v >= 2**62:  # "to the end" (sys.maxsize and kin)
        return n
    if is_static(v) and v == 0:  # a size is never negative
        return 0
    if is_static(v) and v < 0:
        v = static(v + n)
    if provably_nonneg(v) and provably_nonneg(n - v):
        return v
    if provably_nonneg(v - n):
        return n
    raise TypeError(
        f"a slice bound {v} over a dimension of size {n} clamps differently for different sizes"
    )


@register(aten.select.int)
def _select(L: Lowerer, x: Any, dim: int, index: int) -> Any:
    dim = dim % x.ndim
    index = index + x.sizes[dim] if index < 0 else index
    sizes = x.sizes[:dim] + x.sizes[dim + 1 :]
    return L.view(
        x,
        sizes,
        lambda idx: idx[:dim] + (sympy.Integer(index),) + idx[dim:],
        aten.select.int,
        (dim, index),
    )


@register(aten.split.Tensor, aten.split_with_sizes.default)
def _split(L: Lowerer, x: Any, size: Any, dim: int = 0) -> Any:
    dim = dim % x.ndim
    n = x.sizes[dim]
    sizes = (
        list(size)
        if isinstance(size, (list, tuple))
        else [min(size, n - s) for s in range(0, n, size)]
    )
    out, start = [], 0
    for s in sizes:
        out.append(_slice(L, x, dim, start, start + s))
        start += s
    return tuple(out)


@register(aten.unbind.int)
def _unbind(L: Lowerer, x: Any, dim: int = 0) -> Any:
    return tuple(_select(L, x, dim, i) for i in range(x.sizes[dim % x.ndim]))


@register(aten.as_strided.default)
def _as_strided(L: Lowerer, x: Any, sizes: Any, strides: Any, offset: Any = None) -> Any:
    if identity_restride(L._fx):
        return x  # the same elements at every index: any layout of x will do
    if x.storage is None:
        raise Unsupported("as_strided of a value that is not a strided buffer")
    base = x.storage
    layout = Layout(
        tuple(sizes),
        tuple(strides),
        base.layout.offset if offset is None else offset,
        x.dtype,
        base.layout.device,
    )
    L.views.add(L.origin)
    return StorageView(base.buffer, layout)

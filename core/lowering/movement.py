"""Lowerings that move data with computed indices: cat, pad, flip, gathers and scatters,
embedding, indexing; and convolution, a library call with the layout chosen here."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy
import torch

from ..adapters.torch_private import aten, prims
from ..ir.expr import Const, Expr, IndexValue, Op
from ..ir.graph import (
    Index,
    TensorValue,
)
from ..ir.index import MIN_SIZE, FloorDiv, Mod, is_static, static
from .helpers import bload, broadcast_shapes, from_the_end, index_in_range, indirect_loader
from .layouts import channels_last_strides, shape_of
from .lowerer import Lowerer, cast
from .optable import Unsupported, register
from .sizes import size_value
from .views import clamped_to, reshape_reindex


@register(aten.cat.default)
def _cat(L: Lowerer, xs: Any, dim: int = 0) -> Any:
    val = L.meta()
    dtype, sizes = val.dtype, shape_of(val)
    dim = dim % len(sizes)
    # an empty part adds nothing, and a load from it could only read outside it (the
    # legacy 1-D empty tensor may even have another rank)
    parts = [
        x
        for x in xs
        if isinstance(x, TensorValue)
        and not (x.ndim == 1 and x.sizes[0] == 0)
        and x.sizes[dim] != 0
    ]
    offsets, acc = [], 0
    for x in parts:
        offsets.append(acc)
        acc += x.sizes[dim]

    def body(idx: Index) -> Expr:
        i = idx[dim]
        out: Expr | None = None if parts else Const(0, dtype)  # no element to compute
        for x, off in reversed(list(zip(parts, offsets))):
            # (i >= 0: i - off goes at most off below zero)
            sub = idx[:dim] + (index_in_range(i, off, x.sizes[dim], off),) + idx[dim + 1 :]
            v = cast(x.load(sub), dtype)
            if out is None:
                out = v
            else:
                cond = Op(
                    "lt", (IndexValue(i), size_value(off + x.sizes[dim], torch.int64)), torch.bool
                )
                out = Op("where", (cond, v, out), dtype)
        return out

    return L.pointwise(sizes, dtype, body)


@register(aten.constant_pad_nd.default)
def _pad(L: Lowerer, x: Any, pad: Any, value: Any = 0) -> Any:
    val = L.meta()
    dtype, sizes = val.dtype, shape_of(val)
    pairs = [(pad[2 * k], pad[2 * k + 1]) for k in range(len(pad) // 2)]
    if 0 in x.sizes:  # nothing to read: every element is the padding value
        return L.pointwise(sizes, dtype, lambda idx: Const(value, dtype))

    def body(idx: Index) -> Expr:
        sub, conds = list(idx), []
        for k, (before, _after) in enumerate(pairs):
            d = len(sizes) - 1 - k
            n = x.sizes[d]
            i = idx[d]
            # (a negative ``before`` crops: i - before is never below zero)
            sub[d] = index_in_range(
                i, before, n, max(before, 0) if is_static(before) else abs(before)
            )
            iv = IndexValue(i - before) if before else IndexValue(i)
            ge = Op("ge", (iv, Const(0, torch.int64)), torch.bool)
            lt = Op("lt", (iv, size_value(n, torch.int64)), torch.bool)
            conds.append(Op("logical_and", (ge, lt), torch.bool))
        inside = conds[0]
        for cnd in conds[1:]:
            inside = Op("logical_and", (inside, cnd), torch.bool)
        return Op("where", (inside, cast(x.load(tuple(sub)), dtype), Const(value, dtype)), dtype)

    return L.pointwise(sizes, dtype, body)


@register(aten.convolution.default)
def _convolution(L: Lowerer, x: Any, weight: Any, bias: Any, *rest: Any) -> Any:
    """A library call; with the plugin's capabilities, on channels-last activations (the
    bias in the kernel that follows is a graph pass's: core/passes/convolution.py)."""
    return _conv_call(L, x, weight, bias, rest)


def _conv_call(L: Lowerer, x: Any, weight: Any, bias: Any, rest: tuple) -> Any:
    target = aten.convolution.default
    if L.channels_last and isinstance(x, TensorValue) and x.ndim == 4:
        x = L.require_layout(x, channels_last_strides(x.sizes))
        if isinstance(weight, TensorValue) and weight.ndim == 4:
            # a weight in another layout the library converts itself on every call (a
            # copy kernel and about 20 us of host work per convolution on an H100); a
            # copy here is one generated kernel, nothing for 1x1 and depthwise weights
            weight = L.require_layout(weight, channels_last_strides(weight.sizes))
        # the library answers channels-last inputs in channels-last; the wrapper checks
        # that at run time
        strides = channels_last_strides(shape_of(L.meta()))
        return L.extern(target, (x, weight, bias, *rest), {}, out_strides=[strides])
    return L.extern(target, (x, weight, bias, *rest), {})


@register(aten.convolution_backward.default)
def _convolution_backward(L: Lowerer, grad_output: Any, x: Any, weight: Any, *rest: Any) -> Any:
    """A library call. Where the graph runs channels-last, on channels-last operands (the
    library converts any other itself, a copy on every call), answering channels-last
    gradients: a convnet's gradients stay channels-last through its backward."""
    target = aten.convolution_backward.default
    tensors = (grad_output, x, weight)
    if L.channels_last and all(isinstance(t, TensorValue) and t.ndim == 4 for t in tensors):
        grad_output, x, weight = (
            L.require_layout(t, channels_last_strides(t.sizes)) for t in tensors
        )
    return L.extern(target, (grad_output, x, weight, *rest), {})


@register(aten.flip.default, prims.rev.default)
def _flip(L: Lowerer, x: Any, dims: Any) -> Any:
    """The elements in reverse order along ``dims``: a pointwise node reading ``x`` at
    ``n - 1 - i`` (it fuses with its producer and readers)."""
    sizes = tuple(x.sizes)
    rev = {int(d) % len(sizes) for d in dims} if sizes else set()

    def body(idx: Index) -> Expr:
        return x.load(tuple(sizes[d] - 1 - i if d in rev else i for d, i in enumerate(idx)))

    return L.pointwise(sizes, x.dtype, body)


#: ``x[idx] += values`` into a table of at most this many rows is a product with the indices'
#: one-hot matrix (T5's relative-position buckets: 32 rows, 512x512 indices); the one-hot
#: matrix holds at most ONE_HOT_MAX_ELEMENTS elements.
ONE_HOT_MAX_ROWS = 64
ONE_HOT_MAX_ELEMENTS = 1 << 25


@register(aten.index_put.default)
def _index_put(L: Lowerer, x: Any, indices: Any, values: Any, accumulate: bool = False) -> Any:
    """``x[idx] += values`` over the first dim (the embedding backward), deterministically:
    the same inputs give the same bits in every run and process (issue 36).

    ATen's ``index_add`` (atomic adds on a GPU: the order of the additions, and so the
    rounding, changes from run to run) is not used. A table of at most
    :data:`ONE_HOT_MAX_ROWS` rows, where many indices land on each row, is
    ``x + one_hot(idx).T @ values``: a library product, computed in float64 for float32
    values and in float32 for 16-bit ones (exact one-hot and value operands: a TF32 product
    rounds neither; each row's sum is rounded once). Any other accumulation is ATen's
    ``index_put`` (sort, then each row summed in index order), or its ``index_add`` where
    the plugin declares that one adds in index order (``Preferences.ordered_index_add``:
    :func:`_through_index_add`), run in place over a temporary it accumulates into
    (``IN_PLACE_FORMS``)."""
    target = aten.index_put.default
    idx = indices[0] if isinstance(indices, (list, tuple)) and len(indices) == 1 else None
    # one index tensor, and a row of values per index
    rows = (
        accumulate
        and isinstance(idx, TensorValue)
        and isinstance(values, TensorValue)
        and idx.dtype in (torch.int64, torch.int32)
        and tuple(values.sizes) == tuple(idx.sizes) + tuple(x.sizes[1:])
    )
    small = (
        rows
        and x.ndim == 2
        and x.dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16)
        and is_static(x.sizes[0])
        and x.sizes[0] <= ONE_HOT_MAX_ROWS
        and all(is_static(s) for s in idx.sizes)
        and x.sizes[0] * math.prod(idx.sizes) <= ONE_HOT_MAX_ELEMENTS
    )
    if not small:
        if rows and L.ctx.preferences.ordered_index_add:
            return _through_index_add(L, x, idx, values)
        return L.extern(target, (x, indices, values, accumulate), {})
    n, width = x.sizes
    flat_n, at_idx, at_val = _flat_rows(idx, values, (width,))
    acc = torch.float64 if x.dtype in (torch.float32, torch.float64) else torch.float32
    # an index out of range fails, as in eager: each one-hot element also reads the
    # (small) table at its index through a checked indirect load
    check = indirect_loader(L, L.realize(x), [n, width], wrap=True)

    def hot(i: Index) -> Expr:
        row, j = i
        v = cast(idx.load(at_idx((j,))), torch.int64)
        probe = cast(check([v, sympy.Integer(0)]), acc)
        v = from_the_end(v, n)  # as in index_put
        hit = Op("eq", (v, IndexValue(row)), torch.bool)
        one = Op("where", (hit, Const(1, acc), Const(0, acc)), acc)
        return Op("where", (Op("isnan", (probe,), torch.bool), one, one), acc)

    one_hot = L.pointwise((n, flat_n), acc, hot)
    vals = L.pointwise((flat_n, width), acc, lambda i: cast(values.load(at_val(i)), acc))
    sums = L.extern(aten.mm.default, (one_hot, vals), {}, out_dtype=acc)
    dtype = L.meta().dtype

    def body(i: Index) -> Expr:
        s = Op("add", (cast(x.load(i), acc), sums.load(i)), acc)
        return cast(s, dtype)

    return L.pointwise((n, width), dtype, body)


def _flat_rows(idx: Any, values: Any, rest: tuple) -> tuple[Any, Callable, Callable]:
    """The indices and their rows of values flattened: ``(n, at_idx, at_val)``, ``at_idx``
    mapping an index of ``(n,)`` into ``idx`` and ``at_val`` one of ``(n, *rest)`` into
    ``values``."""
    flat_n = math.prod(idx.sizes)
    at_idx = reshape_reindex(tuple(idx.sizes), (flat_n,))
    return flat_n, at_idx, reshape_reindex(tuple(values.sizes), (flat_n, *rest))


def _through_index_add(L: Lowerer, x: Any, idx: Any, values: Any) -> Any:
    """``x[idx] += values`` (a row of values per index) as ATen's ``index_add`` over the
    flattened indices (wrapped as index_put wraps them: -1 is the last row) and values,
    for a plugin whose device's index_add adds in index order
    (``Preferences.ordered_index_add``: the same bits in every run). 16-bit values add in
    float32, as ATen's index_put does."""
    n, rest = x.sizes[0], tuple(x.sizes[1:])
    flat_n, at_idx, at_val = _flat_rows(idx, values, rest)

    def row(i: Index) -> Expr:
        return from_the_end(cast(idx.load(at_idx(i)), torch.int64), n)

    rows = L.pointwise((flat_n,), torch.int64, row)
    # 16-bit values are added in float32 and rounded once (index_add itself would round after
    # every add: a row of many indices would drift)
    dtype = L.meta().dtype
    acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    vals = L.pointwise((flat_n, *rest), acc, lambda i: cast(values.load(at_val(i)), acc))
    if acc == dtype:
        return L.extern(aten.index_add.default, (x, 0, rows, vals), {})
    wide = L.pointwise(tuple(x.sizes), acc, lambda i: cast(x.load(i), acc))
    sums = L.extern(aten.index_add.default, (wide, 0, rows, vals), {}, out_dtype=acc)
    return L.pointwise(tuple(x.sizes), dtype, lambda i: cast(sums.load(i), dtype))


@register(aten.repeat.default)
def _repeat(L: Lowerer, x: Any, repeats: Any) -> Any:
    """Tiling: each output index reads ``x`` at the index modulo ``x``'s size."""
    val = L.meta()
    sizes = shape_of(val)
    lead = len(sizes) - x.ndim  # repeat may add leading dims

    def body(idx: Index) -> Expr:
        at = tuple(Mod(i, n) if n != s else i for i, n, s in zip(idx[lead:], x.sizes, sizes[lead:]))
        return cast(x.load(at), val.dtype)

    return L.pointwise(sizes, val.dtype, body)


def _scatter_start(L: Lowerer, n: Any, m: Any, start: int, end: Any, step: int) -> int:
    """slice_scatter's start where the sizes alone do not clamp it to a number below
    ``MIN_SIZE`` (the backward of Mistral's sliding window, ``[-4095:]``): the way of
    clamping that makes the slice ``src``'s length ``m``, required of the sizes as the
    forward's slice is (:func:`.views._traced_bounds`). TypeError where none does."""
    found = clamped_to(
        m, n, start, end, step, start_ok=lambda lo: is_static(lo) and 0 <= static(lo) < MIN_SIZE
    )
    if found is None:
        raise TypeError(f"slice_scatter from {start} over symbolic sizes {n}, {m}")
    lo, _hi, needs = found
    L.requires.extend((e, 0) for e in needs)
    return static(lo)


@register(aten.slice_scatter.default)
def _slice_scatter(
    L: Lowerer, x: Any, src: Any, dim: int = 0, start: Any = None, end: Any = None, step: int = 1
) -> Any:
    """``x`` with ``src`` written over ``x[start:end:step]`` along ``dim``: pointwise (the
    backward of slicing and of ``cat``; rotary embeddings have eight per layer)."""
    val = L.meta()
    dim = dim % max(x.ndim, 1)
    n = x.sizes[dim]
    lo = 0 if start is None else int(start)
    m = src.sizes[dim]
    step = int(step)
    if is_static(n):
        lo = max(0, min(n, lo + n if lo < 0 else lo))
    if not (is_static(n) and is_static(m)) and not 0 <= lo < MIN_SIZE:
        # (a symbolic size is >= MIN_SIZE: a start below it is within it)
        lo = _scatter_start(L, n, m, lo, end, step)
    dtype = val.dtype
    width = Const(m * step, torch.int64) if is_static(m) else IndexValue(m * step)

    def body(idx: Index) -> Expr:
        i = idx[dim]
        off = IndexValue(i - lo)
        inside = Op(
            "logical_and",
            (
                Op("ge", (off, Const(0, torch.int64)), torch.bool),
                Op("lt", (off, width), torch.bool),
            ),
            torch.bool,
        )
        if step != 1:
            on = Op(
                "eq",
                (
                    Op("remainder", (off, Const(step, torch.int64)), torch.int64),
                    Const(0, torch.int64),
                ),
                torch.bool,
            )
            inside = Op("logical_and", (inside, on), torch.bool)
        at = list(idx)
        # in bounds wherever it is evaluated: clamp the position into src
        if m == 0:
            return cast(x.load(idx), dtype)
        # a multiple of m that keeps the numerator >= 0 (symbolic m: lo < 2 <= m * step)
        k = m * (lo // (m * step) + 1) if is_static(m) else m
        at[dim] = Mod(FloorDiv(i - lo + k * step, step), m)
        return Op(
            "where", (inside, cast(src.load(tuple(at)), dtype), cast(x.load(idx), dtype)), dtype
        )

    return L.pointwise(shape_of(val), dtype, body)


@register(aten.select_scatter.default)
def _select_scatter(L: Lowerer, x: Any, src: Any, dim: int, index: int) -> Any:
    val = L.meta()
    dim = dim % max(x.ndim, 1)
    n = x.sizes[dim]
    index = int(index) + n if int(index) < 0 else int(index)
    dtype = val.dtype

    def body(idx: Index) -> Expr:
        hit = Op("eq", (IndexValue(idx[dim]), Const(index, torch.int64)), torch.bool)
        at = tuple(i for d, i in enumerate(idx) if d != dim)
        return Op("where", (hit, cast(src.load(at), dtype), cast(x.load(idx), dtype)), dtype)

    return L.pointwise(shape_of(val), dtype, body)


#: A scatter of at most this many indices per row is pointwise (``topk``'s backward: k)
SCATTER_MAX_PER_ROW = 16


@register(aten.scatter.value, aten.scatter.src)
def _scatter(L: Lowerer, x: Any, dim: int, index: Any, value: Any) -> Any:
    """A few indices per row (``index.size(dim) <= SCATTER_MAX_PER_ROW``, the other dims as
    ``x``'s): pointwise, ``out[i] = value[i, dim -> m]`` for the last ``m`` whose index is
    ``i[dim]``, else ``x[i]`` (the backward of a cross-entropy loss: one index; of ``topk``:
    k). Where two indices of a row are equal, the last wins, as on eager's CPU (a GPU's
    order is undefined). An index out of range still fails, as in eager: each written arm
    also reads ``x`` at it through a checked indirect load. Other scatters stay library
    calls."""
    val = L.meta()
    dim = dim % max(x.ndim, 1)
    per_row = index.sizes[dim] if isinstance(index, TensorValue) and index.ndim == x.ndim else None
    if (
        per_row is None
        or not is_static(per_row)
        or not 1 <= static(per_row) <= SCATTER_MAX_PER_ROW
        or any(a != b for d, (a, b) in enumerate(zip(index.sizes, x.sizes)) if d != dim)
        or (isinstance(value, TensorValue) and tuple(value.sizes) != tuple(index.sizes))
    ):
        raise Unsupported(
            "a scatter with many indices per row, or an index narrower than its target"
        )
    dtype = val.dtype
    check = indirect_loader(L, x, list(x.sizes))

    def body(idx: Index) -> Expr:
        out = cast(x.load(idx), dtype)
        for m in range(static(per_row)):  # the last index outermost: it wins
            row = tuple(sympy.Integer(m) if d == dim else i for d, i in enumerate(idx))
            target = cast(index.load(row), torch.int64)
            hit = Op("eq", (IndexValue(idx[dim]), target), torch.bool)
            v = (
                cast(value.load(row), dtype)
                if isinstance(value, TensorValue)
                else Const(value, dtype)
            )
            parts = list(idx)
            parts[dim] = target
            probe = cast(check(parts), torch.float32)  # asserts 0 <= target < size
            v = Op("where", (Op("isnan", (probe,), torch.bool), v, v), dtype)
            out = Op("where", (hit, v, out), dtype)
        return out

    return L.pointwise(shape_of(val), dtype, body)


@register(aten.embedding.default)
def _embedding(L: Lowerer, weight: Any, indices: Any, *rest: Any) -> Any:
    val = L.meta()
    sizes, dtype = shape_of(val), val.dtype
    load = indirect_loader(L, weight, list(weight.sizes))
    k = indices.ndim

    def body(idx: Index) -> Expr:
        return load([indices.load(idx[:k]), idx[k]])

    return L.pointwise(sizes, dtype, body)


@register(aten.index_select.default)
def _index_select(L: Lowerer, x: Any, dim: int, index: Any) -> Any:
    val = L.meta()
    if x.ndim == 0 or not isinstance(index, TensorValue) or index.ndim != 1:
        raise Unsupported("index_select of a 0-d tensor or with a 0-d index")
    dim = dim % max(x.ndim, 1)
    load = indirect_loader(L, x, list(x.sizes))

    def body(idx: Index) -> Expr:
        parts = list(idx)
        parts[dim] = index.load((idx[dim],))
        return load(parts)

    return L.pointwise(shape_of(val), val.dtype, body)


@register(aten.gather.default)
def _gather(L: Lowerer, x: Any, dim: int, index: Any, *, sparse_grad: bool = False) -> Any:
    val = L.meta()
    dim = dim % max(x.ndim, 1)
    load = indirect_loader(L, x, list(x.sizes))

    def body(idx: Index) -> Expr:
        parts = list(idx)
        parts[dim] = index.load(idx)
        return load(parts)

    return L.pointwise(shape_of(val), val.dtype, body)


@register(aten.index.Tensor)
def _index(L: Lowerer, x: Any, indices: Any) -> Any:
    val = L.meta()
    sizes = shape_of(val)
    idx_pos = [k for k, t in enumerate(indices) if t is not None]
    if not idx_pos:
        raise Unsupported("index with no tensors")
    if any(getattr(indices[k], "dtype", None) == torch.bool for k in idx_pos):
        raise Unsupported("boolean mask indexing (data-dependent shape)")
    tensors = [indices[k] for k in idx_pos]
    bshape = broadcast_shapes(*[t.sizes for t in tensors])
    adjacent = idx_pos == list(range(idx_pos[0], idx_pos[-1] + 1))
    front = 0 if not adjacent else idx_pos[0]
    nb = len(bshape)
    load = indirect_loader(L, x, list(x.sizes), wrap=True)

    def body(idx: Index) -> Expr:
        bidx = idx[front : front + nb]
        rest = list(idx[:front]) + list(idx[front + nb :])
        parts: list[Any] = []
        it = iter(rest)
        for k in range(x.ndim):
            if k in idx_pos:
                parts.append(bload(indices[k], bshape, bidx, torch.int64))
            else:
                parts.append(next(it))
        return load(parts)

    return L.pointwise(sizes, val.dtype, body)

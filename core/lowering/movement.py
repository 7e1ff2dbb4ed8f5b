"""Lowerings that move data with computed indices: cat, pad, pooling, gathers and
scatters, embedding, indexing; and convolution, a library call with the layout chosen
here."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import sympy
import torch

from ..adapters.torch_private import aten, prims
from ..ir.expr import Const, Expr, IndexValue, Load, Op
from ..ir.graph import (
    ComputedView,
    Index,
    TensorValue,
)
from ..ir.index import MIN_SIZE, FloorDiv, Mod, is_static, static, var
from .helpers import bload, broadcast_shapes
from .layouts import channels_last_strides, shape_of
from .lowerer import Lowerer, cast, upcast
from .optable import Unsupported, register
from .pool_offsets import OFFSETS, OFFSETS_BACKWARD
from .sizes import size_value
from .views import clamped_to, reshape_reindex


def _safe(i: sympy.Expr, lo: int, n: int, reach: int) -> sympy.Expr:
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
            sub = idx[:dim] + (_safe(i, off, x.sizes[dim], off),) + idx[dim + 1 :]
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
            sub[d] = _safe(i, before, n, max(before, 0) if is_static(before) else abs(before))
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


@register(aten.max_pool2d_with_indices.default)
def _max_pool2d(
    L: Lowerer,
    x: Any,
    kernel_size: Any,
    stride: Any = (),
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
) -> Any:
    """Max over each window, unrolled: a pointwise node that fuses with what computes
    its input (BatchNorm + ReLU in a ResNet stem). The indices are a second node, stored
    only if something reads them (training). ATen's semantics: positions outside the
    input are skipped, the first maximum wins, NaN beats everything."""
    if _pair(dilation, 1) != (1, 1):
        raise Unsupported("max pooling with dilation")
    return _max_pool(L, x, kernel_size, stride, padding, offsets=False)


@register(OFFSETS)
def _max_pool2d_offsets(
    L: Lowerer, x: Any, kernel_size: Any, stride: Any, padding: Any, ceil_mode: bool
) -> Any:
    """As ``max_pool2d_with_indices``, each maximum's position given as its offset in the
    window (``a * kw + b``, int8: :mod:`.pool_offsets`)."""
    return _max_pool(L, x, kernel_size, stride, padding, offsets=True)


def _max_pool(
    L: Lowerer, x: Any, kernel_size: Any, stride: Any, padding: Any, offsets: bool
) -> Any:
    kh, kw = _pair(kernel_size, None)
    sh, sw = _pair(stride, (kh, kw))
    ph, pw = _pair(padding, 0)
    if kh * kw > 64 or not x.dtype.is_floating_point:
        raise Unsupported("max pooling of windows over 64 or of integers")
    out, _ = L.meta()
    sizes = shape_of(out)
    h, w = x.sizes[-2:]
    dtype = x.dtype
    acc = upcast(dtype)
    pos_dtype = torch.int8 if offsets else torch.int64

    def window(idx: Index) -> list[tuple[Expr | None, Expr, Expr]]:
        """(inside, value, position) per window element, in ATen's scan order: the
        position in the input plane, or in the window (``offsets``)."""
        *pre, i, j = idx
        items = []
        for a in range(kh):
            for b in range(kw):
                hi, wi = i * sh - ph + a, j * sw - pw + b
                conds = []
                for v, n, lo in ((hi, h, ph - a), (wi, w, pw - b)):
                    iv = IndexValue(v)
                    if lo > 0:  # can fall below 0
                        conds.append(Op("ge", (iv, Const(0, torch.int64)), torch.bool))
                    conds.append(Op("lt", (iv, size_value(n, torch.int64)), torch.bool))
                inside = conds[0]
                for c in conds[1:]:
                    inside = Op("logical_and", (inside, c), torch.bool)
                at = (*pre, _safe(hi, 0, h, ph), _safe(wi, 0, w, pw))
                pos = Const(a * kw + b, pos_dtype) if offsets else IndexValue(hi * w + wi)
                items.append((inside, cast(x.load(at), acc), pos))
        return items

    def scan(idx: Index) -> tuple[Expr, Expr]:
        items = window(idx)
        # ATen starts at the window's first position inside the input, value -inf
        pos: Expr = Const(0, pos_dtype)
        for inside, _v, p in reversed(items):
            pos = Op("where", (inside, p, pos), pos_dtype)
        best: Expr = Const(float("-inf"), acc)
        for inside, v, p in items:
            take = Op(
                "logical_or",
                (Op("gt", (v, best), torch.bool), Op("isnan", (v,), torch.bool)),
                torch.bool,
            )
            take = Op("logical_and", (inside, take), torch.bool)
            best = Op("where", (take, v, best), acc)
            pos = Op("where", (take, p, pos), pos_dtype)
        return best, pos

    # outputs that leave the graph in eager's strides (channels-last in, channels-last out)
    values = L.pointwise(
        sizes,
        dtype,
        lambda idx: cast(scan(idx)[0], dtype),
        layout=L.output_layout(0, sizes, dtype),
    )
    positions = L.pointwise(
        sizes,
        pos_dtype,
        lambda idx: scan(idx)[1],
        layout=L.output_layout(1, sizes, pos_dtype),
    )
    return values, positions


#: A max-pooling gradient in generated code reads at most this many windows per input
#: element (Inductor's bound); past it, the library call.
MAX_POOL_BACKWARD_WINDOWS = 25


@register(aten.max_pool2d_with_indices_backward.default)
def _max_pool2d_backward(
    L: Lowerer,
    grad: Any,
    x: Any,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: bool,
    indices: Any,
) -> Any:
    """Each input element's gradient gathered from the windows that can hold it: a
    pointwise node, which fuses with what reads it (a ResNet's residual sum, BatchNorm's
    backward). No atomics: the sum runs over the windows in ATen's order (rows, then
    columns), as ATen's CUDA kernel adds them, so the bits are the library's. Dilation
    and windows that overlap more than :data:`MAX_POOL_BACKWARD_WINDOWS` times stay a
    library call."""
    dilated = _pair(dilation, 1) != (1, 1)
    out = None if dilated else _pool_backward(L, grad, kernel_size, stride, padding, indices, False)
    if out is None:
        args = (grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices)
        return L.extern(aten.max_pool2d_with_indices_backward.default, args, {})
    return out


@register(OFFSETS_BACKWARD)
def _max_pool2d_offsets_backward(
    L: Lowerer,
    grad: Any,
    x: Any,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    ceil_mode: bool,
    offsets: Any,
) -> Any:
    """As ``max_pool2d_with_indices_backward``, from the maxima's offsets in their windows
    (:mod:`.pool_offsets`): a window holds the element where its offset is the element's."""
    out = _pool_backward(L, grad, kernel_size, stride, padding, offsets, True)
    if out is None:
        args = (grad, x, kernel_size, stride, padding, ceil_mode, offsets)
        return L.extern(OFFSETS_BACKWARD, args, {})
    return out


def _pool_backward(
    L: Lowerer,
    grad: Any,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    positions: Any,
    offsets: bool,
) -> Any:
    """The gradient of max pooling as a pointwise node (None: too many windows hold an
    element); ``positions``: the maxima's indices in the input plane, or their offsets in
    the window (``offsets``)."""
    kh, kw = _pair(kernel_size, None)
    sh, sw = _pair(stride, (kh, kw))
    ph, pw = _pair(padding, 0)
    nh, nw = -(-kh // sh), -(-kw // sw)  # windows holding one element, per dim, at most
    if (
        nh * nw > MAX_POOL_BACKWARD_WINDOWS
        or not isinstance(grad, TensorValue)
        or not isinstance(positions, TensorValue)
    ):
        return None
    val = L.meta()
    dtype, sizes = val.dtype, shape_of(val)
    w = sizes[-1]
    oh, ow = grad.sizes[-2:]
    acc = upcast(dtype)
    i64 = torch.int64
    load_grad = _indirect(L, grad, list(grad.sizes))
    load_position = _indirect(L, positions, list(positions.sizes))

    def span(i: Any, k: int, s: int, p: int, n_out: Any) -> tuple[Expr, Expr]:
        """The first and one past the last window (along one dim) holding position i."""
        at = IndexValue(i + p)
        first = Op(
            "add",
            (
                Op("floordiv", (Op("sub", (at, Const(k, i64)), i64), Const(s, i64)), i64),
                Const(1, i64),
            ),
            i64,
        )
        first = Op("maximum", (first, Const(0, i64)), i64)
        end = Op("add", (Op("floordiv", (at, Const(s, i64)), i64), Const(1, i64)), i64)
        return first, Op("minimum", (end, size_value(n_out, i64)), i64)

    def in_window(i: Any, p: Expr, s: int, pad: int) -> Expr:
        """Where position ``i`` falls in window ``p`` (along one dim): ``i + pad - p * s``."""
        return Op("sub", (IndexValue(i + pad), Op("mul", (p, Const(s, i64)), i64)), i64)

    def body(idx: Index) -> Expr:
        *pre, i, j = idx
        h0, h1 = span(i, kh, sh, ph, oh)
        w0, w1 = span(j, kw, sw, pw, ow)
        me = IndexValue(i * w + j)
        total: Expr = Const(0.0, acc)
        for a in range(nh):
            for b in range(nw):
                p = Op("add", (h0, Const(a, i64)), i64)
                q = Op("add", (w0, Const(b, i64)), i64)
                inside = Op(
                    "logical_and",
                    (Op("lt", (p, h1), torch.bool), Op("lt", (q, w1), torch.bool)),
                    torch.bool,
                )
                # in range even where no window is left (the load is then not used)
                pc = Op("minimum", (p, Op("sub", (h1, Const(1, i64)), i64)), i64)
                qc = Op("minimum", (q, Op("sub", (w1, Const(1, i64)), i64)), i64)
                at = [*pre, pc, qc]
                if offsets:  # (the element's row in window p) * kw + its column in window q
                    rows = Op("mul", (in_window(i, p, sh, ph), Const(kw, i64)), i64)
                    mine: Expr = Op("add", (rows, in_window(j, q, sw, pw)), i64)
                else:
                    mine = me
                hit = Op("eq", (cast(load_position(at), i64), mine), torch.bool)
                take = Op("logical_and", (inside, hit), torch.bool)
                g = cast(load_grad(at), acc)
                total = Op("add", (total, Op("where", (take, g, Const(0.0, acc)), acc)), acc)
        return cast(total, dtype)

    return L.pointwise(sizes, dtype, body)


@register(aten.flip.default, prims.rev.default)
def _flip(L: Lowerer, x: Any, dims: Any) -> Any:
    """The elements in reverse order along ``dims``: a pointwise node reading ``x`` at
    ``n - 1 - i`` (it fuses with its producer and readers)."""
    sizes = tuple(x.sizes)
    rev = {int(d) % len(sizes) for d in dims} if sizes else set()

    def body(idx: Index) -> Expr:
        return x.load(tuple(sizes[d] - 1 - i if d in rev else i for d, i in enumerate(idx)))

    return L.pointwise(sizes, x.dtype, body)


def _pair(v: Any, default: Any) -> tuple[int, int]:
    """A pooling op's kernel, stride, padding or dilation argument as (rows, columns)."""
    v = default if v is None or (isinstance(v, (list, tuple)) and len(v) == 0) else v
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (int(v[0]), int(v[-1]))


@register(aten._adaptive_avg_pool2d.default)
def _adaptive_avg_pool2d(L: Lowerer, x: Any, output_size: Any) -> Any:
    """Mean over equal windows (the common case: global pooling): a reduction that fuses
    with what computes its input. Uneven windows stay a library call."""
    oh, ow = (int(s) for s in output_size)
    h, w = x.sizes[-2:]
    if oh <= 0 or ow <= 0 or h % oh or w % ow or not x.dtype.is_floating_point:
        # a library call on purpose (as a convolution is), not an op-level fallback
        return L.extern(aten._adaptive_avg_pool2d.default, (x, list(output_size)), {})
    kh, kw = h // oh, w // ow
    lead = tuple(x.sizes[:-2])
    dtype = x.dtype
    acc = upcast(dtype)

    def body(idx: Index, ridx: Index) -> Expr:
        *pre, i, j = idx
        at = (*pre, i * kh + ridx[0], j * kw + ridx[1])
        return cast(x.load(at), acc)

    total = L.reduction(lead + (oh, ow), (kh, kw), "sum", acc, body)
    n = kh * kw
    return L.pointwise(
        lead + (oh, ow),
        dtype,
        lambda idx: cast(Op("truediv", (total.load(idx), Const(float(n), acc)), acc), dtype),
    )


def _from_the_end(v: Expr, n: Any) -> Expr:
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


def _indirect(L: Lowerer, x: TensorValue, extents: list[int], wrap: bool = False) -> Callable:
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
                    v = _from_the_end(v, n)
                binds.append((sym, v, n))
                full.append(sym)
            else:
                full.append(part)
        index = tuple(full) if whole else src.layout.linear(tuple(full))
        return Load(src.buffer, index, src.dtype, tuple(binds))

    return load


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
    check = _indirect(L, L.realize(x), [n, width], wrap=True)

    def hot(i: Index) -> Expr:
        row, j = i
        v = cast(idx.load(at_idx((j,))), torch.int64)
        probe = cast(check([v, sympy.Integer(0)]), acc)
        v = _from_the_end(v, n)  # as in index_put
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
        return _from_the_end(cast(idx.load(at_idx(i)), torch.int64), n)

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
    check = _indirect(L, x, list(x.sizes))

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
    load = _indirect(L, weight, list(weight.sizes))
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
    load = _indirect(L, x, list(x.sizes))

    def body(idx: Index) -> Expr:
        parts = list(idx)
        parts[dim] = index.load((idx[dim],))
        return load(parts)

    return L.pointwise(shape_of(val), val.dtype, body)


@register(aten.gather.default)
def _gather(L: Lowerer, x: Any, dim: int, index: Any, *, sparse_grad: bool = False) -> Any:
    val = L.meta()
    dim = dim % max(x.ndim, 1)
    load = _indirect(L, x, list(x.sizes))

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
    load = _indirect(L, x, list(x.sizes), wrap=True)

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

"""Lowerings of pooling: max pooling's values with its indices or window offsets
(:mod:`.pool_offsets`), its gradient, and adaptive average pooling over equal windows."""

from __future__ import annotations

from typing import Any

import torch

from ..adapters.torch_private import aten
from ..ir.expr import Const, Expr, IndexValue, Op
from ..ir.graph import Index, TensorValue
from .helpers import index_in_range, indirect_loader
from .layouts import shape_of
from .lowerer import Lowerer, cast, upcast
from .optable import Unsupported, register
from .pool_offsets import OFFSETS, OFFSETS_BACKWARD
from .sizes import size_value


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
                at = (*pre, index_in_range(hi, 0, h, ph), index_in_range(wi, 0, w, pw))
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
    load_grad = indirect_loader(L, grad, list(grad.sizes))
    load_position = indirect_loader(L, positions, list(positions.sizes))

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

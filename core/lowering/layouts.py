"""Layouts for lowering: shapes and strides of traced values, channels-last, and views.

Which strides a node is stored in, whether a graph runs channels-last around its
convolutions, and the strided layout a view op gives (by its meta kernel, or computed
where sizes are symbolic). Nothing here builds IR: :class:`.lowerer.Lowerer` and the
op lowerings ask.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.fx

from sdk.plugin import CompileContext

from ..adapters.torch_private import aten, fresh_result, real_mode, sym_size
from ..ir.expr import Expr, Load
from ..ir.graph import (
    ComputedView,
    ExternNode,
    StorageView,
    TensorValue,
    contiguous_strides,
)
from ..ir.index import FloorDiv, is_static, size_hint, static
from ..ir.kernel import Layout


def shape_of(t: Any) -> tuple[Any, ...]:
    """A traced tensor's sizes: ints, or sympy expressions where they are symbolic."""
    return tuple(sym_size(s) for s in t.shape)


def strides_of(t: Any) -> tuple[Any, ...]:
    return tuple(sym_size(s) for s in t.stride())


def _loads(e: Expr) -> list[Load]:
    from ..ir.expr import loads

    return loads(e)


def _dense(sizes: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Strides that cover exactly numel elements (a permutation of contiguous)."""
    dims = [(st, sz) for st, sz in zip(strides, sizes) if sz != 1]
    expect: Any = 1
    while dims:  # the dim whose stride is the elements so far (symbolic strides too)
        hit = next((d for d in dims if sympy.expand(d[0] - expect) == 0), None)
        if hit is None:
            return False
        dims.remove(hit)
        expect = expect * hit[1]
    return True


def same_strides(sizes: tuple[int, ...], a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Equal strides on every dim of more than one element (the others have none that
    matters)."""
    return all(x == y for x, y, n in zip(a, b, sizes) if n != 1)


def channels_last_strides(sizes: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of a 4-d (N, C, H, W) tensor stored as N, H, W, C."""
    _, c, h, w = (static(s) for s in sizes)
    c, h, w = (max(x, 1) if isinstance(x, int) else x for x in (c, h, w))
    return (h * w * c, 1, w * c, c)


def is_channels_last(layout: Layout | None) -> bool:
    """A dense 4-d layout whose channels are innermost (and not also contiguous)."""
    if layout is None or len(layout.sizes) != 4 or layout.sizes[1] == 1:
        return False
    want = channels_last_strides(layout.sizes)
    return same_strides(layout.sizes, layout.strides, want) and not layout.is_contiguous()


def _linear_weights(terms: list[tuple[Any, Any]], vars: tuple[sympy.Symbol, ...]) -> list | None:
    """How far ``sum(expr * stride)`` moves per step of each of ``vars``, where every expr
    is linear in them (None where one is not)."""
    weight: dict[sympy.Symbol, Any] = dict.fromkeys(vars, 0)
    for expr, stride in terms:
        expr = sympy.sympify(expr)
        for term, coeff in expr.as_coefficients_dict().items():
            if term in weight:
                weight[term] += coeff * stride
            elif term.free_symbols & weight.keys():
                return None
    return [weight[v] for v in vars]


def _following_strides(
    sizes: tuple[Any, ...],
    value: Expr,
    vars: tuple[sympy.Symbol, ...],
    layouts: dict[str, Layout],
) -> tuple[Any, ...] | None:
    """Dense strides for a node computing ``value`` over ``sizes`` (in a graph whose
    convolutions run channels-last) that follow the memory of the first buffer it reads
    whole: its dims ordered as that buffer's memory steps through them. A node over
    channels-last activations is stored channels-last; one over their permuted view
    ``(N, H, W, C)`` (a ConvNeXt block's LayerNorm) contiguous, where channels-last strides
    would make the reshape after it a copy; a residual added to such a view channels-last
    again. Else channels-last where it reads a channels-last buffer at all, None where not."""
    if len(vars) != len(sizes):
        return None
    moving = [k for k, n in enumerate(sizes) if n != 1]
    reads_channels_last = False
    for ld in _loads(value):
        lay = layouts.get(ld.buffer)
        if lay is None:
            continue
        reads_channels_last = reads_channels_last or is_channels_last(lay)
        if isinstance(ld.index, tuple):  # per dim of the buffer
            if len(ld.index) != len(lay.strides):
                continue
            terms = list(zip(ld.index, lay.strides))
        else:  # a strided view's load: already the offset in the buffer
            terms = [(ld.index, 1)]
        weights = _linear_weights(terms, vars)
        if weights is None:
            continue  # not linear in the node's indices (a reshape's division): no order
        if not all(is_static(weights[k]) and int(weights[k]) > 0 for k in moving):
            continue  # broadcast along a dim, or symbolic: not a whole read
        if len({int(weights[k]) for k in moving}) != len(moving):
            continue
        key = {k: int(weights[k]) if k in moving else 0 for k in range(len(sizes))}
        strides: list[Any] = [0] * len(sizes)
        step: Any = 1
        for k in sorted(range(len(sizes)), key=lambda k: (key[k], -k)):  # innermost first
            strides[k] = step
            step = static(step * sizes[k])
        return tuple(strides)
    return channels_last_strides(sizes) if reads_channels_last else None


#: Inductor's measured channels-last speed-up per convolution kind (inference;
#: torch/_inductor/graph.py decide_layout_opt): < 1 is faster in channels-last.
_CL_MULTIPLIER = {"grouped": 1.358, "small": 0.783, "in_out": 0.725, "default": 0.823}


#: Ops whose result depends on their input's strides: as_strided reads the storage at the
#: trace's offsets, so it is only right on a buffer laid out as in the trace.
_STRIDE_ADDRESSED = {
    aten.as_strided.default,
    aten.as_strided_.default,
    aten.as_strided_scatter.default,
}


def identity_restride(n: torch.fx.Node | None) -> bool:
    """An ``as_strided`` whose result holds its input's element at every index in the trace:
    the same sizes, the same storage offset, and the same strides on every dim of more than
    one element. Meta kernels emit these to restride a result whose size-1 dims make the
    strides meaningless (``adaptive_avg_pool2d`` to 1x1 over channels-last activations gives
    ``as_strided(mean, [N, C, 1, 1], [C, 1, C, C])``). It is the identity on elements, so
    it does not address storage: any layout of its input gives the same result."""
    if n is None or n.target is not aten.as_strided.default:
        return False
    if not isinstance(n.args[0], torch.fx.Node):
        return False
    src, out = n.args[0].meta.get("val"), n.meta.get("val")
    if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor):
        return False
    sizes = shape_of(out)
    return (
        shape_of(src) == sizes
        and sym_size(src.storage_offset()) == sym_size(out.storage_offset())
        and same_strides(sizes, strides_of(src), strides_of(out))
    )


def _conv_parts(n: torch.fx.Node) -> tuple[torch.Tensor, torch.Tensor, int] | None:
    """A 2-d convolution's (weight, output, groups) values, forward or backward (the
    output gradient stands for its output); None for any other node."""
    if n.op != "call_function":
        return None
    if n.target is aten.convolution.default:
        w, out, groups = n.args[1], n, n.args[8] if len(n.args) > 8 else 1
    elif n.target is aten.convolution_backward.default:
        w, out, groups = n.args[2], n.args[0], n.args[9] if len(n.args) > 9 else 1
    else:
        return None
    vals = [x.meta.get("val") if isinstance(x, torch.fx.Node) else None for x in (w, out)]
    if not all(isinstance(v, torch.Tensor) and v.ndim == 4 for v in vals):
        return None
    return vals[0], vals[1], groups


#: meta key of a graph input that comes in other strides than the trace's (a backward
#: graph's activations, saved channels-last): the trace's strides (see
#: :func:`addresses_storage`)
TRACED_STRIDES = "sdk_traced_strides"


def addresses_storage(gm: torch.fx.GraphModule) -> list[str]:
    """The ops of the graph that address their input's storage by the trace's strides
    (``as_strided`` that is not an identity restride, nor over a flat buffer of the graph's
    own), by name."""
    return sorted(
        {
            str(n.target)
            for n in gm.graph.nodes
            if n.target in _STRIDE_ADDRESSED
            and not identity_restride(n)
            and not _over_own_flat_buffer(n)
        }
    )


def _over_own_flat_buffer(n: torch.fx.Node) -> bool:
    """An ``as_strided`` (or ``as_strided_scatter``) over a buffer of at most one dimension
    that the graph makes itself (a ``full``, another ``as_strided_scatter``: a fresh result,
    no view of anything): AOTAutograd's functionalized backward of a flatten or a mean reads
    and writes gradients so. Such a buffer has one layout, dense, whatever layout the
    graph's activations take, so the trace's strides address it right in any of them."""
    src = n.args[0] if n.args else None
    if not isinstance(src, torch.fx.Node) or src.op != "call_function":
        return False
    val = src.meta.get("val")
    return (
        isinstance(val, torch.Tensor)
        and val.ndim <= 1
        and val.is_contiguous()
        and sym_size(val.storage_offset()) == 0
        and fresh_result(src.target)
    )


def _channels_last_inputs(gm: torch.fx.GraphModule) -> bool:
    """Whether a 4-d input of the graph is channels-last (a backward graph's activations,
    saved so by its forward). Read from the strides' expressions (:func:`is_channels_last`):
    torch 2.11's ``is_contiguous`` of a symbolic tensor adds a guard to Dynamo's ShapeEnv,
    and a backward compile that adds one runs per shape."""
    for n in gm.graph.nodes:
        v = n.meta.get("val") if n.op == "placeholder" else None
        if (
            isinstance(v, torch.Tensor)
            and v.ndim == 4
            and is_channels_last(Layout(shape_of(v), strides_of(v), 0, v.dtype, v.device.type))
        ):
            return True
    return False


def channels_last_wanted(gm: torch.fx.GraphModule, ctx: CompileContext) -> tuple[bool, str]:
    """Whether this graph's convolutions run on channels-last activations, and why (a note).

    The option ``channels_last`` decides when set. Otherwise: only for plugins that
    prefer it (``Preferences.channels_last``), only 2-d convolutions, training graphs only
    for plugins that prefer it there too (``Preferences.channels_last_training``: BatchNorm's
    batch statistics become column reductions), and by Inductor's rule: not when
    convolutions are rare in the graph, and only if the FLOP-weighted measured speed-ups say
    faster. In training, a forward graph's activations saved for the backward keep the
    layout chosen here (AOTAutograd compiles the backward for it, :func:`~core.adapters.
    dynamo.report_output_strides`), and the backward's convolution gradients run
    channels-last; a backward whose inputs come channels-last follows them, one whose
    inputs do not keeps the trace's layout.
    """
    forced = ctx.core_options.channels_last
    strided = addresses_storage(gm)
    if strided and forced is not False:
        # these address the storage by the trace's strides: another layout reads other elements
        note = (
            f"channels-last not used: {', '.join(strided)} in the graph addresses its input's "
            "storage by the strides of the trace"
        )
        return False, note if forced or ctx.preferences.channels_last else ""
    convs = [n for n in gm.graph.nodes if _conv_parts(n) is not None]
    if forced is not None:
        on = bool(forced) and bool(convs)
        return on, (
            f"channels-last activations around {len(convs)} convolution(s) "
            "(option channels_last=True)"
            if on
            else ""
        )
    if not convs or not ctx.preferences.channels_last:
        return False, ""
    if ctx.graph_kind == "forward" and not ctx.preferences.channels_last_training:
        return False, ""
    if ctx.graph_kind == "backward" and not _channels_last_inputs(gm):
        return False, ""  # its forward kept the trace's layout: so does it
    if len(gm.graph.nodes) >= 300 * len(convs):
        return False, ""
    total = weighted = 0.0
    for n in convs:
        w, out, groups = _conv_parts(n)
        cout, cin_g, kh, kw = (size_hint(s) for s in shape_of(w))
        flops = 2.0 * size_hint(sym_size(out.numel())) * cin_g * kh * kw
        if groups > 1 and cin_g > 1:
            kind = "grouped"
        elif cout <= 64 and cin_g <= 64:
            kind = "small"
        elif cout * 2 <= cin_g and kh > 1:
            kind = "in_out"
        else:
            kind = "default"
        total += flops
        weighted += flops * _CL_MULTIPLIER[kind]
    if weighted > total:
        return False, (
            "channels-last not chosen: by FLOP-weighted measured speed-ups its "
            "convolutions (mostly grouped) are faster in the trace's layout"
        )
    return True, f"channels-last activations around {len(convs)} convolution(s)"


def relayout(L: Any, x: Any, st: StorageView, layout: Layout) -> bool:
    """For :meth:`.lowerer.Lowerer.require_layout` of ``L``: store the computed node
    behind ``x`` in ``layout`` instead of its own, where nothing has read its memory yet
    (a gradient made for a convolution's backward call: it followed the layout of what
    it was computed from, and would be copied). Kernels read a computed node by its
    per-dimension index, whatever its layout; a library call, a strided view or a graph
    output of it keeps the layout it has."""
    if not isinstance(x, ComputedView) or x.reindex is not None or x.storage is not st:
        return False
    node = x.node
    if node.is_reduction or node.name in L.merged or st.layout != node.layout:
        return False
    holders = [
        (fx, v)
        for fx, v in L.env.items()
        if (isinstance(v, ComputedView) and v.node is node)
        or (isinstance(v, StorageView) and v.buffer == node.name)
    ]
    if not holders or any(fx in L._graph_outputs for fx, _ in holders):
        return False
    if any(isinstance(v, StorageView) and v is not st for _, v in holders):
        return False  # a strided view of its memory in the old layout
    for n in L.nodes:
        if n is node or node.name not in n.reads:
            continue
        if isinstance(n, ExternNode) or any(
            ld.buffer == node.name and not isinstance(ld.index, tuple) for ld in _loads(n.value)
        ):
            return False  # reads its memory (a kernel reads it per dimension)
    node.layout = layout
    L.layouts[node.name] = layout
    st.layout = layout
    L._cse = {k: v for k, v in L._cse.items() if v is not node}
    return True


def _meta_strides(
    target: Any, args: tuple, kwargs: dict, vals: list[Any]
) -> list[tuple[int, ...] | None] | None:
    """The output strides ``target``'s meta kernel gives for the arguments' real layouts,
    when a channels-last argument may change them (None: keep the trace's)."""
    views: list[TensorValue] = []

    def collect(v: TensorValue) -> TensorValue:
        views.append(v)
        return v

    _map_values((args, kwargs), collect)
    if not any(isinstance(v, StorageView) and is_channels_last(v.layout) for v in views):
        return None

    def meta(x: Any) -> Any:
        if isinstance(x, StorageView):
            lay = x.layout
            return torch.empty_strided(lay.sizes, lay.strides, dtype=lay.dtype, device="meta")
        return x

    try:
        # meta tensors as they are: under a compile's fake mode (AOTAutograd's cache runs the
        # backward's compile inside one) they would be faked, and the fake convolution
        # answers contiguous where the meta kernel answers channels-last: the program would
        # depend on whether torch's cache is on
        with real_mode():
            got = target(*_map_values(args, meta), **_map_values(kwargs, meta))
    except Exception:  # noqa: BLE001 - no meta kernel: the trace's strides stand
        return None
    got = list(got) if isinstance(got, (list, tuple)) else [got]
    if len(got) != len(vals):
        return None
    out: list[tuple[int, ...] | None] = []
    for g, v in zip(got, vals):
        ok = (
            isinstance(g, torch.Tensor)
            and isinstance(v, torch.Tensor)
            and shape_of(g) == shape_of(v)
            and _dense(shape_of(g), strides_of(g))
        )
        out.append(strides_of(g) if ok else None)
    return out


def _tensor_meta_ok(n: torch.fx.Node) -> bool:
    val = n.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    for v in vals:
        if isinstance(v, torch.Tensor) and (v.is_complex() or v.is_sparse or v.is_quantized):
            return False
    for a in n.all_input_nodes:
        v = a.meta.get("val")
        if isinstance(v, torch.Tensor) and v.is_complex():
            return False
    return True


def _map_values(x: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(x, TensorValue):
        return fn(x)
    if isinstance(x, tuple):
        return tuple(_map_values(y, fn) for y in x)
    if isinstance(x, list):
        return [_map_values(y, fn) for y in x]
    if isinstance(x, dict):
        return {k: _map_values(v, fn) for k, v in x.items()}
    return x


def _meta_view(layout: Layout, op: Any, args: tuple) -> Layout | None:
    """Run a view op on a meta tensor of ``layout``: the strided layout it gives, if any.
    A layout of symbolic sizes has no meta tensor: the view's layout is computed."""
    if layout.symbolic:
        try:
            return _symbolic_view(layout, op, args)
        except TypeError:  # a decision that depends on the sizes: no strided view
            return None
    if op is aten.reshape.default:
        op = aten.view.default  # reshape copies where no view exists: that is not a layout
    try:
        with real_mode():  # as in _meta_strides: a meta tensor, never a fake one
            base = torch.empty_strided(
                (layout.storage_size,), (1,), dtype=layout.dtype, device="meta"
            ).as_strided(layout.sizes, layout.strides, layout.offset)
            out = op(base, *args)
    except Exception:  # noqa: BLE001 - not expressible as a view of this layout
        return None
    if not isinstance(out, torch.Tensor):
        return None
    return Layout(
        shape_of(out), strides_of(out), sym_size(out.storage_offset()), layout.dtype, layout.device
    )


def _symbolic_view(layout: Layout, op: Any, args: tuple) -> Layout | None:
    """The layout a view op gives of a layout of symbolic sizes (as the op's meta kernel
    would), for the views lowering makes; None where it is not a strided view of it."""
    sizes, strides, offset = list(layout.sizes), list(layout.strides), layout.offset
    if op is aten.slice.Tensor:
        dim, start, end, step = args
        length = _slice_length(start, end, step)
        offset = static(offset + start * strides[dim])
        sizes[dim], strides[dim] = length, static(strides[dim] * step)
    elif op is aten.select.int:
        dim, index = args
        offset = static(offset + index * strides[dim])
        del sizes[dim], strides[dim]
    elif op is aten.permute.default:
        (dims,) = args
        sizes, strides = [sizes[d] for d in dims], [strides[d] for d in dims]
    elif op is aten.unsqueeze.default:
        (dim,) = args
        stride = static(sizes[dim] * strides[dim]) if dim < len(sizes) else 1
        sizes.insert(dim, 1)
        strides.insert(dim, stride)
    elif op is aten.squeeze.dims:
        (dims,) = args
        keep = [d for d in range(len(sizes)) if d not in dims]
        sizes, strides = [sizes[d] for d in keep], [strides[d] for d in keep]
    elif op is aten.expand.default:
        (new,) = args
        lead = len(new) - len(sizes)
        out_st = [0] * lead
        for k, (sz, st) in enumerate(zip(sizes, strides)):
            out_st.append(0 if sz == 1 and new[k + lead] != 1 else st)
        sizes, strides = list(new), out_st
    elif op is aten.reshape.default:
        (new,) = args
        if layout.is_contiguous():
            sizes, strides = list(new), list(contiguous_strides(tuple(new)))
        else:
            view = _view_strides(sizes, strides, list(new))
            if view is None:
                return None  # not a view of this layout: the reshape copies
            sizes, strides = list(new), view
    else:
        return None
    return Layout(tuple(sizes), tuple(strides), offset, layout.dtype, layout.device)


def _view_strides(old: list[Any], strides: list[Any], new: list[Any]) -> list[Any] | None:
    """The strides of ``new`` sizes viewed over a strided layout (ATen's computeStride),
    also over symbolic sizes; None where no view exists or it cannot be proved for every
    value of the symbols. Old dims are taken in chunks that are contiguous among
    themselves, and new dims must multiply up to each chunk exactly."""

    def same(a: Any, b: Any) -> bool:
        return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0

    out: list[Any] = [0] * len(new)
    view_d = len(new) - 1
    base = strides[-1] if strides else 1
    tensor_numel: Any = 1
    view_numel: Any = 1
    for d in range(len(old) - 1, -1, -1):
        tensor_numel = static(tensor_numel * old[d])
        # a chunk ends where the next dim out is not contiguous with this one (a dim that
        # is not provably contiguous ends it: more chunks, never a wrong stride)
        if d == 0 or (old[d - 1] != 1 and not same(strides[d - 1], tensor_numel * base)):
            while view_d >= 0 and (not same(view_numel, tensor_numel) or new[view_d] == 1):
                out[view_d] = static(view_numel * base)
                view_numel = static(view_numel * new[view_d])
                view_d -= 1
                if is_static(view_numel) and is_static(tensor_numel) and view_numel > tensor_numel:
                    return None
            if not same(view_numel, tensor_numel):
                return None
            if d > 0:
                base, tensor_numel, view_numel = strides[d - 1], 1, 1
    return out if view_d == -1 else None


def _slice_length(start: Any, end: Any, step: int) -> Any:
    """Elements of ``[start:end:step]`` where ``end - start >= 0`` (symbolic sizes too)."""
    if step == 1:
        return static(end - start)
    return static(FloorDiv(sympy.sympify(end - start + step - 1), step))

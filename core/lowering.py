"""Lowering: ATen graph -> loop IR nodes.

:class:`Lowerer` walks a functionalized ATen graph. For each call it asks the
plugin whether the op may go into a generated kernel (``sdk_op_support``),
then for an override (``sdk_lower_op``), then the core table :data:`LOWERINGS`.
An op with no lowering, or refused, runs through ATen as a fallback extern and
is recorded with the reason. Library ops in :data:`EXTERN_OPS` run through
ATen on purpose and are recorded as externs.

Element types: floating math in bf16/fp16 is computed in fp32 and rounded
once when stored; eager rounds after every op, so fused results are slightly
*more* accurate than eager (as with Inductor).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.fx

from sdk.errors import LoweringError
from sdk.plugin import Capability, CompileContext
from sdk.report import ExternReport, FallbackReport

from .adapters.torch_private import OpOverloadPacket, aten, prims, sym_size
from .fallback import op_name
from .ir.expr import PREDICATES as _PRED
from .ir.expr import Const, Expr, IndexValue, Load, Op, subs_index
from .ir.graph import (
    ComputedView,
    ExternNode,
    Index,
    Node,
    ScalarValue,
    StorageView,
    TensorValue,
    contiguous_strides,
    fresh_vars,
)
from .ir.index import MIN_SIZE, FloorDiv, Mod, is_static, provably_nonneg, size_hint, static, var
from .ir.kernel import Layout

LOWERINGS: dict[Any, Callable[..., Any]] = {}

#: Loop variables that pointwise values are compared in (common subexpressions).
_CSE_VARS = tuple(var(f"cse{k}") for k in range(16))

#: Library ops: run through ATen (cuBLAS, oneDNN, cuDNN, flash attention...) on purpose.
EXTERN_OPS = {
    aten.mm.default,
    aten.bmm.default,
    aten.addmm.default,
    aten.baddbmm.default,
    aten.convolution_backward.default,  # aten.convolution: see _convolution
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_flash_attention_backward.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_efficient_attention_backward.default,
    aten._scaled_dot_product_cudnn_attention.default,
    aten._scaled_dot_product_cudnn_attention_backward.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    aten.max_pool2d_with_indices_backward.default,  # the forward: _max_pool2d
    aten._adaptive_avg_pool2d_backward.default,  # the forward: _adaptive_avg_pool2d
    aten.avg_pool2d.default,
    aten.avg_pool2d_backward.default,
    aten.scatter_add.default,  # index_put: _index_put; scatter.src/.value: _scatter
    aten.scatter_reduce.two,
    aten.index_add.default,
    aten.sort.default,
    aten.topk.default,
    aten.cumsum.default,
    aten._embedding_bag.default,
    aten.upsample_nearest2d.default,
}

#: Library ops whose functional form copies its first argument and then updates the copy in
#: place, as the in-place form does to the argument itself. Where that argument is a
#: temporary of the program dying at the call (the zeros an embedding backward accumulates
#: into), core/memory.py runs the in-place form over it and skips the copy.
IN_PLACE_FORMS = {aten.index_add.default: aten.index_add_.default}

_functional = torch.ops._c10d_functional
#: Functional collectives (torch.distributed._functional_collectives, FSDP2 and DTensor in
#: graphs): each starts its communication and returns its output at once; a wait_tensor
#: later makes the output ready. Library calls, ordered by the program (core/program.py:
#: a collective as early as its inputs allow, its wait just before its output is read).
#: Their inputs are never recycled (core/memory.py): the communication may read them until
#: the wait.
COLLECTIVE_OPS = frozenset(
    getattr(_functional, name).default
    for name in (
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather_into_tensor",
        "all_gather_into_tensor_coalesced",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced",
        "all_to_all_single",
        "broadcast",
    )
    if hasattr(_functional, name)
)
WAIT_OPS = frozenset({_functional.wait_tensor.default})
EXTERN_OPS |= COLLECTIVE_OPS | WAIT_OPS


class Unsupported(Exception):
    """Raised by a lowering for a case it does not handle: the op falls back."""


def register(*ops: Any) -> Callable:
    def deco(fn: Callable) -> Callable:
        for op in ops:
            if isinstance(op, OpOverloadPacket):
                for name in op.overloads():
                    LOWERINGS.setdefault(getattr(op, name), fn)
            else:
                LOWERINGS[op] = fn
        return fn

    return deco


def upcast(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def cast(e: Expr, dtype: torch.dtype) -> Expr:
    if e.dtype == dtype:
        return e
    if isinstance(e, Const):
        return Const(e.value if dtype != torch.bool else bool(e.value), dtype)
    # fp32 -> bf16 -> fp32 is not an identity; keep it (stores round on purpose)
    return Op("cast", (e,), dtype)


def size_value(n: Any, dtype: torch.dtype) -> Expr:
    """A count (a reduction's element count) as a value of ``dtype``: a constant, or the
    run's value of a symbolic size."""
    if is_static(n):
        return Const(n, dtype)
    return cast(IndexValue(n), dtype)


def shape_of(t: Any) -> tuple[Any, ...]:
    """A traced tensor's sizes: ints, or sympy expressions where they are symbolic."""
    return tuple(sym_size(s) for s in t.shape)


def strides_of(t: Any) -> tuple[Any, ...]:
    return tuple(sym_size(s) for s in t.stride())


class Lowerer:
    """Lowers one ATen graph variant; the result feeds the scheduler."""

    def __init__(
        self, gm: torch.fx.GraphModule, specs: tuple, ctx: CompileContext, hooks: Any
    ) -> None:
        self.gm, self.specs, self.ctx, self.hooks = gm, specs, ctx, hooks
        self.nodes: list[Node | ExternNode] = []
        self.env: dict[torch.fx.Node, Any] = {}
        self.inputs: list[tuple[str, Any]] = []  # (buffer name or "", spec)
        self.constants: dict[str, torch.Tensor] = {}  # get_attr tensors, by buffer name
        # Values on another device than the graph's (CPU scalars beside CUDA tensors, the
        # CPU philox seed of an attention op): each keeps its own buffer, which externs and
        # graph outputs use as eager would; kernels read a device copy, made only if one
        # does.  device-copy name -> (the host value's own view, the copy's layout)
        self.host: dict[str, tuple[StorageView, Layout]] = {}
        self.outputs: list[Any] = []
        self.fallbacks: list[FallbackReport] = []
        self.externs: list[ExternReport] = []
        #: extern node -> its entry in ``externs`` (the wrapper renames the calls it runs in
        #: place, so that reports name what runs)
        self.extern_report: dict[str, int] = {}
        self.views: set[str] = set()  # ATen calls that became index arithmetic
        #: pointwise nodes by their value (see :meth:`pointwise`), and the nodes that
        #: stand for several graph nodes (two graph outputs must not share one)
        self._cse: dict[tuple, Node] = {}
        self.merged: set[str] = set()
        self.needs_seed = False
        self._names: dict[str, int] = {}
        self._fx: torch.fx.Node | None = None
        out_node = next(n for n in gm.graph.nodes if n.op == "output")
        self._graph_outputs = {a for a in out_node.args[0] if isinstance(a, torch.fx.Node)}
        #: the eager value of each graph output (its strides are the ones users see)
        self.output_metas = [
            a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in out_node.args[0]
        ]
        #: every buffer's layout by name (inputs, nodes, extern outputs): layout choices
        self.layouts: dict[str, Layout] = {}
        #: channels-last activations around convolutions (see :func:`channels_last_wanted`)
        self.channels_last, why = channels_last_wanted(gm, ctx)
        if why:
            ctx.note(why)

    # -- naming -------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        n = self._names.get(prefix, 0)
        self._names[prefix] = n + 1
        return f"{prefix}{n}"

    @property
    def origin(self) -> str:
        n = self._fx
        if n is None:
            return "output: copy"  # a graph output put in the layout eager gives it
        return f"{n.name}: {op_name(n.target)}" if n.op == "call_function" else f"{n.name}: {n.op}"

    def meta(self, index: int | None = None) -> Any:
        """The fake value the current op produces (concrete: see ``concrete_graph``)."""
        val = self._fx.meta["val"]
        return val[index] if index is not None else val

    # -- the walk -------------------------------------------------------------

    def run(self) -> None:
        placeholder = 0
        for n in self.gm.graph.nodes:
            self._fx = n
            if n.op == "placeholder":
                self.env[n] = self._input(placeholder, self.specs[placeholder])
                placeholder += 1
            elif n.op == "call_function":
                self.env[n] = self._call(n)
            elif n.op == "output":
                self.outputs = [
                    self.env[a] if isinstance(a, torch.fx.Node) else a for a in n.args[0]
                ]
            elif n.op == "get_attr":
                self.env[n] = self._constant(n)
        self._fx = None

    @property
    def device(self) -> torch.device:
        """The device of the graph's kernels (of its first input on the compile's device)."""
        for s in self.specs:
            if hasattr(s, "device") and s.device.type == self.ctx.device_type:
                return s.device
        return torch.device(self.ctx.device_type)

    def _input(self, i: int, spec: Any) -> Any:
        if hasattr(spec, "strides"):
            name = f"arg{i}"
            layout = Layout(spec.sizes, spec.strides, spec.offset, spec.dtype, spec.device.type)
            self.inputs.append((name, spec))
            if spec.device.type != self.ctx.device_type:
                return self._hosted(name, layout)
            self.layouts[name] = layout
            return StorageView(name, layout)
        self.inputs.append(("", spec))
        return spec  # ints are specialized (guarded) values

    def _constant(self, n: torch.fx.Node) -> Any:
        value = self.gm
        for part in n.target.split("."):
            value = getattr(value, part)
        if not isinstance(value, torch.Tensor):
            return value
        name = f"const{len(self.constants)}"
        self.constants[name] = value
        layout = Layout(
            shape_of(value),
            strides_of(value),
            value.storage_offset(),
            value.dtype,
            value.device.type,
        )
        if value.device.type != self.ctx.device_type:
            return self._hosted(name, layout)
        return StorageView(name, layout)

    def _hosted(self, name: str, layout: Layout) -> StorageView:
        """A value on another device: externs get it as it is, kernels a device copy.

        The returned view names the device copy (``<name>_dev``, contiguous);
        :meth:`extern` and the graph outputs map it back to ``name``.
        """
        dev_name = f"{name}_dev"
        dev_layout = Layout(
            layout.sizes, contiguous_strides(layout.sizes), 0, layout.dtype, self.ctx.device_type
        )
        self.host[dev_name] = (StorageView(name, layout), dev_layout)
        return StorageView(dev_name, dev_layout)

    def on_host(self, x: Any) -> Any:
        """``x`` with device copies of host values replaced by the values themselves."""
        if isinstance(x, StorageView) and x.buffer in self.host:
            host, dev_layout = self.host[x.buffer]
            if x.layout == dev_layout:
                return host
        return x

    def builder(self) -> LoweringBuilder:
        return LoweringBuilder(self)

    def _call(self, n: torch.fx.Node) -> Any:
        target = n.target
        if target is operator.getitem:
            return self.env[n.args[0]][n.args[1]]
        val = n.meta.get("val")
        if isinstance(val, (bool, int, float)):
            return val  # size arithmetic: the pipeline compiles every variant with concrete sizes
        if isinstance(val, torch.SymInt):
            return sym_size(val)  # size arithmetic over symbolic sizes: an expression
        if isinstance(val, (torch.SymFloat, torch.SymBool)):
            raise Unsupported(f"a size ({val}) that is not known when compiling")
        args = torch.fx.node.map_arg(n.args, lambda a: self.env[a])
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: self.env[a])
        if target in EXTERN_OPS:
            return self.extern(target, args, kwargs)
        verdict = self.hooks.sdk_op_support(ctx=self.ctx, op=target, node=n)
        if verdict is not None and not verdict.ok:
            return self.extern(
                target, args, kwargs, reason=f"refused by sdk:{self.ctx.plugin}: {verdict.reason}"
            )
        if not _tensor_meta_ok(n):
            return self.extern(target, args, kwargs, reason="complex, sparse or quantized dtype")
        override = self.hooks.sdk_lower_op(
            ctx=self.ctx, op=target, args=args, kwargs=kwargs, builder=self.builder()
        )
        if override is not None:
            return override
        fn = LOWERINGS.get(target)
        if fn is None:
            return self.extern(target, args, kwargs, reason="no IR lowering for this op")
        mark = len(self.nodes)
        try:
            return fn(self, *args, **kwargs)
        except Unsupported as exc:
            del self.nodes[mark:]
            return self.extern(target, args, kwargs, reason=str(exc))

    # -- builders -------------------------------------------------------------

    def _layout_for(
        self,
        sizes: tuple[int, ...],
        dtype: torch.dtype,
        meta: torch.Tensor | None,
        value: Expr | None = None,
    ) -> Layout:
        if (
            meta is not None
            and self._fx is not None
            and self._fx in self._graph_outputs
            and shape_of(meta) == tuple(sizes)
        ):
            # a graph output gets the strides eager would give it
            strides = strides_of(meta)
            if _dense(sizes, strides):
                return Layout(tuple(sizes), strides, 0, dtype, self.ctx.device_type)
        if (
            self.channels_last
            and len(sizes) == 4
            and value is not None
            and any(is_channels_last(self.layouts.get(ld.buffer)) for ld in _loads(value))
        ):
            # follow the activations' layout: kernels over a channels-last tensor store
            # channels-last too, so the next convolution needs no conversion
            return Layout(
                tuple(sizes), channels_last_strides(sizes), 0, dtype, self.ctx.device_type
            )
        return Layout(tuple(sizes), contiguous_strides(sizes), 0, dtype, self.ctx.device_type)

    def pointwise(
        self,
        sizes: tuple[int, ...],
        dtype: torch.dtype,
        body: Callable[[Index], Expr],
        layout: Layout | None = None,
        cse: bool = True,
    ) -> ComputedView:
        """A computed node; ``layout`` (else chosen here) is where it is stored, if it is.
        ``cse``: an existing node of the same values stands for it."""
        sizes = tuple(static(s) for s in sizes)
        vs = fresh_vars("i", len(sizes))
        value = body(vs)
        layout = layout or self._layout_for(sizes, dtype, self._meta_or_none(), value)
        if not cse:
            return self._add(
                Node(
                    name=self.fresh("buf"),
                    sizes=sizes,
                    dtype=dtype,
                    vars=vs,
                    value=value,
                    layout=layout,
                )
            )
        # the same values computed twice (two products padding one operand alike) are one
        # node: expressions are pure, so equal ones hold equal values
        key = (sizes, dtype, layout, subs_index(value, dict(zip(vs, _CSE_VARS[: len(vs)]))))
        same = self._cse.get(key)
        if same is not None:
            if self.origin not in same.origins:
                same.origins.append(self.origin)
            self.merged.add(same.name)
            return ComputedView(same, same.sizes, None, StorageView(same.name, same.layout))
        view = self._add(
            Node(
                name=self.fresh("buf"),
                sizes=sizes,
                dtype=dtype,
                vars=vs,
                value=value,
                layout=layout,
            )
        )
        self._cse[key] = view.node
        return view

    def reduction(
        self,
        sizes: tuple[int, ...],
        rsizes: tuple[int, ...],
        op: str,
        dtype: torch.dtype,
        body: Callable[[Index, Index], Expr],
    ) -> ComputedView:
        sizes = tuple(static(s) for s in sizes)
        rsizes = tuple(static(s) for s in rsizes)
        vs, rvs = fresh_vars("i", len(sizes)), fresh_vars("r", len(rsizes))
        rn = static(math.prod(rsizes))
        if is_static(rn) and rn <= 1:  # nothing to loop over: a pointwise node
            return self._degenerate(sizes, rsizes, op, dtype, body, rn)
        value = body(vs, rvs)
        if op in ("sum", "prod") and value.dtype.is_floating_point:
            value = cast(value, upcast(value.dtype))
        return self._add(
            Node(
                name=self.fresh("buf"),
                sizes=sizes,
                dtype=dtype,
                vars=vs,
                value=value,
                layout=self._layout_for(sizes, dtype, self._meta_or_none()),
                rvars=rvs,
                rsizes=rsizes,
                reduce_op=op,
            )
        )

    def _degenerate(
        self,
        sizes: tuple[int, ...],
        rsizes: tuple[int, ...],
        op: str,
        dtype: torch.dtype,
        body: Callable,
        rn: int,
    ) -> ComputedView:
        if rn == 0:
            if op in ("max", "min", "argmax", "argmin"):
                raise Unsupported(f"{op} of an empty tensor (eager raises)")
            ident = {"sum": 0, "prod": 1, "any": False, "all": True}[op]
            return self.pointwise(sizes, dtype, lambda idx: Const(ident, dtype))
        zeros = tuple(sympy.Integer(0) for _ in rsizes)

        def one(idx: Index) -> Expr:
            if op in ("argmax", "argmin"):
                return Const(0, dtype)
            return cast(body(idx, zeros), dtype)

        return self.pointwise(sizes, dtype, one)

    def _meta_or_none(self) -> torch.Tensor | None:
        val = self._fx.meta.get("val") if self._fx is not None else None
        return val if isinstance(val, torch.Tensor) else None

    def _add(self, node: Node) -> ComputedView:
        node.origins.append(self.origin)
        node.reads = {ld.buffer for ld in _loads(node.value)}
        self.nodes.append(node)
        self.layouts[node.name] = node.layout
        storage = StorageView(node.name, node.layout)
        return ComputedView(node, node.sizes, None, storage)

    def realize(self, value: Any) -> Any:
        """A value as a buffer in memory (for externs): a strided view, or a copy."""
        if not isinstance(value, TensorValue):
            return value
        if value.storage is not None:
            return value.storage
        copy = self.pointwise(value.sizes, value.dtype, value.load)
        return copy.storage

    def extern(
        self,
        target: Any,
        args: tuple,
        kwargs: dict,
        reason: str | None = None,
        out_strides: list[tuple[int, ...] | None] | None = None,
    ) -> Any:
        """Run ``target`` through ATen (a library call, or a fallback when ``reason``).

        Outputs get the trace's strides, or ``out_strides`` where given; a call that
        answers in other strides is copied into them at run time. A fallback with
        ``options["fallback"]`` off raises :class:`sdk.LoweringError` instead.
        """
        if reason is not None and not self.ctx.options.get("fallback", True):
            raise LoweringError(
                f"{op_name(target)} ({self.origin}) would run through ATen, op by op: "
                f"{reason}; options['fallback'] is False (set it True to allow this, or "
                f"lower the op in sdk:{self.ctx.plugin})"
            )
        args = _map_values(args, lambda x: self.on_host(self.realize(x)))
        kwargs = _map_values(kwargs, lambda x: self.on_host(self.realize(x)))
        val = self._fx.meta.get("val")
        vals = list(val) if isinstance(val, (list, tuple)) else [val]
        strides = [strides_of(v) if isinstance(v, torch.Tensor) else None for v in vals]
        if self.channels_last and out_strides is None:
            # the trace's strides assumed the trace's layouts; an op given channels-last
            # inputs may answer in channels-last (pooling does): ask its meta kernel
            out_strides = _meta_strides(target, args, kwargs, vals)
        for i, st in enumerate(out_strides or ()):
            if st is not None:
                strides[i] = st
        outputs, results = [], []
        for v, st in zip(vals, strides):
            if isinstance(v, torch.Tensor):
                name = self.fresh("ext")
                layout = Layout(
                    shape_of(v), st, sym_size(v.storage_offset()), v.dtype, v.device.type
                )
                outputs.append((name, layout))
                if v.device.type != self.ctx.device_type:
                    results.append(self._hosted(name, layout))
                else:
                    self.layouts[name] = layout
                    results.append(StorageView(name, layout))
            else:
                outputs.append(None)
                results.append(None)
        node = ExternNode(
            self.fresh("extern"),
            target,
            args,
            kwargs,
            outputs,
            [self.origin],
            reason,
            isinstance(val, (list, tuple)),
        )
        self.nodes.append(node)
        name = op_name(target)
        if reason is None:
            self.extern_report[node.name] = len(self.externs)
            self.externs.append(ExternReport(name, self._fx.name))
        else:
            self.fallbacks.append(FallbackReport(name, reason, self._fx.name))
        return tuple(results) if node.multi_output else results[0]

    def require_layout(self, x: Any, strides: tuple[int, ...]) -> Any:
        """``x`` as a buffer with these strides: itself if it already is one, else a copy
        (a computed node stored in them)."""
        st = self.realize(x)
        if not isinstance(st, StorageView):
            return st
        lay = st.layout
        if same_strides(lay.sizes, lay.strides, strides):
            return st
        layout = Layout(tuple(lay.sizes), strides, 0, lay.dtype, self.ctx.device_type)
        return self.pointwise(lay.sizes, lay.dtype, st.load, layout=layout)

    def view(
        self,
        value: TensorValue,
        sizes: tuple[int, ...],
        reindex: Callable[[Index], Index],
        op: Any,
        args: tuple,
    ) -> TensorValue:
        """A view: index arithmetic over ``value``, never a copy."""
        self.views.add(self.origin)
        sizes = tuple(static(s) for s in sizes)
        storage = None
        if value.storage is not None:
            layout = _meta_view(value.storage.layout, op, args)
            if layout is not None:
                storage = StorageView(value.storage.buffer, layout)
        if isinstance(value, StorageView):
            if storage is not None:
                return storage
            return _IndexedView(value, sizes, reindex)
        if isinstance(value, ComputedView):
            inner = value.reindex
            fn = reindex if inner is None else (lambda idx: inner(reindex(idx)))
            return ComputedView(value.node, sizes, fn, storage)
        if isinstance(value, ScalarValue):
            return ScalarValue(value.expr, sizes)
        return _IndexedView(value, sizes, reindex)


class LoweringBuilder:
    """What a plugin's ``sdk_lower_op`` builds IR with (public as ``sdk.ir.LoweringBuilder``).

    ``out`` is the fake tensor the op produces (shape, dtype, strides); each
    builder method adds a node to the graph being lowered and returns its
    :class:`TensorValue`. Read inputs with ``value.load(index)``; an index is a
    tuple of sympy expressions, one per dimension.
    """

    def __init__(self, lowerer: Lowerer) -> None:
        self._L = lowerer

    @property
    def out(self) -> Any:
        return self._L.meta()

    def pointwise(
        self, sizes: tuple[int, ...], dtype: torch.dtype, fn: Callable[[Index], Expr]
    ) -> TensorValue:
        """``out[i] = fn(i)`` over ``sizes``."""
        return self._L.pointwise(tuple(sizes), dtype, fn)

    def reduction(
        self,
        sizes: tuple[int, ...],
        reduced: tuple[int, ...],
        op: str,
        dtype: torch.dtype,
        fn: Callable[[Index, Index], Expr],
    ) -> TensorValue:
        """``out[i] = op over r of fn(i, r)``; ``op`` is one of ``sdk.ir.REDUCTIONS``."""
        return self._L.reduction(tuple(sizes), tuple(reduced), op, dtype, fn)

    def extern(self, target: Any, args: tuple, kwargs: dict | None = None) -> Any:
        """Run ``target`` (an ATen op) through ATen on these arguments, as a library call."""
        return self._L.extern(target, tuple(args), dict(kwargs or {}))

    @staticmethod
    def cast(e: Expr, dtype: torch.dtype) -> Expr:
        return cast(e, dtype)


class _IndexedView(TensorValue):
    """A view that is not strided (e.g. reshape of a transposed input)."""

    def __init__(
        self, base: TensorValue, sizes: tuple[int, ...], reindex: Callable[[Index], Index]
    ) -> None:
        self.base, self.sizes, self.dtype, self.reindex = base, tuple(sizes), base.dtype, reindex

    def load(self, index: Index) -> Expr:
        return self.base.load(tuple(self.reindex(tuple(index))))


def _loads(e: Expr) -> list[Load]:
    from .ir.expr import loads

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


#: Inductor's measured channels-last speed-up per convolution kind (inference;
#: torch/_inductor/graph.py decide_layout_opt): < 1 is faster in channels-last.
_CL_MULTIPLIER = {"grouped": 1.358, "small": 0.783, "in_out": 0.725, "default": 0.823}


def channels_last_wanted(gm: torch.fx.GraphModule, ctx: CompileContext) -> tuple[bool, str]:
    """Whether this graph's convolutions run on channels-last activations, and why (a note).

    The option ``channels_last`` decides when set. Otherwise: only for plugins that
    declare ``Capability.CHANNELS_LAST``, only inference graphs (in training the saved
    activations leave the forward graph in eager's layout, which would cost a copy
    each), only 2-d convolutions, and by Inductor's rule: not when convolutions are
    rare in the graph, and only if the FLOP-weighted measured speed-ups say faster.
    """
    forced = ctx.options.get("channels_last")
    convs = [
        n
        for n in gm.graph.nodes
        if n.op == "call_function"
        and n.target is aten.convolution.default
        and isinstance(n.meta.get("val"), torch.Tensor)
        and n.meta["val"].ndim == 4
    ]
    if forced is not None:
        on = bool(forced) and bool(convs)
        return on, (
            f"channels-last activations around {len(convs)} convolution(s) "
            "(option channels_last=True)"
            if on
            else ""
        )
    if not convs or not ctx.has(Capability.CHANNELS_LAST) or ctx.graph_kind != "inference":
        return False, ""
    if len(gm.graph.nodes) >= 300 * len(convs):
        return False, ""
    total = weighted = 0.0
    for n in convs:
        w = n.args[1].meta.get("val") if isinstance(n.args[1], torch.fx.Node) else None
        out = n.meta["val"]
        if not isinstance(w, torch.Tensor):
            continue
        groups = n.args[8] if len(n.args) > 8 else 1
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
    try:
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


# ---------------------------------------------------------------------------
# helpers for lowerings
# ---------------------------------------------------------------------------


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
    if isinstance(x, Expr):
        return cast(x, dtype)
    if isinstance(x, sympy.Expr):  # a symbolic size used as a scalar (a mean's count)
        return size_value(x, dtype)
    return Const(x, dtype)


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


# ---------------------------------------------------------------------------
# elementwise
# ---------------------------------------------------------------------------

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
    aten.remainder: "remainder",
    aten.fmod: "fmod",
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


@register(aten.div.Tensor, aten.div.Scalar, prims.div)
def _div(L: Lowerer, a: Any, b: Any) -> Any:
    dtype = out_dtype(L)
    if not dtype.is_floating_point:  # prims.div on integers truncates
        return _div_mode(L, a, b, rounding_mode="trunc")
    return elementwise(L, "truediv", a, b)


@register(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(L: Lowerer, a: Any, b: Any, *, rounding_mode: str | None = None) -> Any:
    if rounding_mode is None:
        return elementwise(L, "truediv", a, b)
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
    return L.pointwise(sizes, dtype, lambda idx: cast(bload(x, sizes, idx, x.dtype), dtype))


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
)
def _full(L: Lowerer, *args: Any, **kw: Any) -> Any:
    target = L._fx.target
    val = L.meta()
    fill: Any = 0
    if target in (aten.full.default, aten.full_like.default, aten.fill.Scalar):
        fill = args[1]
    elif target is aten.new_full.default:
        fill = args[2]
    elif target in (aten.ones_like.default, aten.ones.default, aten.new_ones.default):
        fill = 1
    elif target is aten.scalar_tensor.default:
        fill = args[0]
    if isinstance(fill, TensorValue):
        raise Unsupported("fill with a tensor value")
    return L.pointwise(shape_of(val), val.dtype, lambda idx: Const(fill, val.dtype))


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


# ---------------------------------------------------------------------------
# reductions
# ---------------------------------------------------------------------------


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
        denom = max(n - correction, 0)
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


# ---------------------------------------------------------------------------
# views: index arithmetic only
# ---------------------------------------------------------------------------


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
    else:  # symbolic sizes: only bounds that hold for every size
        start = 0 if start is None else _slice_bound(start, n)
        end = n if end is None else _slice_bound(end, n)
        if not (start == 0 or provably_nonneg(end - start)):
            raise TypeError(f"a slice [{start}:{end}] whose length's sign depends on the sizes")
        length = _slice_length(start, end, step)
    sizes = x.sizes[:dim] + (length,) + x.sizes[dim + 1 :]

    def fn(idx: Index) -> Index:
        return idx[:dim] + (start + step * idx[dim],) + idx[dim + 1 :]

    return L.view(x, sizes, fn, aten.slice.Tensor, (dim, start, end, step))


def _slice_length(start: Any, end: Any, step: int) -> Any:
    """Elements of ``[start:end:step]`` where ``end - start >= 0`` (symbolic sizes too)."""
    if step == 1:
        return static(end - start)
    return static(FloorDiv(sympy.sympify(end - start + step - 1), step))


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


# ---------------------------------------------------------------------------
# data movement with computed indices
# ---------------------------------------------------------------------------


def _safe(i: sympy.Expr, lo: int, n: int, reach: int) -> sympy.Expr:
    """``i - lo`` folded into [0, n): exact where it is in range, in bounds elsewhere.

    ``reach`` bounds how far below zero ``i - lo`` can go.
    """
    if is_static(n) and n <= 0:
        return sympy.Integer(0)
    # a multiple of n at least |reach| (a symbolic n is >= 2: n * |reach| is one)
    span = n * ((abs(reach) + n - 1) // n) if is_static(n) else n * abs(reach)
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
            sub = idx[:dim] + (_safe(i, off, x.sizes[dim], acc),) + idx[dim + 1 :]
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
            sub[d] = _safe(i, before, n, before)
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
    """A library call; with the plugin's capabilities, on channels-last activations and
    with the bias added in the generated kernel that follows (fused with what reads it)."""
    out = L.meta()
    if (
        isinstance(bias, TensorValue)
        and L.ctx.has(Capability.CONV_BIAS_IN_KERNEL)
        and out.numel() > 0
    ):
        y = _conv_call(L, x, weight, None, rest)
        b = _view(L, bias, (bias.sizes[0],) + (1,) * (out.ndim - 2))
        return elementwise(L, "add", y, b)
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

    def pair(v: Any, default: Any) -> tuple[int, int]:
        v = default if v is None or (isinstance(v, (list, tuple)) and len(v) == 0) else v
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        return (int(v[0]), int(v[-1]))

    kh, kw = pair(kernel_size, None)
    sh, sw = pair(stride, (kh, kw))
    ph, pw = pair(padding, 0)
    if pair(dilation, 1) != (1, 1) or kh * kw > 64 or not x.dtype.is_floating_point:
        raise Unsupported("max pooling with dilation, windows over 64 or integers")
    out, _ = L.meta()
    sizes = shape_of(out)
    h, w = x.sizes[-2:]
    dtype = x.dtype
    acc = upcast(dtype)

    def window(idx: Index) -> list[tuple[Expr | None, Expr, Expr]]:
        """(inside, value, flat position) per window element, in ATen's scan order."""
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
                items.append((inside, cast(x.load(at), acc), IndexValue(hi * w + wi)))
        return items

    def scan(idx: Index) -> tuple[Expr, Expr]:
        items = window(idx)
        # ATen starts at the window's first position inside the input, value -inf
        pos: Expr = Const(0, torch.int64)
        for inside, _v, p in reversed(items):
            pos = Op("where", (inside, p, pos), torch.int64)
        best: Expr = Const(float("-inf"), acc)
        for inside, v, p in items:
            take = Op(
                "logical_or",
                (Op("gt", (v, best), torch.bool), Op("isnan", (v,), torch.bool)),
                torch.bool,
            )
            take = Op("logical_and", (inside, take), torch.bool)
            best = Op("where", (take, v, best), acc)
            pos = Op("where", (take, p, pos), torch.int64)
        return best, pos

    values = L.pointwise(sizes, dtype, lambda idx: cast(scan(idx)[0], dtype))
    indices = L.pointwise(sizes, torch.int64, lambda idx: scan(idx)[1])
    return values, indices


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


def _indirect(L: Lowerer, x: TensorValue, extents: list[int], wrap: bool = False) -> Callable:
    """Loader of ``x`` where some dims take computed (indirect) indices.

    ``wrap``: negative indices count from the end (``x[idx]``); otherwise they
    are out of range, as for embedding, gather and index_select in eager.
    """
    src = x.storage
    if src is None:
        raise Unsupported("indexing into a non-strided view")
    # a whole computed node is read at its own index (linearized when scheduled), so the
    # scheduler can recompute the few gathered elements instead of storing the node
    whole = (
        isinstance(x, ComputedView) and x.reindex is None and tuple(x.sizes) == tuple(x.node.sizes)
    )

    def load(idx_parts: list[Any]) -> Expr:
        binds, full = [], []
        for part, n in zip(idx_parts, extents):
            if isinstance(part, Expr):
                sym = var(L.fresh("ind"))
                v = cast(part, torch.int64)
                if wrap:  # Python indexing: -1 is the last element
                    v = Op(
                        "where",
                        (
                            Op("lt", (v, Const(0, torch.int64)), torch.bool),
                            Op("add", (v, size_value(n, torch.int64)), torch.int64),
                            v,
                        ),
                        torch.int64,
                    )
                binds.append((sym, v, n))
                full.append(sym)
            else:
                full.append(part)
        index = tuple(full) if whole else src.layout.linear(tuple(full))
        return Load(src.buffer, index, src.dtype, tuple(binds))

    return load


@register(aten.index_put.default)
def _index_put(L: Lowerer, x: Any, indices: Any, values: Any, accumulate: bool = False) -> Any:
    """``x[idx] += values`` over the first dim (the embedding backward) as ATen's
    ``index_add``, an atomic-add kernel, instead of ``index_put``'s sort-based one (8 ms
    on a T5 relative-position table of 32 rows). Only without deterministic algorithms
    requested, for one integer index on dim 0 and values of exactly the indexed shape;
    negative indices count from the end, as in ``index_put``. Otherwise ``index_put``."""
    target = aten.index_put.default
    idx = indices[0] if isinstance(indices, (list, tuple)) and len(indices) == 1 else None
    ok = (
        accumulate
        and isinstance(idx, TensorValue)
        and isinstance(values, TensorValue)
        and idx.dtype in (torch.int64, torch.int32)
        and x.ndim >= 1
        and tuple(values.sizes) == tuple(idx.sizes) + tuple(x.sizes[1:])
        and not torch.are_deterministic_algorithms_enabled()
    )
    if not ok:
        return L.extern(target, (x, indices, values, accumulate), {})
    n = x.sizes[0]
    flat_n = math.prod(idx.sizes)
    k = idx.ndim

    def wrapped(i: Index) -> Expr:
        at = reshape_reindex(tuple(idx.sizes), (flat_n,))(i)
        v = cast(idx.load(at), torch.int64)
        return Op(
            "where",
            (
                Op("lt", (v, Const(0, torch.int64)), torch.bool),
                Op("add", (v, size_value(n, torch.int64)), torch.int64),
                v,
            ),
            torch.int64,
        )

    flat_idx = L.pointwise((flat_n,), torch.int64, wrapped)
    vals = _view(L, values, (flat_n,) + tuple(values.sizes[k:]))
    return L.extern(aten.index_add.default, (x, 0, flat_idx, vals), {})


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
        raise TypeError(f"slice_scatter from {lo} over symbolic sizes {n}, {m}")
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


@register(aten.scatter.value, aten.scatter.src)
def _scatter(L: Lowerer, x: Any, dim: int, index: Any, value: Any) -> Any:
    """One index per row (``index.size(dim) == 1``, the other dims as ``x``'s): pointwise,
    ``out[i] = value if i[dim] == index[i, dim -> 0] else x[i]`` (the backward of a
    cross-entropy loss). An index out of range still fails, as in eager: the written
    arm also reads ``x`` at it through a checked indirect load. Other scatters stay
    library calls (several writes may land on one element)."""
    val = L.meta()
    dim = dim % max(x.ndim, 1)
    if (
        not isinstance(index, TensorValue)
        or index.ndim != x.ndim
        or index.sizes[dim] != 1
        or any(a != b for d, (a, b) in enumerate(zip(index.sizes, x.sizes)) if d != dim)
        or (isinstance(value, TensorValue) and tuple(value.sizes) != tuple(index.sizes))
    ):
        raise Unsupported("a scatter with several indices per row")
    dtype = val.dtype
    check = _indirect(L, x, list(x.sizes))

    def body(idx: Index) -> Expr:
        row = tuple(sympy.Integer(0) if d == dim else i for d, i in enumerate(idx))
        target = cast(index.load(row), torch.int64)
        hit = Op("eq", (IndexValue(idx[dim]), target), torch.bool)
        v = cast(value.load(row), dtype) if isinstance(value, TensorValue) else Const(value, dtype)
        parts = list(idx)
        parts[dim] = target
        probe = cast(check(parts), torch.float32)  # asserts 0 <= target < size
        v = Op("where", (Op("isnan", (probe,), torch.bool), v, v), dtype)
        return Op("where", (hit, v, cast(x.load(idx), dtype)), dtype)

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

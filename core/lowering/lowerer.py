"""The lowering walk (ATen graph -> loop IR nodes) and the table of op lowerings.

:class:`Lowerer` walks a functionalized ATen graph. For each call it asks the
plugin whether the op may go into a generated kernel (``sdk_op_support``),
then for an override (``sdk_lower_op``), then the core table :data:`LOWERINGS`.
An op with no lowering, or refused, runs through ATen as a fallback extern and
is recorded with the reason. Library ops in :data:`EXTERN_OPS` run through
ATen on purpose and are recorded as externs. The lowerings themselves live in
the op-family modules beside this one and enter the table with :func:`register`.

Element types: floating math in bf16/fp16 is computed in fp32 and rounded
once when stored; eager rounds after every op, so fused results are slightly
*more* accurate than eager (as with Inductor).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import sympy
import torch
import torch.fx

from sdk.errors import LoweringError
from sdk.plugin import CompileContext
from sdk.report import ExternReport, FallbackReport

from ..adapters.torch_private import (
    aten,
    requirements_made,
    requiring,
    saved_for_backward,
    sym_size,
    tree_flatten,
)
from ..fallback import op_name
from ..guards import is_symbolic
from ..ir.expr import Const, Expr, Op, cast, subs_index
from ..ir.graph import (
    ComputedView,
    ExternNode,
    Index,
    LoweringBuilder,
    Node,
    ScalarValue,
    StorageView,
    TensorValue,
    contiguous_strides,
    fresh_vars,
)
from ..ir.index import is_static, static, var
from ..ir.kernel import Layout
from .devices import foreign_device
from .layouts import (
    TRACED_STRIDES,
    _dense,
    _following_strides,
    _loads,
    _map_values,
    _meta_strides,
    _meta_view,
    _tensor_meta_ok,
    addresses_storage,
    channels_last_wanted,
    relayout,
    same_strides,
    shape_of,
    strides_of,
)
from .optable import (
    EXTERN_OPS,
    Unsupported,
    lowering_for,
)
from .sizes import (
    SIZE_FLOAT_OPS,
    concrete_size,
    float_unsupported,
    scalar_value,
)

#: Loop variables that pointwise values are compared in (common subexpressions).
_CSE_VARS = tuple(var(f"cse{k}") for k in range(16))

#: The meta key of a call node a graph pass made or rewrote (core/passes): the nodes of the
#: graph before the passes that it stands for, as ``"name: op"``. Reports name those, so that
#: they name the graph AOTAutograd made, whatever the passes did to it.
ORIGINS = "sdk_origins"


def origin_of(n: torch.fx.Node) -> str:
    """How reports name node ``n``: ``"name: aten.op.overload"``."""
    return f"{n.name}: {op_name(n.target)}" if n.op == "call_function" else f"{n.name}: {n.op}"


def origins_of(n: torch.fx.Node) -> tuple[str, ...]:
    """The graph nodes ``n`` stands for in reports (itself, unless a pass made it)."""
    return tuple(n.meta.get(ORIGINS) or (origin_of(n),))


def upcast(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def refusal(n: torch.fx.Node, hooks: Any, ctx: CompileContext) -> str | None:
    """Why a kernel-level plugin's program could not take call node ``n`` into its IR, or
    None when it can: the claim a kernel-level plugin makes in a chain's partitioning.

    It asks what :meth:`Lowerer._call` asks, in the same order, without lowering: size
    arithmetic and library calls (:data:`EXTERN_OPS`) are the program's own; an op the
    plugin refuses (``sdk_op_support``), of a dtype the IR has no form for, or with no
    lowering is not. (An op a plugin lowers with ``sdk_lower_op`` alone, with no core
    lowering, counts as refused: that hook can only be asked with lowered arguments.)
    """
    if n.target is operator.getitem:
        return refusal(n.args[0], hooks, ctx) if isinstance(n.args[0], torch.fx.Node) else None
    val = n.meta.get("val")
    if isinstance(val, (bool, int, float, torch.SymInt)):
        return None
    if isinstance(val, (torch.SymFloat, torch.SymBool)):
        return float_unsupported(n)
    if n.target in EXTERN_OPS:
        return None
    elsewhere = foreign_device(n, ctx.device_type)
    if elsewhere is not None:
        return elsewhere
    verdict = hooks.sdk_op_support(ctx=ctx, op=n.target, node=n)
    if verdict is not None and not verdict.ok:
        return verdict.reason or "refused by its sdk_op_support"
    if not _tensor_meta_ok(n):
        return "complex, sparse or quantized dtype"
    if lowering_for(n.target) is None:
        return "no IR lowering for this op"
    return None


class Lowerer:
    """Lowers one ATen graph variant; the result feeds the scheduler."""

    def __init__(
        self,
        gm: torch.fx.GraphModule,
        specs: tuple,
        ctx: CompileContext,
        hooks: Any,
        refused: Mapping[str, str] | None = None,
        vendor: dict[str, tuple[str, Callable]] | None = None,
        channels_last: tuple[bool, str] | None = None,
    ) -> None:
        """``refused``: ATen node name -> why it runs in ATen (an op whose kernel alone
        exceeds the plugin's ``sdk_kernel_limits``); ``vendor``: see :attr:`vendor`;
        ``channels_last``: :func:`channels_last_wanted` of the graph, where decided already
        (on the graph before the passes rewrote it), else decided here."""
        self.gm, self.specs, self.ctx, self.hooks = gm, specs, ctx, hooks
        self.refused = refused or {}
        #: call node name -> (its call's id, the plugin's own function: ``sdk_extern``)
        self.vendor = vendor or {}
        self.nodes: list[Node | ExternNode] = []
        self.env: dict[torch.fx.Node, Any] = {}
        self._absorbed: dict[torch.fx.Node, tuple[str, ...]] = {}  # see absorb()
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
        #: what the lowering took from the trace about the sizes, where the sizes alone do
        #: not prove it: (expression over size symbols, limit), each ``expr <= limit``; a
        #: call whose sizes break one gets a program of its own sizes (as a kernel's
        #: ``requires``). The trace held it under Dynamo's guards, yet another graph of the
        #: same text (the recompile of the other side of such a guard) shares this program.
        self.requires: list[tuple[sympy.Expr, int]] = []
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
        self.channels_last, why = channels_last or channels_last_wanted(gm, ctx)
        if why:
            ctx.note(why)
        self._addresses_storage: bool | None = None  # (asked only where an input needs it)
        #: positions of the outputs whose layout the core chooses: a forward graph's
        #: activations saved for the backward (AOTAutograd compiles the backward for the
        #: strides they get); every other output leaves in eager's strides. AOTAutograd
        #: takes only concrete strides (``int(real_stride[k])``): with symbolic sizes, the
        #: activations too leave in eager's
        self.free_outputs: frozenset[int] = frozenset()
        if self.channels_last and ctx.graph_kind == "forward" and not is_symbolic(specs):
            self.free_outputs = saved_for_backward(len(out_node.args[0])) or frozenset()
            self._graph_outputs = {
                a
                for i, a in enumerate(out_node.args[0])
                if isinstance(a, torch.fx.Node) and i not in self.free_outputs
            }

    # -- naming -------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        n = self._names.get(prefix, 0)
        self._names[prefix] = n + 1
        return f"{prefix}{n}"

    @property
    def origin(self) -> str:
        return self.origins[0]

    @property
    def origins(self) -> tuple[str, ...]:
        """The graph nodes the current node stands for in reports (several where a graph
        pass made one call of two: core/passes)."""
        n = self._fx
        if n is None:
            return ("output: copy",)  # a graph output put in the layout eager gives it
        return self._absorbed.get(n, ()) + origins_of(n)

    def absorb(self, n: torch.fx.Node) -> None:
        """The current node computes ``n`` too (``n``'s own value goes unread): reports
        count ``n`` in the kernel that computes the current node."""
        self._absorbed[self._fx] = self._absorbed.get(self._fx, ()) + origins_of(n)

    def node(self) -> torch.fx.Node:
        """The graph node being lowered."""
        return self._fx

    def meta(self, index: int | None = None) -> Any:
        """The fake value the current op produces (concrete: see ``concrete_graph``)."""
        val = self._fx.meta["val"]
        return val[index] if index is not None else val

    # -- the walk -------------------------------------------------------------

    def run(self) -> None:
        # a size's Max(1, ...) (see requiring): those of the input specs, made before
        # (core.stages.build), and the graph's own
        self.requires.extend(requirements_made())
        with requiring(self.requires):
            self._walk()

    def _walk(self) -> None:
        placeholder = 0
        for n in self.gm.graph.nodes:
            self._fx = n
            if n.op == "placeholder":
                self.env[n] = self._input(placeholder, self.specs[placeholder])
                placeholder += 1
                traced = n.meta.get(TRACED_STRIDES)
                if traced is not None and self._addresses_storage is None:
                    self._addresses_storage = bool(addresses_storage(self.gm))
                if traced is not None and self._addresses_storage:
                    # an op of the graph addresses storage by the trace's strides (an
                    # as_strided): the input, given in others, is copied into those
                    self.env[n] = self.require_layout(self.env[n], traced)
            elif n.op == "call_function":
                self.env[n] = self._call(n)
            elif n.op == "output":
                if any(isinstance(self.env[a], Expr) for a in n.all_input_nodes):
                    # (the program returns tensors and sizes; a float is not a size)
                    raise Unsupported("the graph returns a float computed from sizes")
                self.outputs = [
                    self.env[a] if isinstance(a, torch.fx.Node) else a for a in n.args[0]
                ]
            elif n.op == "get_attr":
                self.env[n] = self._constant(n)
        self._fx = None

    @property
    def written(self) -> dict[str, str]:
        """Computed buffer -> the graph input it is written into (core/lowering/mutation.py)."""
        return {n.name: n.into for n in self.nodes if isinstance(n, Node) and n.into is not None}

    def is_input(self, buffer: str) -> bool:
        return any(buffer == name for name, _ in self.inputs)

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

    def _size_float(self, n: torch.fx.Node) -> Expr | float:
        """A float computed from sizes, as a float64 value that the kernels reading it
        compute from their size arguments (not a host value: the program stays symbolic);
        of concrete sizes (a variant compiled per shape), the float itself."""
        why = float_unsupported(n)
        if why is not None:
            raise Unsupported(why)
        raw = [self.env[a] if isinstance(a, torch.fx.Node) else a for a in n.args]
        if all(isinstance(x, (bool, int, float)) for x in raw):
            return n.target(*raw)  # a variant of concrete sizes: Python's own arithmetic
        args = [scalar_value(x, torch.float64) for x in raw]
        name = SIZE_FLOAT_OPS[n.target]
        return args[0] if name is None else Op(name, tuple(args), torch.float64)

    def _call(self, n: torch.fx.Node) -> Any:
        target = n.target
        if target is operator.getitem:
            return self.env[n.args[0]][n.args[1]]
        val = n.meta.get("val")
        if isinstance(val, (bool, int, float)):
            return val  # size arithmetic: the pipeline compiles every variant with concrete sizes
        if isinstance(val, torch.SymInt):
            concrete = concrete_size(n, self.env)
            if concrete is not None:
                return concrete  # (the operands' values: the metadata may be stale)
            return sym_size(val)  # size arithmetic over symbolic sizes: an expression
        if isinstance(val, (torch.SymFloat, torch.SymBool)):
            return self._size_float(n)
        args = torch.fx.node.map_arg(n.args, lambda a: self.env[a])
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: self.env[a])
        if target in EXTERN_OPS:
            if foreign_device(n, self.ctx.device_type) is not None:
                return self.extern(target, args, kwargs)  # (on another device: ATen's, as is)
            # a library call; a lowering of it (if any) prepares its operands' layouts
            fn = lowering_for(target)
            return fn(self, *args, **kwargs) if fn else self.extern(target, args, kwargs)
        elsewhere = foreign_device(n, self.ctx.device_type)
        if elsewhere is not None:
            return self.extern(target, args, kwargs, reason=elsewhere)
        if n.name in self.refused:
            return self.extern(target, args, kwargs, reason=self.refused[n.name])
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
        fn = lowering_for(target)
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
        vars: tuple[sympy.Symbol, ...] = (),
    ) -> Layout:
        if meta is not None and self._fx is not None and self._fx in self._graph_outputs:
            # a graph output gets the strides eager would give it
            eager = self._eager_layout(meta, sizes, dtype)
            if eager is not None:
                return eager
        if self.channels_last and len(sizes) == 4 and value is not None:
            # follow the activations' layout: kernels over a channels-last tensor store
            # channels-last too, so the next convolution needs no conversion
            strides = _following_strides(sizes, value, vars, self.layouts)
            if strides is not None:
                return Layout(tuple(sizes), strides, 0, dtype, self.ctx.device_type)
        return Layout(tuple(sizes), contiguous_strides(sizes), 0, dtype, self.ctx.device_type)

    def _eager_layout(
        self, meta: torch.Tensor, sizes: tuple[int, ...], dtype: torch.dtype
    ) -> Layout | None:
        """``meta``'s strides (eager's), where it has these sizes and they are dense."""
        strides = strides_of(meta)
        if shape_of(meta) != tuple(sizes) or not _dense(sizes, strides):
            return None
        return Layout(tuple(sizes), strides, 0, dtype, self.ctx.device_type)

    def output_layout(
        self, index: int, sizes: tuple[int, ...], dtype: torch.dtype
    ) -> Layout | None:
        """Eager's layout for output ``index`` of the multi-output op being lowered, where
        that output leaves the graph (as :meth:`_layout_for` gives a single-output op's);
        None where it does not, or eager's strides are not dense."""
        val = self._fx.meta.get("val") if self._fx is not None else None
        if not isinstance(val, (tuple, list)) or not isinstance(val[index], torch.Tensor):
            return None
        if not any(
            u.target is operator.getitem and u.args[1] == index and u in self._graph_outputs
            for u in self._fx.users
        ):
            return None
        return self._eager_layout(val[index], sizes, dtype)

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
        layout = layout or self._layout_for(sizes, dtype, self._meta_or_none(), value, vs)
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
            same.origins.extend(o for o in self.origins if o not in same.origins)
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
        node.origins.extend(self.origins)
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
        out_dtype: torch.dtype | None = None,
    ) -> Any:
        """Run ``target`` through ATen (a library call, or a fallback when ``reason``).

        Outputs get the trace's strides, or ``out_strides`` where given; a call that
        answers in other strides is copied into them at run time. ``out_dtype``: a helper
        call of a lowering whose one output has the node's sizes in another dtype. A fallback with
        The ``fallback`` option off raises :class:`sdk.LoweringError` instead.
        """
        if reason is not None and not self.ctx.core_options.fallback:
            raise LoweringError(
                f"{op_name(target)} ({self.origin}) would run through ATen, op by op: "
                f"{reason}; options['fallback'] is False (set it True to allow this, or "
                f"lower the op in sdk:{self.ctx.plugin})"
            )
        if any(isinstance(x, Expr) for x in tree_flatten((args, kwargs))[0]):
            # (an ATen call takes numbers; the program holds no host arithmetic on sizes)
            raise Unsupported(
                f"{op_name(target)} ({self.origin}) takes a float computed from sizes"
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
                dtype = out_dtype or v.dtype
                layout = Layout(shape_of(v), st, sym_size(v.storage_offset()), dtype, v.device.type)
                outputs.append((name, layout))
                if v.device.type != self.ctx.device_type:
                    results.append(self._hosted(name, layout))
                else:
                    self.layouts[name] = layout
                    results.append(StorageView(name, layout))
            else:
                outputs.append(None)
                results.append(None)
        own = self.vendor.get(self._fx.name) if reason is None else None
        if own is not None and target is not self._fx.target:
            own = None  # a lowering's helper call (not the node's op): ATen's
        node = ExternNode(
            self.fresh("extern"),
            target,
            args,
            kwargs,
            outputs,
            list(self.origins),
            reason,
            isinstance(val, (list, tuple)),
            own,
        )
        if (
            target is aten.copy_.default
            and isinstance(args[0], StorageView)
            and self.is_input(args[0].buffer)
        ):
            node.into = args[0].buffer  # a graph input written in place: core/lowering/mutation
        self.nodes.append(node)
        name = op_name(target)
        if reason is None:
            self.extern_report[node.name] = len(self.externs)
            by = self.ctx.plugin if own is not None else ""
            self.externs.append(ExternReport(name, self._fx.name, by))
        else:
            self.fallbacks.append(FallbackReport(name, reason, self._fx.name))
        return tuple(results) if node.multi_output else results[0]

    def require_layout(self, x: Any, strides: tuple[int, ...]) -> Any:
        """``x`` as a buffer with these strides: itself if it already is one; a value
        computed only for this call, stored in them; else a copy (a computed node stored
        in them)."""
        if isinstance(x, TensorValue) and x.storage is None:
            layout = Layout(tuple(x.sizes), strides, 0, x.dtype, self.ctx.device_type)
            return self.pointwise(x.sizes, x.dtype, x.load, layout=layout).storage
        st = self.realize(x)
        if not isinstance(st, StorageView):
            return st
        lay = st.layout
        if same_strides(lay.sizes, lay.strides, strides):
            return st
        layout = Layout(tuple(lay.sizes), strides, 0, lay.dtype, self.ctx.device_type)
        if relayout(self, x, st, layout):
            return st
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
        self.views.update(self.origins)
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


class _IndexedView(TensorValue):
    """A view that is not strided (e.g. reshape of a transposed input)."""

    def __init__(
        self, base: TensorValue, sizes: tuple[int, ...], reindex: Callable[[Index], Index]
    ) -> None:
        self.base, self.sizes, self.dtype, self.reindex = base, tuple(sizes), base.dtype, reindex

    def load(self, index: Index) -> Expr:
        return self.base.load(tuple(self.reindex(tuple(index))))

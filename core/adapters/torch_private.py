"""Adapter over private torch APIs (torch._dynamo, torch._functorch, torch._decomp, ...).

Everything else in the SDK calls these functions instead of reaching into
``torch._*`` itself. The Dynamo/AOTAutograd-facing ones live in :mod:`core.adapters.dynamo`
and are re-exported here. Supported: torch 2.11 and 2.13.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch._decomp import core_aten_decompositions, get_decompositions
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_unflatten  # noqa: F401 (the SDK's pytree)

# Dynamo- and AOTAutograd-facing functions live in .dynamo; re-exported so that callers keep
# importing them from here
from .dynamo import (  # noqa: F401
    CompiledWith,
    aot_compile,
    cached_backends,
    compiled_parts,
    configure_for_benchmark,
    dynamo_forget_backend,
    dynamo_graph_count,
    dynamo_has_backend,
    graph_break_count,
    graph_break_mark,
    graph_break_of,
    graph_break_reasons,
    graph_break_sites,
    locate_graph_breaks,
    model_state_inputs,
    module_buffers,
    report_output_strides,
    reported_output_strides,
    reset_dynamo,
    run_with,
    user_error,
)
from .foreach import foreach_decompositions
from .padding import padding_decompositions

# what wrapper plugins (CUDA graphs) need at run time lives in .runtime; re-exported for
# sdk.runtime, which reaches it through the private-torch seam
from .runtime import (  # noqa: F401
    cuda_tensor_constructor,
    data_ptrs_equal,
    set_access_error,
    step_token,
    storage_impl,
    storage_new_alias,
    storage_weakref,
    use_counters,
)

# Dynamo's symbolic sizes as the IR's sizes live in .sizes; re-exported so that callers keep
# importing them from here
from .sizes import (  # noqa: F401
    SymbolicUnsupported,
    _to_index_expr,
    non_size_symbols,
    requirements_made,
    requiring,
    shape_env_of,
    shape_env_state,
    size_hint_of,
    specializing,
    sym_size,
)

aten = torch.ops.aten
prims = torch.ops.prims
OpOverload = torch._ops.OpOverload
OpOverloadPacket = torch._ops.OpOverloadPacket


def defined_op(qualname: str) -> OpOverloadPacket | None:
    """The op ``"namespace::name"`` if torch defines it now, else None (without importing the
    module that would define it)."""
    namespace, name = qualname.split("::")
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return None


#: Ops decomposed on top of Core ATen so that they reach lowering as
#: pointwise math and reductions the scheduler can fuse.
_EXTRA_DECOMPOSED = [
    getattr(aten, name)
    for name in (
        "_softmax",
        "_log_softmax",
        "native_layer_norm",
        "gelu",
        "std",
        "native_dropout",
        # gradient clipping's norms (_foreach_norm's per-tensor op): a reduction of pointwise math
        "linalg_vector_norm",
        # every batch-norm entry point, as Inductor does: some mutate running stats
        "native_batch_norm",
        "_native_batch_norm_legit",
        "_native_batch_norm_legit_functional",
        "_native_batch_norm_legit_no_training",
        "_batch_norm_with_update",
        "_batch_norm_with_update_functional",
        "_batch_norm_no_update",
        "batch_norm_backward",
        # Inductor decomposes these too; without, each ran in ATen op by op (found on HF
        # models not tuned for: GroupNorm in PoolFormer and BiT; the others by probing
        # common layers): GroupNorm, LeakyReLU, adaptive max pooling's forward, dist.
        # (flip and fmax/fmin have lowerings of their own. ELU is left to plugins: the
        # vendor scaffold's example lowers it, which a decomposition here would bypass.)
        "native_group_norm",
        "leaky_relu",
        "adaptive_max_pool2d",
        "dist",
    )
    if hasattr(aten, name)  # not every op exists in every supported torch
]


#: Core ATen decompositions that are wrong for training graphs: the CPU flash
#: attention decomposition returns attention weights where its backward expects
#: the log-sum-exp (it exists for export; Inductor excludes it too).
_NOT_DECOMPOSED = [aten._scaled_dot_product_flash_attention_for_cpu.default]


def default_decompositions() -> dict[Any, Callable[..., Any]]:
    """The core's default table: Core ATen decompositions plus the extras above (a new
    dict each call, over one table built once: building it takes ~0.1 s)."""
    return dict(_default_decompositions())


@functools.cache
def _default_decompositions() -> dict[Any, Callable[..., Any]]:
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(_EXTRA_DECOMPOSED))
    # each multi-tensor op as its per-tensor op, once per list element
    table.update(foreach_decompositions())
    table.update(padding_decompositions())  # (torch has none for these gradients)
    for op in _NOT_DECOMPOSED:
        table.pop(op, None)
    return table


def expand_ops(ops: Iterable[Any]) -> set[Any]:
    """OpOverloads named by ``ops`` (an OpOverloadPacket stands for all its overloads)."""
    out: set[Any] = set()
    for op in ops:
        if isinstance(op, OpOverloadPacket):
            out.update(getattr(op, name) for name in op.overloads())
        else:
            out.add(op)
    return out


@functools.cache
def derivative_ops(op: Any) -> frozenset[Any]:
    """The ATen ops autograd calls to differentiate ``op`` (``aten.gelu`` ->
    ``aten.gelu_backward``), found once per op by running its derivative on meta tensors.

    This is what AOTAutograd records in the backward graph where the forward has ``op``,
    before the decomposition table applies: an op a plugin keeps whole (``sdk_keep_ops``)
    keeps these too, so its backward is not decomposed either. Arguments are made from
    ``op``'s schema (tensors of one small shape, defaults, ones for sizes); an op that
    cannot run on such arguments (shapes that must agree otherwise, an unusual argument
    type) or has no derivative gives an empty set, and its backward is decomposed as before.
    """
    # whatever the caller's context (a compile under torch.no_grad() or inference_mode, a
    # tracing mode): the answer is cached for the process
    with torch.inference_mode(False), torch.enable_grad(), _disable_current_modes():
        return _derivative_ops(op)


def _derivative_ops(op: Any) -> frozenset[Any]:
    for shape in ((3, 3), (2, 3, 4, 4)):
        try:
            args = _sample_arguments(op._schema, shape)
        except TypeError:
            return frozenset()
        inputs = [a for a in tree_flatten(args)[0] if isinstance(a, torch.Tensor)]
        try:
            outs = [
                o
                for o in tree_flatten(op(*args))[0]
                if isinstance(o, torch.Tensor) and o.requires_grad
            ]
            if not outs:
                return frozenset()
            grads = [torch.ones_like(o) for o in outs]
            with _Recording() as rec:
                torch.autograd.grad(outs, inputs, grads, allow_unused=True)
        except Exception:  # noqa: BLE001 - these sample arguments do not fit: try others
            continue
        return frozenset(rec.ops)
    return frozenset()


def _sample_arguments(schema: Any, shape: tuple[int, ...]) -> list[Any]:
    """Positional arguments for ``schema`` on the meta device (TypeError: no sample)."""
    out: list[Any] = []

    def tensor() -> torch.Tensor:
        return torch.ones(shape, device="meta", requires_grad=True)

    for a in schema.arguments:
        if a.kwarg_only:
            if a.has_default_value():
                continue
            raise TypeError(f"keyword-only argument {a.name} has no default")
        t = a.type
        if a.has_default_value():
            out.append(a.default_value)
        elif isinstance(t, torch.TensorType):
            out.append(tensor())
        elif isinstance(t, torch.OptionalType):
            out.append(None)
        elif isinstance(t, torch.ListType) and isinstance(t.getElementType(), torch.TensorType):
            out.append([tensor(), tensor()])
        elif isinstance(t, torch.ListType):
            out.append([shape[-1]])
        elif isinstance(t, (torch.IntType, torch.SymIntType)):
            out.append(1)
        elif isinstance(t, torch.BoolType):
            out.append(False)
        elif isinstance(t, (torch.FloatType, torch.NumberType)):
            out.append(0.5)
        else:
            raise TypeError(f"argument {a.name} of type {t}")
    return out


class _Recording(TorchDispatchMode):
    """Records the ATen ops dispatched while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[Any] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops.add(func)
        return func(*args, **(kwargs or {}))


def decompose(
    gm: torch.fx.GraphModule, table: Mapping[Any, Callable[..., Any]], ops: Iterable[Any]
) -> torch.fx.GraphModule:
    """``gm`` traced again with ``table``: each call of one of ``ops`` (and what its
    decomposition calls, recursively) decomposed by ``table``, every other call as it is.
    ``gm`` itself when it calls none of ``ops``.

    The trace runs on the fake values of ``gm``'s placeholders, in their fake mode (with its
    shape environment when sizes are symbolic), so the new nodes' ``meta["val"]`` are as
    AOTAutograd would have made them.
    """
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    ops = set(ops)
    if not any(n.op == "call_function" and n.target in ops for n in gm.graph.nodes):
        return gm
    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode(vals)
    symbolic = any(isinstance(v, torch.SymInt) for v in vals) or any(
        isinstance(s, torch.SymInt)
        for v in vals
        if isinstance(v, torch.Tensor)
        for s in (*v.shape, *v.stride())
    )
    with mode if mode is not None else contextlib.nullcontext():
        return make_fx(
            torch.fx.Interpreter(gm).run,
            decomposition_table=table,
            tracing_mode="symbolic" if symbolic else "real",
        )(*vals)


def graph_ops() -> list[Any]:
    """The ``aten`` ops a functional ATen graph can hold: those that return a tensor, mutate
    nothing and have a kernel of their own (a ``CompositeImplicitAutograd`` op is traced
    through, into the ops it calls, before a graph exists)."""
    out = []
    for name in dir(aten):
        packet = getattr(aten, name, None)
        if not isinstance(packet, OpOverloadPacket):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if not tensor_op(op):
                continue
            try:
                implicit = torch._C._dispatch_has_kernel_for_dispatch_key(
                    op.name(), "CompositeImplicitAutograd"
                )
            except RuntimeError:  # listed, but not registered in this build
                continue
            if not implicit:
                out.append(op)
    return out


def decomposed_calls(
    op: Any, table: Mapping[Any, Callable[..., Any]], args: list[Any], kwargs: dict[str, Any]
) -> list[Any]:
    """The ops one call of ``op`` becomes under the decomposition table ``table`` (applied
    again to what a decomposition calls, as AOTAutograd does), in graph order."""
    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(lambda *a: op(*a, **kwargs), decomposition_table=table)(*args)
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


@dataclass(frozen=True)
class SchemaArgument:
    """One argument of an op's schema, as ``sdk ops`` needs it."""

    name: str
    type_name: str  # "Tensor", "List[int]", "number", "Optional[Tensor]" ...
    has_default: bool
    kwarg_only: bool


def schema_arguments(op: Any) -> list[SchemaArgument]:
    return [
        SchemaArgument(a.name, str(a.type), a.has_default_value(), a.kwarg_only)
        for a in op._schema.arguments
    ]


def tensor_op(op: Any) -> bool:
    """Whether ``op`` can be a call of a functional ATen graph: it returns a tensor, takes
    no ``out=`` and mutates nothing (``aten.sin.out`` and ``aten.sin.int``, Python-number
    math, cannot)."""
    schema = op._schema
    returns = [str(r.type) for r in schema.returns]
    return not schema.is_mutable and any("Tensor" in r for r in returns)


class LazyTable(Mapping):
    """A decomposition table built at its first use (AOTAutograd reads it only when it
    traces, so a cache hit never builds it)."""

    def __init__(self, build: Callable[[], Mapping[Any, Callable[..., Any]]]) -> None:
        self._build: Callable[[], Mapping[Any, Callable[..., Any]]] | None = build
        self._table: Mapping[Any, Callable[..., Any]] = {}

    def _get(self) -> Mapping[Any, Callable[..., Any]]:
        if self._build is not None:
            self._table, self._build = self._build(), None
        return self._table

    def __getitem__(self, op: Any) -> Callable[..., Any]:
        return self._get()[op]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def buffer_ops(
    device: torch.device,
) -> tuple[
    Callable[..., Any], Callable[..., Any] | None, Callable[..., Any], Callable[[], bool] | None
]:
    """The cheap tensor constructors a generated wrapper calls, as Inductor's wrappers do.

    Returns ``(empty, empty_fast, view, is_current)``:

    * ``empty(sizes, strides, dtype)`` allocates on ``device`` (``torch.empty_strided``);
    * ``empty_fast`` does the same through ``torch._C._dynamo.guards._empty_strided_<type>``
      (about half the host time), but on the *current* device of its type: it is only
      right while ``is_current()`` holds (``is_current`` is None when it always is, and
      ``empty_fast`` is None where torch has no such allocator);
    * ``view(t, sizes, strides, offset_increment)`` is ``as_strided`` relative to ``t``'s own
      storage offset, without the autograd view record (``_reinterpret_tensor``): for the
      wrapper's intermediates, which never need one.
    """
    guards = torch._C._dynamo.guards

    def empty(sizes: Any, strides: Any, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty_strided(sizes, strides, dtype=dtype, device=device)

    fast = getattr(guards, f"_empty_strided_{device.type}", None)
    is_current = None
    acc = torch.accelerator.current_accelerator()
    if fast is not None and acc is not None and acc.type == device.type:
        # an accelerator's allocator allocates on whichever of its devices is current
        if device.index is None:
            fast = None
        else:
            index, current = device.index, torch.accelerator.current_device_index

            def is_current() -> bool:
                return current() == index
    elif fast is not None and device.index is not None:
        fast = None  # devices of this type are numbered, and none can be checked current
    return empty, fast, guards._reinterpret_tensor, is_current


def is_fake(t: Any) -> bool:
    return isinstance(t, FakeTensor)


def fake_call(like: Any, make: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``make(*args, **kwargs)`` in the fake mode of the fake tensor ``like`` (a graph node's value), so a
    node a rewrite adds has a value of the graph's kind; a real one where ``like`` is real."""
    from torch._guards import detect_fake_mode

    mode = detect_fake_mode([like])
    with mode if mode is not None else contextlib.nullcontext():
        return make(*args, **kwargs)


def fake_strided() -> Callable[..., torch.Tensor]:
    """``make(sizes, strides, offset, dtype, device)``: a fake tensor of that layout, each of
    one fresh fake mode (a graph's node values, rebuilt in another process)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode(allow_non_fake_inputs=True)

    def make(sizes: Any, strides: Any, offset: int, dtype: Any, device: Any) -> torch.Tensor:
        with mode:
            return _strided_empty(sizes, strides, offset, dtype, device)

    return make


def _strided_empty(sizes: Any, strides: Any, offset: int, dtype: Any, device: Any) -> Any:
    n = offset + 1 + sum((sz - 1) * st for sz, st in zip(sizes, strides) if sz > 0)
    base = torch.empty((max(n, 1),), dtype=dtype, device=device)
    return base.as_strided(sizes, strides, offset)


def op_name(op: OpOverload) -> tuple[str, str, str]:
    """``op`` by name: (namespace, op, overload), which :func:`op_by_name` turns back into it
    in another process (torch cannot pickle an op overload)."""
    return op.namespace, op._opname, op._overloadname


def op_by_name(name: tuple[str, str, str]) -> OpOverload:
    namespace, op, overload = name
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)


def concrete_graph(gm: torch.fx.GraphModule, specs: tuple) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose node metadata is re-derived for inputs of these specs.

    Used for every variant the first trace did not describe (symbolic shapes,
    other strides): fake tensors of the specs' exact sizes, strides and offsets
    are propagated through a copy of the graph, so every ``meta["val"]`` is
    concrete and right for this variant. ``gm`` itself is not touched.
    """
    import copy

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    for node in graph.nodes:
        node.meta = copy.copy(node.meta)
    new = torch.fx.GraphModule(gm, graph)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    args: list[Any] = []
    with mode:
        for spec in specs:
            if hasattr(spec, "strides"):
                args.append(
                    _strided_empty(spec.sizes, spec.strides, spec.offset, spec.dtype, spec.device)
                )
            else:
                args.append(spec)
    FakeTensorProp(new, mode).propagate_dont_convert_inputs(*args)
    return new


def saved_for_backward(num_outputs: int) -> frozenset[int] | None:
    """The positions of the forward graph's outputs that AOTAutograd saves for the
    backward (activations: no user sees them), where AOTAutograd is compiling a forward
    graph of ``num_outputs`` outputs now; else None."""
    from torch._guards import TracingContext

    tc = TracingContext.try_get()
    meta = getattr(tc, "fw_metadata", None) if tc is not None else None
    if meta is None or getattr(tc, "output_strides", None) is None:
        return None
    try:
        saved = range(num_outputs)[meta.tensors_saved_for_backwards_slice]
        symints = range(num_outputs)[meta.symints_saved_for_backwards_slice]
    except (AssertionError, AttributeError, TypeError):
        return None
    if len(symints) != (meta.num_symints_saved_for_bw or 0) or not saved:
        return None
    if saved[-1] + 1 + len(symints) != num_outputs:
        return None  # not the whole forward graph (a chain's partition)
    return frozenset(saved)


def outside_dispatch_modes() -> Any:
    """A context with no Python dispatch mode active: a graph-level plugin's runtime, which
    may call ATen from C++, runs there (AOTAutograd runs a program's first call under a mode
    of its own that checks custom ops, and such a mode sees the runtime's internal calls)."""
    return _disable_current_modes()


def fresh_result(op: Any) -> bool:
    """Whether ``op`` (a graph node's target) is an ATen op whose results are new tensors:
    no view of an input, no alias in its schema's returns."""
    if not isinstance(op, OpOverload) or op.is_view:
        return False
    return all(r.alias_info is None for r in op._schema.returns)


def real_mode() -> Any:
    """A context in which tensor factories make real tensors, also inside a compile's fake
    mode (AOTAutograd calls the backend under it)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()


def has_kernel(op: OpOverload, device_type: str) -> bool:
    """Whether ATen has a kernel of ``op`` for tensors of this device type."""
    try:
        key = torch._C._dispatch_key_for_device(device_type)
        return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)
    except (RuntimeError, ValueError):
        return False


def opinfo_db() -> list[Any]:
    """torch's OpInfo database (``torch.testing._internal``), which the conformance suite
    sweeps. Importing it needs ``expecttest``; an ImportError says what is missing.

    torch's test utilities warn (``ImportWarning``) when ``hypothesis`` is absent: that
    derandomizes torch's own property tests, none of which the suite runs, so the import
    is quiet about it (under ``-W error`` it would otherwise fail, but only in the first
    test of a process to import the database)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*hypothesis.*", category=ImportWarning)
        from torch.testing._internal.common_methods_invocations import op_db

    return op_db


def compile_worker_pool(workers: int) -> Any:
    """torch's compile worker pool (``SubprocPool``, the one Inductor compiles in) of
    ``workers`` processes, for ``sdk.workers``: ``submit(fn, *args) -> Future``,
    ``shutdown()``, ``running``. A sidecar process forks the workers, so that they never run
    the user's ``__main__`` again; it initializes CUDA first, which keeps them off the GPU."""
    from torch._inductor.compile_worker.subproc_pool import SubprocPool

    return SubprocPool(workers)

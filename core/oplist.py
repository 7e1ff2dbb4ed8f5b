"""``python -m sdk ops``: what becomes of each ATen op, read from the core's own tables.

Each op is in one of four places, in the order a compile asks:

* **library**: a library call (``EXTERN_OPS``): ATen runs it between the kernels, or the
  plugin's ``sdk_extern`` function where the op is one of ``LIBRARY_OPS``;
* **decomposed**: in the decomposition table AOTAutograd traces with (the core's default
  table; with a plugin, its ``sdk_decompositions`` added and its ``sdk_keep_ops`` taken
  out): it never reaches lowering, the ops it decomposes into do;
* **lowered**: the core's lowering table (``LOWERINGS``) has it (or, with a plugin, its
  ``sdk_lower_op`` lowered the probe): it becomes loop IR, and the listing names the IR ops
  (``sdk.ir.OPS``, and reductions) its lowering produced on a probe;
* **fallback**: none of these: it runs through ATen, op by op, between the kernels.

The IR ops come from lowering each op once on small meta tensors built from its schema
(:func:`probe`), or from :data:`_SAMPLES` for an op whose schema alone gives no call it
accepts (pooling wants an image, a permutation as many entries as the rank); an op with no
sample it accepts says so instead. With a plugin that has no ``sdk_lower_op``, an op the
core does not lower is not probed: it falls back. The ops
listed are every ATen op a functional graph can hold (a tensor result, no mutation, a kernel
of its own) and every op of those tables, or the ops asked for.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
import torch.fx

from sdk.errors import describe
from sdk.plugin import Capability, CompileContext, CoreOptions, PluginOptions

from .adapters import torch_private as tp
from .fallback import op_name
from .guards import spec_of
from .ir.expr import Op, walk
from .ir.graph import ExternNode
from .lowering.lowerer import Lowerer
from .lowering.optable import EXTERN_OPS, LIBRARY_OPS, LOWERINGS, resolve_late
from .session import CompileSession

PLACES = ("lowered", "decomposed", "library", "fallback")
#: the device of the probes' tensors: no data, no kernel runs
_PROBE_DEVICE = "meta"


@dataclass(frozen=True)
class OpEntry:
    """What becomes of one ATen op."""

    op: str  # "aten.add.Tensor"
    place: str  # one of PLACES
    ir: tuple[str, ...] = ()  # lowered: the IR ops its probe produced
    note: str = ""  # why not probed, who lowers it, what a fallback's reason is
    #: decomposed, where asked for by name: the ops its decomposition calls
    becomes: tuple[str, ...] = ()


@dataclass
class _NoHooks:
    """The core alone: no plugin answers."""

    def sdk_op_support(self, **_: Any) -> None:
        return None

    def sdk_lower_op(self, **_: Any) -> None:
        return None


@dataclass
class Tables:
    """The tables one listing reads: the decomposition table and the hooks lowering asks."""

    decompositions: dict[Any, Callable[..., Any]]
    hooks: Any = field(default_factory=_NoHooks)
    plugin: str = ""
    capabilities: frozenset[Capability] = frozenset()
    kept: frozenset[Any] = frozenset()
    #: whether the plugin has an ``sdk_lower_op`` (else an op the core does not lower falls
    #: back, and is not probed)
    lowers_ops: bool = False


def core_tables() -> Tables:
    return Tables(tp.default_decompositions())


def plugin_tables(session: CompileSession) -> Tables:
    """The tables of a compile by ``session``'s plugin: its decompositions and kept ops."""
    ctx = _context(
        session.info.name, session.info.capabilities, session.options, session.plugin_options
    )
    table = session.decompositions(ctx)
    kept = frozenset(op for op in tp.default_decompositions() if op not in table)
    lowers = session.hooks.implements("sdk_lower_op")
    return Tables(table, session.hooks, session.info.name, session.info.capabilities, kept, lowers)


def _context(
    plugin: str,
    capabilities: frozenset,
    core: CoreOptions | None = None,
    own: PluginOptions | None = None,
) -> CompileContext:
    core = replace(core or CoreOptions(), fallback=True, channels_last=False)
    own = own or PluginOptions()
    return CompileContext(
        plugin=plugin or "(core)",
        device_type=_PROBE_DEVICE,
        graph_kind="inference",
        graph_name="ops",
        options={**core.as_dict(), **own.as_dict()},
        capabilities=capabilities,
        core_options=core,
        plugin_options=own,
    )


def universe(tables: Tables) -> set[Any]:
    """Every ATen op a functional graph can hold (:func:`tp.graph_ops`) and every op the
    tables name, without ``out=`` or in-place forms or Python-number math."""
    resolve_late()
    ops = set(tp.graph_ops())
    ops |= {op for op in tables.decompositions if isinstance(op, tp.OpOverload)}
    ops |= set(LOWERINGS) | EXTERN_OPS | tables.kept
    return {op for op in ops if tp.tensor_op(op)}


def resolve(names: Iterable[str]) -> list[Any]:
    """ATen ops by name: ``elu`` (its overloads a graph can hold), ``aten.elu``,
    ``aten.elu.default`` (that one), or ``prims.mul.default``. Raises ``ValueError`` naming
    the ones torch does not have."""
    out, unknown = [], []
    for name in names:
        parts = name.split(".")
        ns = parts[0] if parts[0] in ("aten", "prims") else "aten"
        parts = parts[1:] if parts[0] in ("aten", "prims") else parts
        packet = getattr(getattr(torch.ops, ns), parts[0], None) if parts else None
        if not isinstance(packet, tp.OpOverloadPacket):
            unknown.append(name)
            continue
        if len(parts) > 1:
            op = getattr(packet, parts[1], None)
            if op is None:
                unknown.append(name)
                continue
            out.append(op)
        else:
            every = [getattr(packet, o) for o in packet.overloads()]
            out.extend([op for op in every if tp.tensor_op(op)] or every)
    if unknown:
        raise ValueError(
            f"no ATen op named {', '.join(unknown)} in torch {torch.__version__}; give names "
            "such as elu, aten.elu or aten.elu.default"
        )
    return out


def listing(tables: Tables, ops: Iterable[Any] | None = None) -> list[OpEntry]:
    """Where each op goes (all of :func:`universe`, or ``ops``, whose decompositions are
    traced too), sorted by name."""
    chosen = universe(tables) if ops is None else set(ops)
    ctx = _context(tables.plugin, tables.capabilities)
    return [place(op, tables, ctx, detail=ops is not None) for op in sorted(chosen, key=op_name)]


def place(op: Any, tables: Tables, ctx: CompileContext, detail: bool = False) -> OpEntry:
    """Where ``op`` goes; ``detail``: for a decomposed op, also what it decomposes into and
    the IR ops those become."""
    name = op_name(op)
    if op in EXTERN_OPS or op in LIBRARY_OPS:  # (a convolution's lowering makes the call)
        own = "ATen, or the plugin's sdk_extern" if op in LIBRARY_OPS else "ATen"
        return OpEntry(name, "library", note=f"runs through {own}")
    if op in tables.decompositions:
        entry = _decomposed(op, tables, ctx) if detail else OpEntry(name, "decomposed")
        if op in LOWERINGS:  # reached by lowering only where a plugin keeps it whole
            also = "the core lowers it too, where sdk_keep_ops keeps it"
            entry = replace(entry, note=f"{entry.note}; {also}" if entry.note else also)
        return entry
    kept = " (kept whole by the plugin's sdk_keep_ops)" if op in tables.kept else ""
    if op not in LOWERINGS and not tables.lowers_ops:
        return OpEntry(name, "fallback", note="no IR lowering for this op" + kept)
    try:
        ir, fallback = probe(op, tables.hooks, ctx)
    except Exception as exc:  # noqa: BLE001 - no sample this op accepts: say so
        why = describe(exc, one_line=True)[:120]
        if op in LOWERINGS:
            return OpEntry(name, "lowered", note=f"IR ops not probed ({why}){kept}")
        return OpEntry(
            name,
            "fallback",
            note=f"no IR lowering in the core; the plugin's not probed ({why}){kept}",
        )
    if fallback is not None:
        return OpEntry(name, "fallback", note=fallback + kept)
    by = "" if op in LOWERINGS else f"lowered by sdk:{tables.plugin}'s sdk_lower_op"
    if not ir:  # a view (index arithmetic), a copy, a fill, a gather
        by = f"{by}; loads and stores only" if by else "loads and stores only"
    return OpEntry(name, "lowered", tuple(sorted(ir)), note=(by + kept).strip())


def _decomposed(op: Any, tables: Tables, ctx: CompileContext) -> OpEntry:
    """A decomposed op with the ops one call of it becomes, and what becomes of those."""
    name = op_name(op)
    try:
        args, kwargs = sample_arguments(op)
        calls = tp.decomposed_calls(op, tables.decompositions, args, kwargs)
    except Exception as exc:  # noqa: BLE001 - no sample this op accepts: say so
        why = describe(exc, one_line=True)[:120]
        return OpEntry(name, "decomposed", note=f"decomposition not traced ({why})")
    parts = [place(c, tables, ctx) for c in dict.fromkeys(calls) if isinstance(c, tp.OpOverload)]
    ir = sorted({i for p in parts for i in p.ir})
    left = [p.op for p in parts if p.place in ("fallback", "library")]
    note = f"IR ops: {' '.join(ir) or 'none'}" + (
        f"; through ATen or a library: {', '.join(left)}" if left else ""
    )
    return OpEntry(name, "decomposed", note=note, becomes=tuple(p.op for p in parts))


def probe(op: Any, hooks: Any, ctx: CompileContext) -> tuple[set[str], str | None]:
    """Lower one call of ``op`` on small meta tensors made from its schema: the IR ops it
    produced, and the fallback's reason where it fell back (None where it did not)."""
    args, kwargs = sample_arguments(op)
    out = op(*args, **kwargs)
    graph = torch.fx.Graph()
    inputs: list[torch.Tensor] = []

    def node_of(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            p = graph.placeholder(f"x{len(inputs)}")
            p.meta["val"] = x
            inputs.append(x)
            return p
        if isinstance(x, (list, tuple)):
            return type(x)(node_of(y) for y in x)
        return x

    call = graph.call_function(
        op, tuple(node_of(a) for a in args), {k: node_of(v) for k, v in kwargs.items()}
    )
    call.meta["val"] = out
    if isinstance(out, (tuple, list)):
        results = []
        for i, o in enumerate(out):
            item = graph.call_function(operator.getitem, (call, i))
            item.meta["val"] = o
            results.append(item)
        graph.output(tuple(results))
    else:
        graph.output((call,))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    L = Lowerer(gm, tuple(spec_of(x, real=False) for x in inputs), ctx, hooks)
    L.run()
    if L.fallbacks:
        return set(), L.fallbacks[0].reason
    ir: set[str] = set()
    for n in L.nodes:
        if isinstance(n, ExternNode):
            continue
        ir |= {e.name for e in walk([n.value]) if isinstance(e, Op)}
        if n.reduce_op:
            ir.add(f"reduce:{n.reduce_op}")
    return ir, None


#: argument names that hold indices, masks and the like: a tensor of that dtype
_INT_TENSORS = ("index", "indices", "target", "offsets", "input_lengths", "target_lengths")


def _meta(*size: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(*size, dtype=dtype, device=_PROBE_DEVICE)


def _index(*size: int) -> torch.Tensor:
    return torch.zeros(*size, dtype=torch.int64, device=_PROBE_DEVICE)


#: one call each, for the ops whose schema alone gives no valid sample (images of 4
#: dimensions, a pad of even length, a permutation as long as the rank, both bounds None);
#: ``test_every_op_is_probed`` fails for an op that needs one and has none
_SAMPLES: dict[str, Callable[[], tuple[list[Any], dict[str, Any]]]] = {
    "aten._adaptive_avg_pool2d.default": lambda: ([_meta(1, 2, 4, 4), [2, 2]], {}),
    "aten.clamp.default": lambda: ([_meta(2, 3), 0.0, 1.0], {}),
    "aten.clamp.Tensor": lambda: ([_meta(2, 3), _meta(2, 3), _meta(2, 3)], {}),
    "aten.constant_pad_nd.default": lambda: ([_meta(2, 3), [1, 1], 0.0], {}),
    # one value per list element in a 1-d tensor
    "aten._foreach_addcdiv.Tensor": lambda: ([[_meta(2, 3)] * 2] * 3 + [_meta(2)], {}),
    "aten._foreach_addcmul.Tensor": lambda: ([[_meta(2, 3)] * 2] * 3 + [_meta(2)], {}),
    "aten._foreach_mm.default": lambda: ([[_meta(2, 3)] * 2, [_meta(3, 2)] * 2], {}),
    "aten.empty_permuted.default": lambda: (
        [[2, 3], [1, 0]],
        {"dtype": torch.float32, "device": torch.device(_PROBE_DEVICE)},
    ),
    "aten.gather.default": lambda: ([_meta(2, 3), 1, _index(2, 2)], {}),
    "aten.max_pool2d_with_indices.default": lambda: ([_meta(1, 2, 4, 4), [2, 2], [2, 2]], {}),
    # grad_output, input, kernel, stride, padding, dilation, ceil_mode, indices
    "aten.max_pool2d_with_indices_backward.default": lambda: (
        [_meta(1, 2, 2, 2), _meta(1, 2, 4, 4), [2, 2], [2, 2], [0, 0], [1, 1], False]
        + [_index(1, 2, 2, 2)],
        {},
    ),
    "aten.permute.default": lambda: ([_meta(2, 3), [1, 0]], {}),
    # the core's max pooling with int8 offsets in the window (core.lowering.pool_offsets):
    # input, kernel, stride, padding, ceil_mode; the backward's grad_output first, offsets last
    "sdk.max_pool2d_offsets.default": lambda: (
        [_meta(1, 2, 4, 4), [2, 2], [2, 2], [0, 0], False],
        {},
    ),
    "sdk.max_pool2d_offsets_backward.default": lambda: (
        [_meta(1, 2, 2, 2), _meta(1, 2, 4, 4), [2, 2], [2, 2], [0, 0], False]
        + [_meta(1, 2, 2, 2, dtype=torch.int8)],
        {},
    ),
    # grad_output, input, padding (left, right, top, bottom)
    "aten.replication_pad2d_backward.default": lambda: (
        [_meta(1, 2, 5, 6), _meta(1, 2, 3, 3), [1, 2, 1, 1]],
        {},
    ),
    "aten.repeat.default": lambda: ([_meta(2, 3), [2, 1]], {}),
    # a few indices per row, the scatter the core lowers (others run through ATen)
    "aten.scatter.src": lambda: ([_meta(2, 3), 1, _index(2, 1), _meta(2, 1)], {}),
    "aten.scatter.value": lambda: ([_meta(2, 3), 1, _index(2, 1), 1.0], {}),
    "aten.split_with_sizes.default": lambda: ([_meta(2, 3), [1, 1]], {}),
    "prims.amax.default": lambda: ([_meta(2, 3), [1]], {}),
    "prims.amin.default": lambda: ([_meta(2, 3), [1]], {}),
    "prims.sum.default": lambda: ([_meta(2, 3), [1]], {}),
    "prims.var.default": lambda: ([_meta(2, 3), [1], 1.0], {}),
    "prims.broadcast_in_dim.default": lambda: ([_meta(2, 3), [4, 2, 3], [1, 2]], {}),
    "prims.iota.default": lambda: (
        [4],
        {
            "start": 0,
            "step": 1,
            "dtype": torch.int64,
            "device": torch.device(_PROBE_DEVICE),
            "requires_grad": False,
        },
    ),
    "prims.squeeze.default": lambda: ([_meta(1, 3), [0]], {}),
    "prims.transpose.default": lambda: ([_meta(2, 3), [1, 0]], {}),
}


def sample_arguments(op: Any) -> tuple[list[Any], dict[str, Any]]:
    """Arguments for one call of ``op``: its entry in :data:`_SAMPLES`, else each argument
    without a default from its schema type and name (a 2x3 float tensor, dim 0, None where
    it is optional, ...); raises ``TypeError`` for a type it has no sample for."""
    sample = _SAMPLES.get(op_name(op))
    if sample is not None:
        return sample()
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for a in tp.schema_arguments(op):
        if a.name == "device" and a.kwarg_only:
            # a factory makes its tensor on the probes' device too (left to its default it
            # would be the CPU: another device than the probe's graph, so ATen's)
            kwargs["device"] = torch.device(_PROBE_DEVICE)
            continue
        if a.has_default:
            continue
        value = _sample(a.type_name, a.name)
        if a.kwarg_only:
            kwargs[a.name] = value
        else:
            args.append(value)
    return args, kwargs


def _tensor(name: str) -> torch.Tensor:
    if name in _INT_TENSORS:
        return torch.zeros(2, dtype=torch.int64, device=_PROBE_DEVICE)
    if name in ("mask", "condition"):
        return torch.zeros(2, 3, dtype=torch.bool, device=_PROBE_DEVICE)
    return torch.empty(2, 3, device=_PROBE_DEVICE)


def _sample(type_name: str, name: str) -> Any:
    if type_name.startswith("Optional["):
        return None
    if type_name == "Tensor":
        return _tensor(name)
    if type_name in ("List[Tensor]", "List[Optional[Tensor]]"):
        return [_tensor(name), _tensor(name)]
    if type_name in ("int", "SymInt"):
        return 0 if "dim" in name else 1
    if type_name in ("List[int]", "List[SymInt]"):
        if name in ("size", "shape"):
            return [2, 3]
        if name == "stride":
            return [3, 1]
        if name == "normalized_shape":
            return [3]
        return [0] if "dim" in name else [1]
    if type_name in ("float", "number"):
        return 1.0
    if type_name == "List[number]":  # one per element of a List[Tensor]'s sample
        return [1.0, 1.0]
    if type_name == "bool":
        return False
    raise TypeError(f"no sample for an argument {name} of type {type_name}")

"""A chain of plugins sharing one ATen graph, op by op.

The ``chain`` option names the plugins after the backend's own, in order of priority. Each
plugin claims call nodes: a kernel-level plugin those its program can lower
(:func:`core.lowering.refusal`), a graph-level plugin those its ``sdk_claim_nodes`` hook
accepts. :func:`core.partition.partition` cuts the graph into maximal acyclic partitions,
each owned by the first plugin that claims its ops; what nobody claims stays in the outer
graph and runs in ATen. Each partition is then compiled on its own:

* by a kernel-level plugin, through the build stage, as a whole graph is
  (:func:`core.stages.build.compile_partition`): its own report, variants, cache and
  fallbacks;
* by a graph-level plugin, through ``sdk_compile_subgraph`` (or ``sdk_load_subgraph`` from the
  whole-graph cache), with device copies when the plugin runs elsewhere than the graph.

A partition whose compile fails goes to the next kernel-level plugin of the chain, else to
ATen: that partition only. What a graph-level partition gets beyond its inputs (frozen
parameters) and how its outputs come back (strides, preallocated buffers, donated inputs) is
:mod:`core.subgraph_io`. The outer graph, with each partition's ``call_module`` node bound to
its compiled callable, is the program.

A chain whose later plugins claim nothing the backend's own plugin refuses is not partitioned:
the backend compiles the whole graph as before (refused ops run as ATen calls inside its
program) and the chain is its whole-graph fallback.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.fx

from sdk.errors import LoweringError, SDKError, describe
from sdk.plugin import (
    Capability,
    ClaimGroups,
    CompileContext,
    CompiledSubgraph,
    PluginKind,
    Support,
)
from sdk.report import FallbackReport, GraphReport, OpPlacement, PartitionReport

from . import fallback, graph_cache, isolate
from .adapters import torch_private as tp
from .adapters.torch_private import concrete_graph
from .guards import spec_of
from .lowering import refusal
from .partition import Claimant, Plan, partition
from .registry import CannotCompile, strict
from .session import CompileSession
from .stages import build
from .subgraph_io import (
    Frozen,
    buffers,
    copy_graph,
    dead_after,
    frozen_inputs,
    is_static,
    output_vals,
    placeholder_vals,
)

#: Claims of one plugin: node name -> None (claimed) or the reason it is refused. By name:
#: the partitioner rebuilds the graph between rounds (names stay, node objects do not).
Claims = dict[str, "str | None"]


def compile_partitioned(
    session: CompileSession,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    parameters: Mapping[int, Any] | None = None,
) -> tuple[Callable, GraphReport] | None:
    """``gm`` compiled as partitions of the chain and its report, or None where one plugin
    takes it whole (see the module's docstring). ``session`` is the backend plugin's
    :class:`~core.pipeline.Session`; the program takes AOTAutograd's boxed list.
    ``parameters``: ``{input index: nn.Parameter or buffer}`` of an inference graph (those it
    does not write), which a graph-level plugin declaring ``PluginInfo.frozen_parameters``
    gets as constants."""
    plugins = (ctx.plugin, *session.options.chain)
    graph_level = session.info.kind == PluginKind.GRAPH
    if len(plugins) == 1 and not graph_level:
        return None
    report = GraphReport(
        name=ctx.graph_name, kind=ctx.graph_kind, plugin=ctx.plugin, notes=ctx.notes
    )
    report.aten_ops = len(fallback.aten_calls(gm))
    start = time.perf_counter()
    work = copy_graph(gm)
    places = [n for n in work.graph.nodes if n.op == "placeholder"]
    params = {places[i].name: p for i, p in (parameters or {}).items() if i < len(places)}
    claims = {p: _claims(session, ctx, p, work, report) for p in plugins}
    if not graph_level and not _others_take(claims, plugins):
        return None
    plan = partition(
        work,
        [_claimant(p, claims[p]) for p in plugins],
        min_size=session.options.min_partition_size,
    )
    _place(plan, report, plugins)
    for cut in plan.cuts:
        ctx.note(cut)
    if report.fallbacks and not session.options.fallback:
        left = "; ".join(
            f"{p.op} ({', '.join(f'sdk:{name}: {why}' for name, why in p.refusals)})"
            for p in report.placements
            if p.plugin == "aten"
        )
        raise LoweringError(
            f"graph {ctx.graph_name}: no plugin of the chain claims {left}; and "
            "options['fallback'] is False (set it True to run those ops in ATen, or add a "
            "plugin that takes them to the chain)"
        )
    for part in plan.partitions:
        sub = getattr(work, part.name)
        _fill_constants(work, part.name, sub)
        frozen = frozen_inputs(session, ctx, part.plugin, work, part.name, params)
        dead = dead_after(work, part.name)
        timing, began = _Timing(), time.perf_counter()
        fn, compiled_by, cache, note, runner = _compile_partition(
            session, ctx, part.plugin, part.name, sub, frozen, dead, timing
        )
        timing.total = time.perf_counter() - began
        setattr(work, part.name, _Bound(fn))
        report.partitions.append(_describe(part, sub, compiled_by, cache, note, runner, timing))
    work.recompile()
    report.compile_seconds = time.perf_counter() - start
    forward = work.forward

    def run(args: list[Any]) -> Any:
        return forward(*args)

    run._boxed_call = True  # AOTAutograd's convention: one list of inputs
    return run, report


# -- claims --------------------------------------------------------------------------


def _claims(
    session: CompileSession,
    ctx: CompileContext,
    plugin: str,
    gm: torch.fx.GraphModule,
    report: GraphReport,
) -> Claims:
    """Plugin ``plugin``'s answer for every call node of ``gm``."""
    calls = [n for n in gm.graph.nodes if n.op == "call_function"]
    if plugin == ctx.plugin and session.broken:
        return {n.name: session.broken for n in calls}
    s = session.peer(plugin)
    c = s.context(ctx.graph_kind, ctx.graph_name, ctx.device_type)
    kernel_level = s.info.kind == PluginKind.CODEGEN
    if kernel_level and plugin != ctx.plugin and ctx.device_type not in s.info.device_types:
        # its kernels would get this graph's tensors (graph-level plugins get copies)
        why = f"sdk:{plugin} runs on {', '.join(s.info.device_types)}, not {ctx.device_type}"
        return {n.name: why for n in calls}
    hook = "sdk_op_support" if kernel_level else "sdk_claim_nodes"
    try:
        if kernel_level:
            return _kernel_claims(s, c, calls)
        return _graph_claims(s.hooks.sdk_claim_nodes(ctx=c, gm=gm), calls)
    except SDKError:
        raise
    except Exception as exc:  # noqa: BLE001 - a claim hook that raises claims nothing
        cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
        report.hook_faults.append(session.registry.fault(plugin, hook, cause, strict(c)))
        return {n.name: f"its {hook} raised {type(cause).__name__}: {cause}" for n in calls}


def _kernel_claims(s: CompileSession, c: CompileContext, calls: list[torch.fx.Node]) -> Claims:
    """A kernel-level plugin's claims. The graph was traced with only what every plugin of
    the chain decomposes alike (:meth:`core.pipeline.Session.table`): an op this plugin
    decomposes itself it claims (its compile decomposes it first), and so an op it keeps
    whole (it keeps it to lower it), unless its ``sdk_op_support`` refuses it."""
    decomposes = s.decomposes(c)
    out: Claims = {}
    for n in calls:
        if n.target in decomposes:
            out[n.name] = None
        elif n.target in s.kept:
            verdict = s.hooks.sdk_op_support(ctx=c, op=n.target, node=n)
            out[n.name] = verdict.reason if verdict is not None and not verdict.ok else None
        else:
            out[n.name] = refusal(n, s.hooks, c)
    return out


class _Grouped(dict):
    """A graph-level plugin's claims answered as :class:`sdk.ClaimGroups`: the claims by node
    name, and its groups (node names) with their minimum size."""

    groups: list[list[str]]
    min_size: int


def _graph_claims(answer: Any, calls: list[torch.fx.Node]) -> Claims:
    """A graph-level plugin's ``sdk_claim_nodes`` answer as claims (None: claims nothing)."""
    if answer is None:
        answer = {}
    if isinstance(answer, ClaimGroups):
        return _group_claims(answer, calls)
    if not isinstance(answer, Mapping):
        raise TypeError(
            f"sdk_claim_nodes returned {type(answer).__name__}, not a mapping of nodes to "
            "sdk.Support nor an sdk.ClaimGroups"
        )
    out: Claims = {}
    for n in calls:
        verdict = answer.get(n)
        if isinstance(verdict, Support):
            out[n.name] = None if verdict.ok else (verdict.reason or "refused")
        else:
            out[n.name] = "not claimed"
    return out


def _group_claims(answer: ClaimGroups, calls: list[torch.fx.Node]) -> Claims:
    known = set(calls)
    out = _Grouped()
    out.groups, out.min_size = [], answer.min_size
    for k, group in enumerate(answer.groups):
        for n in group:
            if n not in known:
                what = n.op if isinstance(n, torch.fx.Node) else type(n).__name__
                raise TypeError(
                    f"sdk_claim_nodes' ClaimGroups group {k} holds {n!r} ({what}), not a "
                    "call_function node of the graph it was given"
                )
        out.groups.append([n.name for n in group])
    grouped = {name for g in out.groups for name in g}
    for n in calls:
        verdict = answer.refused.get(n)
        if n.name in grouped:
            out[n.name] = None
        elif isinstance(verdict, Support) and not verdict.ok:
            out[n.name] = verdict.reason or "refused"
        else:
            out[n.name] = "not claimed"
    return out


def _claimant(plugin: str, claims: Claims) -> Claimant:
    if isinstance(claims, _Grouped):
        return Claimant(plugin, _lookup(claims), claims.groups, claims.min_size)
    return Claimant(plugin, _lookup(claims))


def _lookup(claims: Claims) -> Callable[[torch.fx.Node], tuple[bool, str]]:
    def claim(node: torch.fx.Node) -> tuple[bool, str]:
        reason = claims.get(node.name, "not claimed")
        return reason is None, reason or ""

    return claim


def _others_take(claims: dict[str, Claims], plugins: Sequence[str]) -> bool:
    """Whether a later plugin claims an op the first refuses (else: no partitioning)."""
    first = claims[plugins[0]]
    refused = [n for n, reason in first.items() if reason is not None]
    return any(claims[p].get(n) is None for p in plugins[1:] for n in refused)


def _place(plan: Plan, report: GraphReport, plugins: Sequence[str]) -> None:
    """Fill the report's placements, and the ops left to ATen as its fallbacks."""
    for name, owner in plan.owner.items():
        if plan.ops.get(name) == "_operator.getitem":
            continue  # an output of a multi-output op: placed with it
        refused = tuple(plan.refusals.get(name, ()))
        op = plan.ops.get(name, "")
        report.placements.append(OpPlacement(name, op, owner, refused))
        if owner == "aten":
            why = "; ".join(f"sdk:{p}: {r}" for p, r in refused) or "not claimed"
            report.fallbacks.append(
                FallbackReport(op, f"no plugin of the chain claims it ({why})", name)
            )


# -- compiling one partition ---------------------------------------------------------


def _compile_partition(
    session: CompileSession,
    ctx: CompileContext,
    plugin: str,
    name: str,
    sub: torch.fx.GraphModule,
    frozen: Mapping[int, Any] | None = None,
    dead: frozenset[int] = frozenset(),
    timing: _Timing | None = None,
) -> tuple[Callable, str, str, str, str]:
    """(callable taking the partition's inputs positionally, who compiled it, cache state,
    note, what runs its program: PartitionReport.runner): by ``plugin``, else the next kernel-level plugin of the chain, else ATen.
    ``frozen``: the partition's inputs ``plugin`` gets as constants (frozen parameters and
    buffers);
    ``dead``: the inputs nothing reads after the partition (an output may be written into
    one, ``CompiledSubgraph.aliases``);
    ``timing``: where the plugin's own compile time goes."""
    chain = (ctx.plugin, *session.options.chain)
    later = [
        p for p in chain[chain.index(plugin) + 1 :] if session.kind_of(p) == PluginKind.CODEGEN
    ]
    inputs = placeholder_vals(sub)
    graph_name = f"{ctx.graph_name}.{name}"
    s = session.peer(plugin)
    c = s.context(ctx.graph_kind, graph_name, ctx.device_type)
    if s.info.kind == PluginKind.CODEGEN:
        fn, done = build.compile_partition(s.narrowed(tuple(later)), c, sub, inputs)
        if not done.chain_failures:
            return _positional(fn), plugin, "", "", done.runner
        # the partition went down the chain: who compiled it, and why the others did not
        by = done.plugin if done.plugin != plugin else "aten"
        return _positional(fn), by, "", "; ".join(done.chain_failures), done.runner
    if not c.has(Capability.SYMBOLIC_SIZES) and not all(is_static(x) for x in inputs):
        # a graph-level plugin that does not declare symbolic sizes gets concrete ones
        make = None
        if frozen:  # (each shape's graph with its parameters as constants)

            def make(graph: torch.fx.GraphModule) -> Callable:
                return Frozen(
                    _frozen_compile,
                    s,
                    c,
                    build.redecomposed(s, c, graph),
                    placeholder_vals(graph),
                    frozen,
                    dead,
                    tell=ctx.note,
                )

        return _outside_modes(_PerShape(s, c, sub, make)), plugin, "per shape", "", ""
    try:
        if frozen:
            fn = Frozen(
                functools.partial(_frozen_compile, timing=timing),
                s,
                c,
                build.redecomposed(s, c, sub),
                inputs,
                frozen,
                dead,
                tell=ctx.note,
            )
            return fn, plugin, fn.cache, "; ".join([fn.note, *c.notes]), ""
        graph = build.redecomposed(s, c, sub)
        fn, cache = _graph_compile(s, c, graph, inputs, dead=dead, timing=timing)
        return fn, plugin, cache, "; ".join(c.notes), ""
    except SDKError:
        raise
    except Exception as exc:  # noqa: BLE001 - this partition goes to the next plugin
        if not all(is_static(x) for x in inputs) and not c.core_options.debug:
            note = (
                f"sdk:{plugin} refused symbolic sizes ({describe(exc, one_line=True)}): "
                "compiled per shape"
            )
            return _outside_modes(_PerShape(s, c, sub)), plugin, "per shape", note, ""
        if strict(c):
            raise LoweringError(
                f"sdk:{plugin} could not compile partition {graph_name} and strict mode "
                f"(options fallback=False or debug) is on: {describe(exc)}"
            ) from exc
        cannot = isinstance(exc, CannotCompile)
        reason = str(exc) if cannot else describe(exc, one_line=True)
        note = reason if cannot else f"sdk:{plugin} failed: {reason}"
    ops = [fallback.op_name(n.target) for n in fallback.aten_calls(sub)]
    went_to = f"sdk:{later[0]}" if later else "ATen"
    session.registry.warn_fallback(
        plugin, reason, ops, went_to, f"partition {graph_name}", cannot_compile=cannot
    )
    if later:
        s = session.peer(later[0]).narrowed(tuple(later[1:]))
        c = s.context(ctx.graph_kind, graph_name, ctx.device_type)
        c.note(note)
        fn, done = build.compile_partition(s, c, sub, inputs)
        return _positional(fn), later[0], "", note, done.runner
    run, _ = fallback.whole_graph(sub, note)
    return lambda *args: run(list(args)), "aten", "", note, ""


def _graph_compile(
    s: CompileSession,
    c: CompileContext,
    sub: torch.fx.GraphModule,
    inputs: list[Any],
    *,
    dead: frozenset[int] = frozenset(),
    timing: _Timing | None = None,
) -> tuple[Callable, str]:
    """A graph-level plugin's callable for ``sub``: from the cache, else its compiler;
    taking the partition's inputs and returning its outputs (into buffers the core
    allocates where the plugin asked, ``CompiledSubgraph.preallocated_outputs``).
    ``timing.plugin``: the seconds its ``sdk_compile_subgraph`` took."""
    key, cache = _cache_key(s, c, sub, inputs)
    missed = ""
    if key is not None:
        fn, missed, doc = _load(s, c, key)
        if fn is not None:
            fn = buffers(
                s, c, sub, fn, doc.get("preallocated", False), dict(doc.get("aliases", [])), dead
            )
            return _on_device(fn, s.info.device_types, c.device_type, sub), "hit"
    if s.cannot_compile:
        raise CannotCompile(c.plugin, s.cannot_compile)
    began = time.perf_counter()
    if isolate.wanted(s.info, c.core_options):  # (a crash there is this partition's fault)
        result, took = isolate.compile_subgraph(s, c, sub, inputs)
    else:
        result = s.hooks.sdk_compile_subgraph(ctx=c, gm=copy_graph(sub), example_inputs=inputs)
        took = time.perf_counter() - began
    if timing is not None:
        timing.plugin += took
    if not isinstance(result, CompiledSubgraph):
        raise TypeError(
            f"sdk:{c.plugin} sdk_compile_subgraph returned {type(result).__name__}, not an "
            "sdk.CompiledSubgraph"
        )
    fn = buffers(s, c, sub, result.fn, result.preallocated_outputs, result.aliases, dead)
    if key is not None and result.artifact is not None:
        doc = {
            "kind": "subgraph",
            "preallocated": result.preallocated_outputs,
            "aliases": sorted(result.aliases.items()),
        }
        try:
            graph_cache.store().put(key, graph_cache.pack(doc, [result.artifact]))
            cache = (
                f"stored, replacing an entry that could not be loaded ({missed})"
                if missed
                else "stored"
            )
        except OSError as exc:
            cache = f"not stored: {exc}"
    elif key is not None:
        cache = f"off: sdk:{c.plugin} returned no artifact"
    return _on_device(fn, s.info.device_types, c.device_type, sub), cache


def _frozen_compile(
    s: CompileSession,
    c: CompileContext,
    sub: torch.fx.GraphModule,
    inputs: list[Any],
    dead: frozenset[int],
    timing: _Timing | None = None,
) -> tuple[Callable, str]:
    """A partition with frozen parameters compiled, and its cache state: the key holds the
    digests of the frozen values (:func:`core.graph_cache.constant_digest`)."""
    return _graph_compile(s, c, sub, inputs, dead=dead, timing=timing)


def _cache_key(
    s: CompileSession, c: CompileContext, sub: torch.fx.GraphModule, inputs: list[Any]
) -> tuple[str | None, str]:
    if not c.core_options.cache:
        return None, "off"
    plugin_key = s.hooks.sdk_cache_key(ctx=c)
    if plugin_key is None:
        return None, f"off: sdk:{c.plugin} does not implement sdk_cache_key"
    specs = tuple(_layout(x) for x in inputs)
    try:
        return graph_cache.graph_key(sub, specs, c, s.info.version, plugin_key), ""
    except graph_cache.Uncacheable as exc:
        return None, f"not stored: {exc}"


def _load(
    s: CompileSession, c: CompileContext, key: str
) -> tuple[Callable | None, str, dict[str, Any]]:
    """The cached artifact rebuilt by the plugin, or None (a miss) and why, if not absent;
    and the entry's document (its calling convention)."""
    data = graph_cache.store().get(key)
    if data is None:
        return None, "", {}
    try:
        doc, blobs = graph_cache.unpack(data)
        if doc.get("kind") != "subgraph" or len(blobs) != 1:
            return None, "the entry is not a partition's artifact", {}
        fn = s.hooks.sdk_load_subgraph(ctx=c, artifact=blobs[0])
    except SDKError:
        raise
    except Exception as exc:  # noqa: BLE001 - bytes the plugin cannot use are a miss
        return None, describe(exc, one_line=True), {}
    if fn is None:
        return None, f"sdk:{c.plugin} sdk_load_subgraph returned None", {}
    return fn, "", doc


def _layout(x: Any) -> Any:
    """What a cache key needs of one input: layout and dtype (symbolic sizes by name)."""
    if isinstance(x, torch.Tensor):
        return (
            tuple(str(s) for s in x.shape),
            tuple(str(s) for s in x.stride()),
            str(x.storage_offset()),
            str(x.dtype),
            x.device.type,
        )
    return repr(x) if isinstance(x, torch.SymInt) else x


def _on_device(
    fn: Callable, device_types: Sequence[str], device: str, sub: torch.fx.GraphModule
) -> Callable:
    """``fn``, with its tensors copied to the plugin's device and back when the graph's
    device is not one the plugin declares."""
    fn = _outside_modes(fn)
    if device in device_types:
        return fn
    there = torch.device(device_types[0])
    back = [v.device if isinstance(v, torch.Tensor) else None for v in output_vals(sub)]

    def copied(*args: Any) -> Any:
        moved = [a.to(there) if isinstance(a, torch.Tensor) else a for a in args]
        outs = fn(*moved)
        return tuple(
            o.to(d) if isinstance(o, torch.Tensor) and d is not None else o
            for o, d in zip(outs, back, strict=True)
        )

    return copied


def _outside_modes(fn: Callable) -> Callable:
    """``fn`` (a graph-level plugin's runtime) called with no Python dispatch mode active:
    what it runs is opaque to torch, and a mode (AOTAutograd's check of a program's first
    call) would see the runtime's own ATen calls."""

    def run(*args: Any) -> Any:
        with tp.outside_dispatch_modes():
            return fn(*args)

    return run


class _PerShape:
    """A graph-level plugin's partition compiled for each concrete shape it meets, where the
    plugin refused the symbolic graph. The variants are keyed by the inputs' full layout (as
    a kernel-level program's are, :class:`core.guards.Specializing`); a shape the plugin
    refuses too runs in ATen."""

    def __init__(
        self,
        s: CompileSession,
        c: CompileContext,
        sub: torch.fx.GraphModule,
        make: Callable[[torch.fx.GraphModule], Callable] | None = None,
    ) -> None:
        """``make``: compiles one shape's graph (default: the plugin's compile, cached)."""
        self._s, self._c, self._sub, self._make = s, c, sub, make
        self._variants: dict[tuple, Callable] = {}

    def __call__(self, *args: Any) -> Any:
        specs = tuple(spec_of(a) for a in args)
        fn = self._variants.get(specs)
        if fn is None:
            fn = self._variants[specs] = self._compile(specs)
        return fn(*args)

    def _compile(self, specs: tuple) -> Callable:
        graph = concrete_graph(self._sub, specs)
        try:
            if self._make is not None:
                return self._make(graph)
            return _graph_compile(self._s, self._c, graph, placeholder_vals(graph))[0]
        except SDKError:
            raise
        except Exception as exc:  # noqa: BLE001 - this shape runs in ATen
            if strict(self._c):
                raise
            ops = [fallback.op_name(n.target) for n in fallback.aten_calls(graph)]
            self._s.registry.warn_fallback(
                self._c.plugin,
                f"shapes {specs}: {describe(exc, one_line=True)}",
                ops,
                "ATen",
                f"partition {self._c.graph_name} for shapes {specs}",
                cannot_compile=isinstance(exc, CannotCompile),
            )
            self._c.note(
                f"sdk:{self._c.plugin} failed for shapes {specs}: "
                f"{describe(exc, one_line=True)}; ATen runs them"
            )
            run, _ = fallback.whole_graph(graph, "")
            return lambda *args: run(list(args))


# -- glue ----------------------------------------------------------------------------


class _Timing:
    """Where one partition's compile spent its time: in all, and in the plugin's compile."""

    def __init__(self) -> None:
        self.total = 0.0
        self.plugin = 0.0


class _Bound(torch.nn.Module):
    """A compiled partition in the outer graph's ``call_module`` slot."""

    def __init__(self, fn: Callable) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> tuple[Any, ...]:
        return tuple(self.fn(*args))


def _positional(fn: Callable) -> Callable:
    """A compiled graph (AOTAutograd's boxed convention where it says so) called
    positionally."""
    if getattr(fn, "_boxed_call", False):
        return lambda *args: fn(list(args))
    return fn


def _fill_constants(outer: torch.fx.GraphModule, name: str, sub: torch.fx.GraphModule) -> None:
    """A partition input read from a constant of the outer graph (``get_attr``, whose node
    carries no fake value) gets the constant itself as its example value."""
    call = next(n for n in outer.graph.nodes if n.op == "call_module" and n.target == name)
    places = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for place, arg in zip(places, call.args, strict=True):
        if "val" not in place.meta and isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
            value = outer
            for attr in arg.target.split("."):
                value = getattr(value, attr)
            place.meta["val"] = value


def _describe(
    part: Any,
    sub: torch.fx.GraphModule,
    compiled_by: str,
    cache: str,
    note: str,
    runner: str = "",
    timing: _Timing | None = None,
) -> PartitionReport:
    ins, in_bytes = _crossing(placeholder_vals(sub))
    outs, out_bytes = _crossing(output_vals(sub))
    nodes = tuple(f"{n.name}: {fallback.op_name(n.target)}" for n in fallback.aten_calls(sub))
    return PartitionReport(
        part.name,
        part.plugin,
        compiled_by,
        nodes,
        ins,
        in_bytes,
        outs,
        out_bytes,
        cache,
        note,
        runner,
        timing.total if timing is not None else 0.0,
        timing.plugin if timing is not None else 0.0,
    )


def _crossing(vals: Any) -> tuple[int, int]:
    count = size = 0
    for v in vals:
        if isinstance(v, torch.Tensor):
            count += 1
            numel = v.numel()
            size += int(numel) * v.element_size() if isinstance(numel, int) else 0
    return count, size

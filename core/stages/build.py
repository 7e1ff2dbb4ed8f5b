"""The build stage: one ATen graph compiled whole by one plugin, into a program of one
variant per input layout (or one for every value of its symbolic sizes).

Each variant goes through :func:`core.program.build_program` (lowering, scheduling, the
plugin's codegen, memory planning, the wrapper), from the whole-graph cache where it is there;
where the plugin fails, the next kernel-level plugin of the chain, then ATen op by op. A chain
compiles each of its partitions through :func:`compile_partition`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from sdk.errors import SDKError, describe
from sdk.plugin import Capability, CompileContext, PluginInfo, PluginKind
from sdk.report import FusionRefusal, GraphReport

from .. import fallback, logs, program, warm
from ..adapters import torch_private as tp
from ..guards import Specializing, TensorSpec, size_bindings, spec_of
from ..ir.index import size_hints
from ..lowering.layouts import TRACED_STRIDES
from ..registry import CannotCompile, observe
from ..session import CompileSession
from . import wrap
from .job import Built, Job

_log = logging.getLogger(__name__)


def run(session: CompileSession, job: Job) -> Built:
    """``job``'s graph compiled whole by ``session``'s plugin (the chain is each variant's
    fallback): a :class:`~core.guards.Specializing` program, one variant per input layout
    (or one for every value of the symbolic sizes), built now or at its first call."""
    ctx, recipe, whole, example_inputs = job.ctx, job.recipe, job.whole, job.example_inputs
    as_traced, gm = job.gm, redecomposed(session, ctx, job.gm)
    report = GraphReport(
        name=ctx.graph_name, kind=ctx.graph_kind, plugin=ctx.plugin, notes=ctx.notes
    )
    capture = job.capture
    # (a chain's partition: not in AOTAutograd's cache on its own)
    report.warm = "off" if capture is None else "miss" if capture.cache_tag else capture.warm
    same = gm is as_traced and job.aten_ops is not None
    report.aten_ops = job.aten_ops if same else len(fallback.aten_calls(gm))
    recipe.report = report
    start = time.perf_counter()
    keys = recipe.keys

    guarded = not whole and ctx.graph_kind in ("forward", "inference")
    static = all(_is_static(x) for x in example_inputs)
    traced = tuple(spec_of(x, real=not tp.is_fake(x)) for x in example_inputs) if static else None

    def build(specs: tuple) -> Callable:
        # a variant the trace did not describe gets its own, concrete metadata
        same = (
            traced is not None
            and all(_same_layout(a, b) for a, b in zip(specs, traced, strict=True))
            and _placeholders_match(gm, specs)
        )
        graph = gm if same else _retraced(gm, specs)

        def common() -> torch.fx.GraphModule:  # for the chain: before redecomposing
            return as_traced if same else tp.concrete_graph(as_traced, specs)

        return build_variant(session, ctx, graph, specs, report, keys=keys, common=common)

    recipe.guarded = guarded
    if static:
        # a forward or inference graph's inputs are Dynamo's (user inputs and
        # parameters), whose guards hold sizes and strides; a backward graph's are not
        recipe.first = traced
        program = Specializing(build, traced, dynamo_guarded=guarded)
    else:
        program = _symbolic(session, ctx, gm, example_inputs, report, build, guarded, recipe)
        if program is None:  # a variant per concrete shape, from the first real call
            recipe.guarded = False  # (each variant checks its whole layout)
            program = _LazySpecializing(build, recipe)
    recipe.program = program
    return Built(
        ctx, gm, program, report, start, wrap=not whole, recipe=recipe, capture=job.capture
    )


def redecomposed(
    session: CompileSession, ctx: CompileContext, gm: torch.fx.GraphModule
) -> torch.fx.GraphModule:
    """``gm`` (traced with the session's common table, :meth:`~core.session.CompileSession.table`)
    decomposed by the session's plugin's own table: the ops another plugin of the chain
    keeps, which this one decomposes. ``gm`` itself when there is nothing to decompose
    (always, without a chain). The session answers for the tables; the graph is the stage's."""
    extra = session.decomposes(ctx)
    return tp.decompose(gm, session.own_table(ctx), extra) if extra else gm


def compile_partition(
    session: CompileSession, ctx: CompileContext, gm: torch.fx.GraphModule, inputs: list[Any]
) -> tuple[Callable, GraphReport]:
    """One partition of a chain's split (:mod:`core.chain`), compiled whole by ``session``'s
    plugin (its chain: the plugins to try after it) and not wrapped; with its report (who
    compiled it, and why the plugins before did not)."""
    ctx = dataclasses.replace(ctx, written_inputs=fallback.written_inputs(gm))
    recipe = warm.Recipe(ctx.graph_kind, ctx.device_type)
    ops = len(fallback.aten_calls(gm))
    built = run(session, Job(ctx, gm, inputs, recipe, whole=True, aten_ops=ops))
    return wrap.finish(session, built), built.report


def _symbolic(
    session: CompileSession,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    example_inputs: list[Any],
    report: GraphReport,
    build: Callable,
    guarded: bool,
    recipe: warm.Recipe,
) -> Specializing | None:
    """One program for every value of the graph's symbolic sizes, or None (and why, in
    ``report.sizes``) where the plugin or the graph needs a variant per shape.

    The sizes stay sympy expressions through lowering, scheduling and rendering, and
    kernels take the size symbols' values as arguments. Anything that cannot handle a
    symbolic size raises, and the graph is compiled per shape instead; a compile that
    *specialized* a size (``int(symint)`` adds a guard to Dynamo's ShapeEnv, which a
    backward graph's caller never checks) is thrown away the same way.
    """
    if Capability.SYMBOLIC_SIZES not in session.info.capabilities:
        report.sizes = f"per shape: sdk:{session.info.name} does not declare SYMBOLIC_SIZES"
        return None
    if session.broken:
        report.sizes = f"per shape: {session.broken}"
        return None
    try:
        # integers that are not sizes (an int argument Dynamo made dynamic, an offset
        # that may be negative) are specialized on their traced values, which the guard
        # reads from the int inputs they are and checks
        special = tp.non_size_symbols(example_inputs)
        made: list = []  # the specs' size requirements (a stride's Max(1, ...)), for the lowering's
        with tp.specializing(special), tp.requiring(made):
            specs = tuple(symbolic_spec(x) for x in example_inputs)
        where = size_bindings(specs)
        hints = {
            sym: hint
            for x, spec in zip(example_inputs, specs)
            for sym, hint in _hints(x, spec).items()
        }
        if set(where) - set(hints):
            raise tp.SymbolicUnsupported("a size symbol has no value at compile time")
    except TypeError as exc:
        report.sizes = f"per shape: {exc}"
        return None
    env = tp.shape_env_of(example_inputs)
    before = tp.shape_env_state(env)
    notes = len(ctx.notes)
    try:
        with size_hints(hints), tp.specializing(special), tp.requiring(made):
            fn = build_variant(
                session, ctx, gm, specs, report, per_shape_on_failure=True, keys=recipe.keys
            )
    except SDKError:
        raise  # the user's options forbid what the compile needs (fallback=False)
    except Exception as exc:  # noqa: BLE001 - any failure: compile per shape
        if session.options.debug:  # SDK_DEBUG=1: say where symbolic sizes stopped
            raise
        del ctx.notes[notes:]
        report.sizes = f"per shape: {describe(exc)}"
        return None
    if tp.shape_env_state(env) != before:
        del ctx.notes[notes:]
        report.sizes = (
            "per shape: compiling specialized a symbolic size (an int() of a "
            "SymInt somewhere in lowering or the plugin)"
        )
        return None
    report.sizes = "symbolic: " + ", ".join(sorted(s.name for s in where))
    requires = getattr(fn, "requires", ())
    if requires:  # (a call that breaks one gets a variant for its sizes)
        report.sizes += "; requires " + ", ".join(f"{t} <= {n}" for t, n in requires)
    if special:
        report.sizes += "; specialized: " + ", ".join(
            f"{name}={value}" for name, value in sorted(special.items())
        )
    try:
        general = Specializing(build, specs, general=fn, dynamo_guarded=guarded)
    except ValueError as exc:  # a size requirement its check cannot read from the inputs
        del ctx.notes[notes:]
        report.sizes = f"per shape: {describe(exc)}"
        return None
    recipe.first, recipe.general = specs, True
    return general


def build_variant(
    session: CompileSession,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    specs: tuple,
    report: GraphReport,
    **kw: Any,
) -> Callable:
    """One variant of the program (see :func:`_build_variant`), its time the build stage's."""
    with logs.stage(_log, "build", ctx.graph_name, times=report.stage_seconds) as detail:
        fn = _build_variant(session, ctx, gm, specs, report, **kw)
        detail.append(f"a variant by sdk:{report.plugin} ({len(report.kernels)} kernels)")
    return fn


def _build_variant(
    session: CompileSession,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    specs: tuple,
    report: GraphReport,
    per_shape_on_failure: bool = False,
    keys: dict[tuple, str | None] | None = None,
    key: str | None = None,
    common: Callable[[], torch.fx.GraphModule] | None = None,
) -> Callable:
    """Compile one variant; on failure try the chain, then the op-level fallback.
    ``common``: the variant's graph as traced, before this plugin's own decompositions
    (:func:`redecomposed`), which each plugin of the chain decomposes by its own.
    ``per_shape_on_failure`` (a symbolic variant): raise instead, and take no op-level
    fallback that the symbolic sizes caused. ``keys`` gets the variant's key in the
    whole-graph cache (None: not a program of this session's plugin stored there);
    ``key`` is the key to store this session's plugin's program under (a restored
    recipe's), instead of one computed from ``gm``."""
    keys = {} if keys is None else keys
    keys[specs] = None
    if per_shape_on_failure:
        elsewhere = _not_on(session.info, ctx.device_type)
        if elsewhere:  # (compiled per shape, where the plugin is skipped for the same)
            raise RuntimeError(elsewhere)
        fn, part = program.build_program(session, ctx, gm, specs)
        fill(report, ctx.plugin, part)
        announce(session, ctx, report)
        keys[specs] = part.key
        return fn
    errors = [session.broken] if session.broken else []
    # (plugin, one-line reason, whether it could not compile here) of each plugin that failed
    # this graph: warned about
    failed = [(ctx.plugin, session.broken.splitlines()[0], False)] if session.broken else []
    for plugin in (ctx.plugin, *session.options.chain):
        if plugin == ctx.plugin and session.broken:
            continue
        if session.kind_of(plugin) != PluginKind.CODEGEN:
            continue  # a graph-level plugin takes partitions (core.chain), not programs
        peer = session.peer(plugin)
        elsewhere = _not_on(peer.info, ctx.device_type)
        if elsewhere:
            errors.append(elsewhere)
            continue  # its kernels would be handed this graph's tensors
        c = (
            ctx
            if plugin == ctx.plugin
            else peer.context(ctx.graph_kind, ctx.graph_name, ctx.device_type)
        )
        try:
            graph = gm
            if plugin != ctx.plugin:
                # its own decompositions, not the failed plugin's (nor its kept ops)
                graph = redecomposed(peer, c, common() if common is not None else gm)
                if peer.broken:
                    errors.append(peer.broken)
                    failed.append((plugin, peer.broken.splitlines()[0], False))
                    continue
            fn, part = program.build_program(
                peer, c, graph, specs, key=key if plugin == ctx.plugin else None
            )
        except SDKError:
            raise
        except Exception as exc:  # noqa: BLE001 - recorded, then the next in the chain
            if session.options.debug:
                raise
            if isinstance(exc, CannotCompile):  # (not in the cache)
                errors.append(str(exc))
                failed.append((plugin, str(exc), True))
            else:
                errors.append(f"sdk:{plugin} failed: {describe(exc)}")
                failed.append((plugin, describe(exc, one_line=True), False))
            continue
        fill(report, plugin, part)
        if failed:  # (no call with the graph where nothing failed: the walk, tests/walk.py)
            _warn_fell_back(session, ctx, gm, failed, f"sdk:{plugin}")
        if errors:  # the chain took over: say why the plugins before it did not
            report.notes.append(f"compiled by sdk:{plugin} after: {'; '.join(errors)}")
            report.chain_failures[:] = errors
            # the kernels cover the graph as this plugin decomposed it
            report.aten_ops = len(fallback.aten_calls(graph))
        else:
            keys[specs] = part.key
        announce(session, c, report)
        return fn
    return _in_aten(session, ctx, gm, report, errors, failed)


def _in_aten(
    session: CompileSession,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    report: GraphReport,
    errors: list[str],
    failed: list[tuple[str, str, bool]],
) -> Callable:
    """``gm`` run op by op in ATen, where no plugin of the chain compiled it (``errors``:
    why not, each plugin's; ``failed``: what to warn about); an error with
    ``fallback=False``."""
    if not session.options.fallback:
        raise SDKError(
            f"graph {ctx.graph_name} could not be compiled and options['fallback'] is "
            f"False: {'; '.join(errors)}"
        )
    fn, fallbacks = fallback.whole_graph(gm, "; ".join(errors))
    if failed:
        _warn_fell_back(session, ctx, gm, failed, "ATen")
    report.chain_failures[:] = errors
    report.kernels.clear()
    report.externs.clear()
    report.view_nodes = ()
    report.fusion_refusals.clear()
    report.core_fusion_refusals.clear()
    report.passes.clear()
    report.choices.clear()
    report.tuning = ""
    report.fallbacks[:] = fallbacks
    announce(session, ctx, report)
    return fn


def _warn_fell_back(
    session: CompileSession,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    failed: list[tuple[str, str, bool]],
    went_to: str,
) -> None:
    """A :class:`sdk.PluginFallbackWarning` for each plugin that failed to compile the
    graph ``gm``, which ``went_to`` runs instead (once per plugin and reason, as a chain's
    partitions are warned about: :meth:`core.registry.Registry.warn_fallback`; once per
    process for a plugin that cannot compile here)."""
    ops = [fallback.op_name(n.target) for n in fallback.aten_calls(gm)]
    for plugin, reason, cannot in failed:
        session.registry.warn_fallback(
            plugin, reason, ops, went_to, f"graph {ctx.graph_name}", cannot_compile=cannot
        )


def fill(report: GraphReport, plugin: str, part: Any) -> None:
    report.kernels[:] = part.kernels
    report.externs[:] = part.externs
    report.fallbacks[:] = part.fallbacks
    report.view_nodes = tuple(sorted(part.views))
    report.fusion_refusals[:] = [
        FusionRefusal(d.first, d.second, d.reason) for d in part.decisions if d.by == "plugin"
    ]
    report.core_fusion_refusals[:] = [
        FusionRefusal(d.first, d.second, d.reason) for d in part.decisions if d.by == "core"
    ]
    report.plugin = plugin
    report.cache = part.cache
    report.cold_compile_seconds = part.cold_seconds if part.cache == "hit" else 0.0
    report.runner, report.program = part.runner, part.program
    report.python_launches = part.python_launches
    report.hook_faults.extend(part.hook_faults)
    report.passes[:] = part.passes
    report.choices[:] = part.choices
    report.tuning = part.tuning
    for stage, took in part.stage_seconds.items():  # (every variant built so far)
        report.build_stages[stage] = report.build_stages.get(stage, 0.0) + took


def announce(session: CompileSession, ctx: CompileContext, report: GraphReport) -> None:
    report.nondeterministic[:] = _nondeterministic(session, ctx.plugin, report)
    for f in report.fallbacks:
        observe(
            session.registry, ctx, report.hook_faults, "sdk_on_fallback", op=f.op, reason=f.reason
        )


def _nondeterministic(session: CompileSession, plugin: str, report: GraphReport) -> list[str]:
    """The report's ATen steps that the plugin declares not deterministic on its device."""
    rec = session.registry.records.get(plugin)
    table = rec.info.nondeterministic_ops if rec is not None else {}
    steps = [(e.op, e.node, "library call") for e in report.externs if not e.plugin]
    steps += [(f.op, f.node, "fallback") for f in report.fallbacks]
    out = []
    for op, node, what in steps:
        why = table.get(op) or table.get(op.rsplit(".", 1)[0])
        if why:
            out.append(f"{what} {op} ({node}): {why}")
    return out


class _LazySpecializing:
    """Specializes on the first real call (graphs with symbolic shapes)."""

    def __init__(self, build: Callable, recipe: warm.Recipe | None = None) -> None:
        self._build = build
        self._inner: Specializing | None = None
        self._recipe = recipe

    _boxed_call = True

    def __call__(self, *args: Any) -> Any:
        if len(args) == 1 and type(args[0]) is list:
            args = args[0]
        if self._inner is None:
            specs = tuple(spec_of(a) for a in args)
            self._inner = Specializing(self._build, specs)
            if self._recipe is not None:
                self._recipe.first = specs
        return self._inner(*args)


def _retraced(gm: torch.fx.GraphModule, specs: tuple) -> torch.fx.GraphModule:
    """:func:`~core.adapters.torch_private.concrete_graph` for ``specs``; each input whose
    strides differ from the trace's keeps those in its meta (``TRACED_STRIDES``)."""
    traced = {
        n.name: tuple(n.meta["val"].stride())
        for n in gm.graph.nodes
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
    }
    new = tp.concrete_graph(gm, specs)
    for n in new.graph.nodes:
        val = n.meta.get("val")
        if n.op != "placeholder" or n.name not in traced or not isinstance(val, torch.Tensor):
            continue
        try:
            was = tuple(int(s) for s in traced[n.name])
        except (TypeError, ValueError):
            continue
        if any(a != b for a, b, k in zip(was, val.stride(), val.shape) if k != 1):
            n.meta[TRACED_STRIDES] = was
    return new


def _placeholders_match(gm: torch.fx.GraphModule, specs: tuple) -> bool:
    """Whether the graph's input metadata has the specs' strides. A backward graph's
    saved activations come in the strides the forward compile gave them (AOTAutograd
    restrides its example inputs, not the graph's metadata): a graph whose metadata
    says otherwise is re-derived for them."""
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for n, spec in zip(phs, specs):
        v = n.meta.get("val")
        if not isinstance(v, torch.Tensor) or not isinstance(spec, TensorSpec):
            continue
        try:
            strides = tuple(int(s) for s in v.stride())
        except (TypeError, ValueError):
            return True  # symbolic: compared by the guards
        if any(a != b for a, b, n in zip(strides, spec.strides, spec.sizes) if n != 1):
            return False
    return True


def _same_layout(a: Any, b: Any) -> bool:
    """Equal specs, alignment aside (it changes no shape or stride the metadata holds)."""
    if isinstance(a, TensorSpec) and isinstance(b, TensorSpec):
        return (a.sizes, a.strides, a.offset, a.dtype, a.device) == (
            b.sizes,
            b.strides,
            b.offset,
            b.dtype,
            b.device,
        )
    return a == b


def symbolic_spec(x: Any) -> Any:
    """The spec of a traced input with its sizes as sympy expressions over size symbols."""
    if isinstance(x, torch.Tensor):
        return TensorSpec(
            tuple(tp.sym_size(s) for s in x.shape),
            tuple(tp.sym_size(s) for s in x.stride()),
            tp.sym_size(x.storage_offset()),
            x.dtype,
            x.device,
            True,
        )
    if isinstance(x, torch.SymInt):
        return tp.sym_size(x)
    if isinstance(x, (torch.SymFloat, torch.SymBool)):
        raise tp.SymbolicUnsupported(f"a symbolic {type(x).__name__} input")
    return x


def _hints(x: Any, spec: Any) -> dict[Any, int]:
    """Each size symbol that ``spec`` has whole, with the traced value's hint."""
    import sympy

    out = {}
    if isinstance(x, torch.Tensor):
        for s, e in zip(x.shape, spec.sizes):
            if isinstance(e, sympy.Symbol):
                hint = tp.size_hint_of(s)
                if hint is not None:
                    out[e] = hint
    elif isinstance(x, torch.SymInt) and isinstance(spec, sympy.Symbol):
        hint = tp.size_hint_of(x)
        if hint is not None:
            out[spec] = hint
    return out


def _not_on(info: PluginInfo, device_type: str) -> str | None:
    """Why plugin ``info`` cannot take a graph whose kernels run on ``device_type`` (they
    would be handed pointers to memory it cannot read), or None when it declares it. Values
    of the graph on other devices (CPU index arithmetic beside a CUDA model) run through
    ATen (:func:`core.lowering.lowerer.foreign_device`)."""
    if device_type in info.device_types:
        return None
    return (
        f"sdk:{info.name} does not run on {device_type} tensors (it declares "
        f"{', '.join(info.device_types)})"
    )


def _is_static(x: Any) -> bool:
    if isinstance(x, torch.SymInt):
        return False
    if isinstance(x, torch.Tensor):
        return not any(
            isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride())
        ) and not isinstance(x.storage_offset(), torch.SymInt)
    return True

"""From a Dynamo graph to a compiled callable: the compile's whole life.

``Backend`` is what ``torch.compile(backend="sdk:<name>")`` calls. For each
Dynamo graph it builds a :class:`Session` (the plugin, the resolved options,
the hook callers), hands the graph to AOTAutograd with the session's
decompositions, and compiles each ATen graph AOTAutograd produces (inference,
or forward and backward) into a :class:`~core.guards.Specializing` program,
wrapped by any wrapper plugins the options name.
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import inspect
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import torch

from sdk.errors import OptionError, SDKError, describe
from sdk.plugin import Capability, CompileContext, CoreOptions, PluginKind, PluginOptions
from sdk.report import FusionRefusal, GraphBreak, GraphReport

from . import chain, fallback, logs, records, warm
from . import options as opts
from .adapters import torch_private as tp
from .guards import Specializing, TensorSpec, size_bindings, spec_of
from .ir.index import size_hints
from .registry import Registry, observe, registry, strict

#: explain() collectors: every GraphReport compiled while one is active lands in it.
_collectors: contextvars.ContextVar[tuple[list[GraphReport], ...]] = contextvars.ContextVar(
    "sdk_collectors", default=()
)
_graph_ids = itertools.count()
#: the plugin kinds that compile graphs and can be a backend or in a chain
COMPILERS = (PluginKind.CODEGEN, PluginKind.GRAPH)
_log = logging.getLogger(__name__)


class Backend:
    """The torch.compile backend for one codegen plugin (``sdk:<name>``)."""

    def __init__(
        self, name: str, options: Mapping[str, Any] | None = None, reg: Registry | None = None
    ) -> None:
        self._registry = reg
        self.name = name
        self.__name__ = f"sdk:{name}"  # torch.compile uses it in logs
        rec = self.registry.require(name, COMPILERS)
        self.options = dict(options or {})
        _check_names(self.registry, name, opts.resolve(rec.info, None, self.options).core)

    @property
    def registry(self) -> Registry:
        return self._registry or registry()

    def __repr__(self) -> str:
        return f"<sdk backend {self.name} {self.options or ''}>"

    def __call__(
        self,
        gm: torch.fx.GraphModule,
        example_inputs: list[Any],
        *,
        mode: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Callable:
        merged = {**self.options, **(options or {})}
        try:
            # torch.compile(backend="sdk:x", mode=..., options=...) hands both over only now,
            # at the first call: a bad one raises here as one line of its own, not as a
            # compiler crash (Dynamo wraps other exceptions in BackendCompilerFailed)
            session = Session(self.registry, self.name, mode, merged)
            _check_names(self.registry, self.name, session.options)
        except SDKError as exc:
            raise tp.user_error(exc, inspect.currentframe()) from None
        broke = tp.graph_break_of(gm)
        record = records.DynamoGraph(
            plugin=self.name,
            options=opts.as_mapping(opts.Resolved(session.options, session.plugin_options)),
            registry=session.registry,
            graph_break=GraphBreak(*broke) if broke else None,
        )
        session.graph_break = record.graph_break
        session.sinks = (*session.sinks, record.reports)  # (a backward compiled later too)
        return records.runs_as(record, session.compile_dynamo_graph(gm, example_inputs))


def _check_names(reg: Registry, plugin: str, options: CoreOptions) -> None:
    """Every plugin ``chain`` names exists and can run here (at compile time, not when the
    primary plugin first fails), and every plugin ``wrappers`` names is a wrapper plugin."""
    for name in options.chain:
        reg.require(name, COMPILERS)
    opts.check_wrappers(plugin, options.wrappers, reg.records)


class Session:
    """One Dynamo graph's compile: plugin, options and hook callers.

    ``options`` are the user's, parsed once here (:func:`core.options.resolve`) into
    :attr:`options` (the core's, typed) and :attr:`plugin_options`; a chained plugin's
    session gets the backend's parsed ``core`` options instead."""

    def __init__(
        self,
        reg: Registry,
        plugin: str,
        mode: str | None,
        options: Mapping[str, Any],
        *,
        core: CoreOptions | None = None,
    ) -> None:
        self.registry = reg
        self.record = reg.require(plugin, COMPILERS)
        self.info = self.record.info
        self.mode = mode
        resolved = (
            opts.resolve(self.info, mode, options)
            if core is None
            else opts.for_peer(self.info, core)
        )
        self.options: CoreOptions = resolved.core
        self.plugin_options: PluginOptions = resolved.plugin
        self.explicit_wrappers = "wrappers" in options
        self.hooks = _Hooks(reg, plugin)
        #: why the plugin cannot compile this Dynamo graph at all (a preparation hook raised)
        self.broken: str | None = None
        # read now: a backward graph compiles later, in autograd's thread
        self.sinks = _collectors.get()
        self._peers: dict[str, Session] = {plugin: self}
        #: AOTAutograd's cache for this Dynamo graph (core.warm): the key's tag, or None
        self.cache_tag: str | None = None
        self.warm = "off"
        #: this plugin's own decomposition table once built, and the ops it keeps whole
        self._own: dict[Any, Callable] | None = None
        self.kept: frozenset[Any] = frozenset()
        #: shared by this session, its peers and its narrowed copies: the backend plugin's
        #: session ("root") and the table AOTAutograd traced with ("common", see _table)
        self._chain_state: dict[str, Any] = {"root": self}
        #: the report of the last graph :meth:`compile_aten_graph` compiled whole
        self.last_report: GraphReport | None = None
        #: why Dynamo ended this graph, where a graph break did (its forward or inference
        #: graph's report says so)
        self.graph_break: GraphBreak | None = None

    # -- the chain ----------------------------------------------------------

    def kind_of(self, plugin: str) -> PluginKind:
        return self.registry.record(plugin).info.kind

    def peer(self, plugin: str) -> Session:
        """The session of ``plugin`` (this one's, or a chained plugin's) for this compile."""
        if plugin not in self._peers:
            self._peers[plugin] = self._chained(plugin)
        return self._peers[plugin]

    def narrowed(self, chain: tuple[str, ...]) -> Session:
        """This session with ``chain`` as its whole-graph fallbacks (a partition's compile)."""
        other = copy.copy(self)
        other.options = dataclasses.replace(self.options, chain=chain)
        return other

    @property
    def debug(self) -> bool:
        """The ``debug`` option or ``SDK_DEBUG=1`` (resolved once, in :attr:`options`)."""
        return self.options.debug

    # -- contexts -----------------------------------------------------------

    def context(self, kind: str, name: str, device_type: str) -> CompileContext:
        return CompileContext(
            plugin=self.info.name,
            device_type=device_type,
            graph_kind=kind,
            graph_name=name,
            options=opts.as_mapping(opts.Resolved(self.options, self.plugin_options)),
            capabilities=self.info.capabilities,
            core_options=self.options,
            plugin_options=self.plugin_options,
        )

    def decompositions(self, ctx: CompileContext) -> dict[Any, Callable]:
        """The core's table, updated with the plugin's ``sdk_decompositions``, less its
        ``sdk_keep_ops`` and the ops their derivatives call (``gelu_backward`` for a kept
        ``gelu``), unless the plugin itself decomposes those."""
        table = tp.default_decompositions()
        theirs: set[Any] = set()
        for extra in self.hooks.sdk_decompositions(ctx=ctx):
            table.update(extra or {})
            theirs |= set(extra or {})
        keep: set[Any] = set()
        for ops in self.hooks.sdk_keep_ops(ctx=ctx):
            keep |= tp.expand_ops(ops or ())
        backward = {d for op in keep for d in tp.derivative_ops(op)} - theirs
        for op in keep | backward:
            table.pop(op, None)
        self.kept = frozenset(keep | backward)
        return table

    def own_table(self, ctx: CompileContext) -> dict[Any, Callable]:
        """This plugin's decompositions (built once per session); if its hooks for them
        raise, the core's defaults, and every graph of the compile goes to the chain or ATen
        (the plugin may rely on its decompositions); debug raises, ``fallback=False``
        raises when a graph compiles."""
        if self._own is None:
            try:
                self._own = self.decompositions(ctx)
            except HookFailed as exc:
                if self.options.debug:
                    raise
                self.broken = f"sdk:{ctx.plugin} failed: {exc}"
                self._own = tp.default_decompositions()
        return self._own

    def _table(self, ctx: CompileContext) -> dict[Any, Callable]:
        """The table AOTAutograd traces with: this plugin's own; with a chain, only what
        every plugin of the chain decomposes alike, so that no plugin's decompositions or
        kept ops reach another's graph: each plugin's compile then decomposes the graph
        further by its own table (:meth:`redecomposed`)."""
        state = self._chain_state
        if "common" not in state:
            root = state["root"]
            common = root.own_table(ctx)
            for plugin in root.options.chain:
                peer = root.peer(plugin)
                theirs = peer.own_table(
                    peer.context(ctx.graph_kind, ctx.graph_name, ctx.device_type)
                )
                common = {op: fn for op, fn in common.items() if theirs.get(op) is fn}
            state["common"] = common
        return state["common"]

    def decomposes(self, ctx: CompileContext) -> set[Any]:
        """The ops this plugin decomposes that a graph traced with :meth:`_table` may still
        hold (another plugin of the chain keeps them, or decomposes them otherwise)."""
        own = self.own_table(ctx)
        common = self._table(ctx)
        if own is common:
            return set()
        return {op for op, fn in own.items() if common.get(op) is not fn}

    def redecomposed(self, ctx: CompileContext, gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
        """``gm`` (traced with :meth:`_table`) decomposed by this plugin's own table: the ops
        another plugin of the chain keeps, which this one decomposes. ``gm`` itself when
        there is nothing to decompose (always, without a chain)."""
        extra = self.decomposes(ctx)
        return tp.decompose(gm, self.own_table(ctx), extra) if extra else gm

    # -- compile ------------------------------------------------------------

    def compile_dynamo_graph(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        device = _device_type(example_inputs) or self.info.device_types[0]
        self.graph_id = next(_graph_ids)
        ctx = self.context("inference", f"g{self.graph_id}", device)
        self.cache_tag, self.warm = warm.cache_tag(self, ctx)
        _log.debug(
            "capture g%d: Dynamo graph of %d nodes, %d inputs on %s, for sdk:%s; AOTAutograd's "
            "cache %s",
            self.graph_id,
            len(gm.graph.nodes),
            len(example_inputs),
            device,
            self.info.name,
            self.warm,
        )
        self.captured = time.perf_counter()
        token = warm.current.set(self)  # a cache hit restores the programs through it
        try:
            compiled = tp.aot_compile(
                gm,
                example_inputs,
                forward=self._aten_compiler("forward", device),
                backward=self._aten_compiler("backward", device),
                inference=self._aten_compiler("inference", device),
                # built only if AOTAutograd traces (not on a hit of its cache)
                decompositions=tp.LazyTable(lambda: self._table(ctx)),
                cache_tag=self.cache_tag,
                on_cache_refused=warm.lookup_refused,
                # writes into inputs stay in the graph for the core's programs to do in
                # their kernels (core/lowering/mutation.py); a graph-level plugin and a
                # chain's partitions get functional graphs
                keep_input_mutations=(
                    self.info.kind == PluginKind.CODEGEN and not self.options.chain
                ),
            )
        finally:
            warm.current.reset(token)
        _log.debug(
            "aot g%d: AOTAutograd and the compile of each graph it made (%.3fs)",
            self.graph_id,
            time.perf_counter() - self.captured,
        )
        return compiled

    def _aten_compiler(self, kind: str, device: str) -> Callable:
        def compile_aten(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
            ctx = self.context(
                kind, f"g{self.graph_id}_{kind}", _device_type(example_inputs) or device
            )
            _log.debug(
                "aot %s: ATen graph of %d nodes from AOTAutograd (%.3fs after capture)",
                ctx.graph_name,
                len(gm.graph.nodes),
                time.perf_counter() - self.captured,
            )
            if self.cache_tag is None:
                return self.compile_aten_graph(ctx, gm, example_inputs)
            recipe = warm.Recipe(kind, ctx.device_type)
            compiled = self.compile_aten_graph(ctx, gm, example_inputs, recipe=recipe)
            return warm.output_code(compiled, recipe, gm)

        return compile_aten

    def compile_aten_graph(
        self,
        ctx: CompileContext,
        gm: torch.fx.GraphModule,
        example_inputs: list[Any],
        *,
        whole: bool = False,
        recipe: warm.Recipe | None = None,
    ) -> Callable:
        """``gm`` compiled: split between the plugins of the chain (:mod:`core.chain`), or
        whole by this session's plugin. ``whole``: one partition of such a split, compiled
        whole and not wrapped (its inputs are not Dynamo's: no guard of Dynamo checks them).
        ``recipe`` is filled with what a later process needs to restore the result."""
        recipe = recipe or warm.Recipe(ctx.graph_kind, ctx.device_type)
        ctx = dataclasses.replace(ctx, written_inputs=fallback.written_inputs(gm))
        if not whole:
            split = chain.compile_partitioned(self, ctx, gm, example_inputs)
            if split is not None:
                program, report = split
                recipe.refused = "the graph is split between the plugins of a chain"
                report.warm = "off: split between the plugins of a chain"
                return self._finish(ctx, gm, program, report, time.perf_counter())
        as_traced, gm = gm, self.redecomposed(ctx, gm)
        report = GraphReport(
            name=ctx.graph_name, kind=ctx.graph_kind, plugin=ctx.plugin, notes=ctx.notes
        )
        report.warm = "miss" if self.cache_tag and not whole else self.warm
        report.aten_ops = len(fallback.aten_calls(gm))
        recipe.report = report
        start = time.perf_counter()
        keys = recipe.keys

        guarded = not whole and ctx.graph_kind in ("forward", "inference")
        static = all(_is_static(x) for x in example_inputs)
        traced = (
            tuple(spec_of(x, real=not tp.is_fake(x)) for x in example_inputs) if static else None
        )

        def build(specs: tuple) -> Callable:
            # a variant the trace did not describe gets its own, concrete metadata
            same = traced is not None and all(
                _same_layout(a, b) for a, b in zip(specs, traced, strict=True)
            )
            graph = gm if same else tp.concrete_graph(gm, specs)

            def common() -> torch.fx.GraphModule:  # for the chain: before redecomposing
                return as_traced if same else tp.concrete_graph(as_traced, specs)

            return self._build_program(ctx, graph, specs, report, keys=keys, common=common)

        recipe.guarded = guarded
        if static:
            # a forward or inference graph's inputs are Dynamo's (user inputs and
            # parameters), whose guards hold sizes and strides; a backward graph's are not
            recipe.first = traced
            program = Specializing(build, traced, dynamo_guarded=guarded)
        else:
            program = self._symbolic(ctx, gm, example_inputs, report, build, guarded, recipe)
            if program is None:  # a variant per concrete shape, from the first real call
                recipe.guarded = False  # (each variant checks its whole layout)
                program = _LazySpecializing(build, recipe)
        recipe.program = program
        self.last_report = report  # (a chain's partition reads who compiled it, and why)
        return self._finish(ctx, gm, program, report, start, wrap=not whole, recipe=recipe)

    def restore_aten_graph(self, state: dict[str, Any], graph: Callable) -> Callable:
        """What :meth:`compile_aten_graph` made, in a later process, from its recipe
        (:mod:`core.warm`): each stored variant's program from the whole-graph cache, other
        variants built from the stored ATen graph (``graph()``) when their inputs come."""
        from . import passes
        from .program import load_program

        start = time.perf_counter()
        kind = state["kind"]
        ctx = dataclasses.replace(
            self.context(kind, f"g{self.graph_id}_{kind}", state["device_type"]),
            written_inputs=frozenset(state["written_inputs"]),
        )
        report = GraphReport(name=ctx.graph_name, kind=kind, plugin=ctx.plugin, notes=ctx.notes)
        report.aten_ops, report.sizes = state["aten_ops"], state["sizes"]
        report.warm = "hit"
        stored = dict(state["variants"])
        keys: dict[tuple, str | None] = {}

        plan = passes.choose(self.hooks, ctx, {})  # (the passes' names: the graph is not here)

        def load(specs: tuple, key: str | None) -> Callable | None:
            hit = None if key is None else load_program(self, ctx, key, plan=plan)
            if hit is None:
                return None
            fn, part = hit
            self._fill(report, ctx.plugin, part)
            self._announce(ctx, report)
            keys[specs] = key
            return fn

        def build(specs: tuple) -> Callable:
            key = stored.pop(specs, None)
            fn = load(specs, key)
            if fn is None:
                # built again from the stored graph; a stored variant's program goes back
                # under the key the recipe names, so the next process finds it
                gm = tp.concrete_graph(graph(), specs)
                fn = self._build_program(
                    ctx,
                    self.redecomposed(ctx, gm),
                    specs,
                    report,
                    keys=keys,
                    key=key,
                    common=lambda: gm,
                )
            return fn

        first, guarded = state["first"], state["guarded"]
        if state["general"]:
            # (the stored graph has no symbolic metadata to build it from again: if the
            # program is gone, torch compiles the Dynamo graph afresh)
            general = load(first, stored.pop(first, None))
            if general is None:
                raise LookupError("the symbolic program is not in the whole-graph cache")
            program = Specializing(build, first, general=general, dynamo_guarded=guarded)
        else:
            program = Specializing(build, first, dynamo_guarded=guarded)
        return self._finish(ctx, graph, program, report, start)

    def _finish(
        self,
        ctx: CompileContext,
        gm: torch.fx.GraphModule,
        program: Callable,
        report: GraphReport,
        start: float,
        wrap: bool = True,
        recipe: warm.Recipe | None = None,
    ) -> Callable:
        """The program with the run-time fallback and the wrappers; the report published.
        ``gm`` may be a function that returns it (read only for a fallback)."""
        if self.options.fallback and not self.options.debug:
            program = _RunTimeFallback(program, gm, report, ctx, self.registry)
            if recipe is not None:
                recipe.fallback = program
        compiled = self._wrap(ctx, program, report) if wrap else program
        if wrap and ctx.graph_kind != "backward":
            report.graph_break = self.graph_break
        report.compile_seconds += time.perf_counter() - start
        for sink in self.sinks:
            sink.append(report)
        if _log.isEnabledFor(logging.INFO):  # TORCH_LOGS=sdk
            _log.info("%s", logs.graph_line(report))
        observe(self.registry, ctx, report.hook_faults, "sdk_on_graph_compiled", report=report)
        return compiled

    def _symbolic(
        self,
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
        if Capability.SYMBOLIC_SIZES not in self.info.capabilities:
            report.sizes = f"per shape: sdk:{self.info.name} does not declare SYMBOLIC_SIZES"
            return None
        if self.broken:
            report.sizes = f"per shape: {self.broken}"
            return None
        try:
            # integers that are not sizes (an int argument Dynamo made dynamic, an offset
            # that may be negative) are specialized on their traced values, which the guard
            # reads from the int inputs they are and checks
            special = tp.non_size_symbols(example_inputs)
            with tp.specializing(special):
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
            with size_hints(hints), tp.specializing(special):
                fn = self._build_program(
                    ctx, gm, specs, report, per_shape_on_failure=True, keys=recipe.keys
                )
        except SDKError:
            raise  # the user's options forbid what the compile needs (fallback=False)
        except Exception as exc:  # noqa: BLE001 - any failure: compile per shape
            if self.options.debug:  # SDK_DEBUG=1: say where symbolic sizes stopped
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
        if special:
            report.sizes += "; specialized: " + ", ".join(
                f"{name}={value}" for name, value in sorted(special.items())
            )
        recipe.first, recipe.general = specs, True
        return Specializing(build, specs, general=fn, dynamo_guarded=guarded)

    def _build_program(
        self,
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
        (:meth:`redecomposed`), which each plugin of the chain decomposes by its own.
        ``per_shape_on_failure`` (a symbolic variant): raise instead, and take no op-level
        fallback that the symbolic sizes caused. ``keys`` gets the variant's key in the
        whole-graph cache (None: not a program of this session's plugin stored there);
        ``key`` is the key to store this session's plugin's program under (a restored
        recipe's), instead of one computed from ``gm``."""
        from .program import build_program  # the IR path

        keys = {} if keys is None else keys
        keys[specs] = None
        devices = _graph_devices(gm, specs)
        if per_shape_on_failure:
            elsewhere = _not_on(self.info, devices)
            if elsewhere:  # (compiled per shape, where the plugin is skipped for the same)
                raise RuntimeError(elsewhere)
            fn, part = build_program(self, ctx, gm, specs)
            self._fill(report, ctx.plugin, part)
            self._announce(ctx, report)
            keys[specs] = part.key
            return fn
        errors = [self.broken] if self.broken else []
        for plugin in (ctx.plugin, *self.options.chain):
            if plugin == ctx.plugin and self.broken:
                continue
            if self.kind_of(plugin) != PluginKind.CODEGEN:
                continue  # a graph-level plugin takes partitions (core.chain), not programs
            session = self.peer(plugin)
            elsewhere = _not_on(session.info, devices)
            if elsewhere:
                errors.append(elsewhere)
                continue  # its kernels would be handed this graph's tensors
            c = (
                ctx
                if plugin == ctx.plugin
                else session.context(ctx.graph_kind, ctx.graph_name, ctx.device_type)
            )
            try:
                graph = gm
                if plugin != ctx.plugin:
                    # its own decompositions, not the failed plugin's (nor its kept ops)
                    graph = session.redecomposed(c, common() if common is not None else gm)
                    if session.broken:
                        errors.append(session.broken)
                        continue
                fn, part = build_program(
                    session, c, graph, specs, key=key if plugin == ctx.plugin else None
                )
            except SDKError:
                raise
            except Exception as exc:  # noqa: BLE001 - recorded, then the next in the chain
                if self.options.debug:
                    raise
                errors.append(f"sdk:{plugin} failed: {describe(exc)}")
                continue
            self._fill(report, plugin, part)
            if errors:  # the chain took over: say why the plugins before it did not
                report.notes.append(f"compiled by sdk:{plugin} after: {'; '.join(errors)}")
                report.chain_failures[:] = errors
                # the kernels cover the graph as this plugin decomposed it
                report.aten_ops = len(fallback.aten_calls(graph))
            else:
                keys[specs] = part.key
            self._announce(c, report)
            return fn
        if not self.options.fallback:
            raise SDKError(
                f"graph {ctx.graph_name} could not be compiled and options['fallback'] is "
                f"False: {'; '.join(errors)}"
            )
        fn, fallbacks = fallback.whole_graph(gm, "; ".join(errors))
        report.chain_failures[:] = errors
        report.kernels.clear()
        report.externs.clear()
        report.view_nodes = ()
        report.fusion_refusals.clear()
        report.core_fusion_refusals.clear()
        report.passes.clear()
        report.fallbacks[:] = fallbacks
        self._announce(ctx, report)
        return fn

    @staticmethod
    def _fill(report: GraphReport, plugin: str, part: Any) -> None:
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
        report.wrapper = part.wrapper_source
        report.runner, report.program = part.runner, part.program
        report.hook_faults.extend(part.hook_faults)
        report.passes[:] = part.passes

    def _chained(self, plugin: str) -> Session:
        session = Session(
            self.registry, plugin, None, {}, core=dataclasses.replace(self.options, chain=())
        )
        session.sinks = self.sinks  # (the backward compiles in autograd's thread)
        session._chain_state = self._chain_state  # it compiles graphs this compile traced
        return session

    def _announce(self, ctx: CompileContext, report: GraphReport) -> None:
        report.nondeterministic[:] = self._nondeterministic(ctx.plugin, report)
        for f in report.fallbacks:
            observe(
                self.registry, ctx, report.hook_faults, "sdk_on_fallback", op=f.op, reason=f.reason
            )

    def _nondeterministic(self, plugin: str, report: GraphReport) -> list[str]:
        """The report's ATen steps that the plugin declares not deterministic on its device."""
        rec = self.registry.records.get(plugin)
        table = rec.info.nondeterministic_ops if rec is not None else {}
        steps = [(e.op, e.node, "library call") for e in report.externs if not e.plugin]
        steps += [(f.op, f.node, "fallback") for f in report.fallbacks]
        out = []
        for op, node, what in steps:
            why = table.get(op) or table.get(op.rsplit(".", 1)[0])
            if why:
                out.append(f"{what} {op} ({node}): {why}")
        return out

    def _wrap(self, ctx: CompileContext, program: Callable, report: GraphReport) -> Callable:
        names = []
        for name in opts.wrapper_names(self.options.wrappers, self.registry.records):
            rec = self.registry.record(name) if name in self.registry.records else None
            why = self.registry.status(name) if rec else "not installed"
            fits = (
                rec is not None
                and why is None
                and rec.info.kind == PluginKind.WRAPPER
                and ctx.device_type in rec.info.device_types
            )
            if fits:
                names.append(name)
            elif self.explicit_wrappers:
                raise OptionError(
                    f"wrapper {name!r} cannot wrap a {ctx.device_type} graph of sdk:{ctx.plugin}: "
                    + (why or f"it is not a wrapper plugin for {ctx.device_type}")
                    + "; drop it from options['wrappers']"
                )
        for name in names:
            program = self._wrap_with(name, ctx, program, report)
        return program

    def _wrap_with(
        self, name: str, ctx: CompileContext, program: Callable, report: GraphReport
    ) -> Callable:
        """``program`` wrapped by wrapper plugin ``name``; if its hook raises, unwrapped
        (a wrapper changes how a graph runs, not what it computes), with the fault in the
        report, unless strict mode asks for the error."""
        try:
            wrapped = self.registry.caller("sdk_wrap_compiled", [name])(ctx=ctx, compiled=program)
        except SDKError:
            raise
        except Exception as exc:  # noqa: BLE001 - a wrapper's fault is its own
            report.hook_faults.append(
                self.registry.fault(name, "sdk_wrap_compiled", exc, strict(ctx))
            )
            return program
        report.wrappers += (name,)
        return wrapped


class HookFailed(RuntimeError):
    """A compile hook of the codegen plugin raised: the compile falls back (chain, ATen),
    with the plugin and the hook in the reason. The plugin's error is the ``__cause__``."""


class _Hooks:
    """Hook callers that reach the compile's codegen plugin only."""

    def __init__(self, reg: Registry, plugin: str) -> None:
        self._reg, self._plugin, self._cache = reg, plugin, {}

    def __getattr__(self, hook: str) -> Callable:
        caller = self._cache.get(hook)
        if caller is None:
            caller = self._reg.caller(hook, [self._plugin])
            caller = self._cache[hook] = self._naming(hook, caller)
        return caller

    def implements(self, hook: str) -> bool:
        """Whether the plugin has a hookimpl of ``hook`` (so the core can skip preparing
        what only that hook would read)."""
        return bool(self._reg.caller(hook, [self._plugin]).get_hookimpls())

    def _naming(self, hook: str, caller: Callable) -> Callable:
        """``caller``, whose errors say which plugin and hook raised (an SDKError is the
        plugin saying so on purpose, and goes through as it is)."""

        def call(**kwargs: Any) -> Any:
            try:
                return caller(**kwargs)
            except SDKError:
                raise
            except Exception as exc:  # noqa: BLE001 - named, then handled as before
                raise HookFailed(f"sdk:{self._plugin} {hook} raised {describe(exc)}") from exc

        return call


class _RunTimeFallback:
    """A compiled graph whose program, if it fails when run, gives way to ATen.

    A call that raised runs again through the op-level fallback, unless the program had
    begun writing inputs in place (core/lowering/mutation.py): then its error propagates
    and later calls run through ATen. If ATen raises as well, the
    inputs were at fault (an index out of range): the program's error propagates and the
    program stays. Otherwise the program failed where eager does not, and the graph runs through
    ATen from then on, with the reason in its report. Out-of-memory errors propagate.
    ``options["fallback"] = False`` or ``debug`` make the program's error propagate instead.
    """

    _boxed_call = True

    def __init__(
        self,
        program: Callable,
        gm: torch.fx.GraphModule,
        report: GraphReport,
        ctx: CompileContext,
        reg: Registry,
    ) -> None:
        self._program, self._gm, self._report, self._ctx, self._reg = program, gm, report, ctx, reg
        self._eager: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        if self._eager is None:
            try:
                return self._program(*args)  # as the caller called it: no per-call copy
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - see the class doc
                return self._give_way(exc, _unboxed(args))
        return self._eager(_unboxed(args))

    def _give_way(self, exc: Exception, args: list[Any]) -> Any:
        reason = (
            f"the compiled program raised when run: {describe(exc)}; "
            "ATen runs this graph from now on"
        )
        from .wrapper import inputs_written

        written = inputs_written()
        gm = self._gm if isinstance(self._gm, torch.fx.GraphModule) else self._gm()
        run, reports = fallback.whole_graph(gm, reason)
        if written:
            # it had begun writing inputs in place (BatchNorm's running statistics): a
            # rerun would write them twice. This call fails; later calls run through ATen
            exc.add_note(
                f"sdk:{self._ctx.plugin} graph {self._ctx.graph_name} had begun writing its "
                "inputs in place when it failed, so it was not run again through ATen; "
                "later calls run through ATen"
            )
            self._switch(run, reports, reason)
            raise exc
        try:
            out = run(args)
        except Exception:  # noqa: BLE001 - eager fails too: the inputs are at fault
            raise exc from None
        self._switch(run, reports, reason)
        return out

    def _switch(self, run: Callable, reports: list, reason: str) -> None:
        """Run the graph through ATen from now on, and say so in its report."""
        _log.warning("sdk:%s graph %s: %s", self._ctx.plugin, self._ctx.graph_name, reason)
        self._eager = run
        r = self._report
        r.kernels.clear()
        r.externs.clear()
        r.fusion_refusals.clear()
        r.core_fusion_refusals.clear()
        r.passes.clear()  # (ATen runs the graph as AOTAutograd made it)
        r.fallbacks[:] = reports
        r.notes.append(reason)
        for f in reports:
            observe(self._reg, self._ctx, r.hook_faults, "sdk_on_fallback", op=f.op, reason=reason)


def _unboxed(args: tuple) -> list[Any]:
    """A graph's inputs as one list, however they were passed (AOTAutograd's boxed
    convention passes them as one list)."""
    return args[0] if len(args) == 1 and type(args[0]) is list else list(args)


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


def _graph_devices(gm: torch.fx.GraphModule, specs: tuple) -> frozenset[str]:
    """The device types of a graph's inputs (``specs``) and of every value it makes (its
    nodes' example values: a graph may move a tensor to another device)."""
    devices = {s.device.type for s in specs if isinstance(s, TensorSpec)}
    for node in gm.graph.nodes:
        vals = node.meta.get("val")
        for v in vals if isinstance(vals, (list, tuple)) else (vals,):
            if isinstance(v, torch.Tensor):
                devices.add(v.device.type)
    return frozenset(devices)


def _not_on(info: Any, devices: frozenset[str]) -> str | None:
    """Why plugin ``info`` cannot take a graph with tensors on ``devices`` (its kernels would
    be handed pointers to memory it cannot read), or None when it declares them all."""
    elsewhere = sorted(devices - set(info.device_types))
    if not elsewhere:
        return None
    return (
        f"sdk:{info.name} does not run on {' or '.join(elsewhere)} tensors (it declares "
        f"{', '.join(info.device_types)})"
    )


def _device_type(inputs: list[Any]) -> str | None:
    for x in inputs:
        if isinstance(x, torch.Tensor):
            return x.device.type
    return None


def _is_static(x: Any) -> bool:
    if isinstance(x, torch.SymInt):
        return False
    if isinstance(x, torch.Tensor):
        return not any(
            isinstance(s, torch.SymInt) for s in (*x.shape, *x.stride())
        ) and not isinstance(x.storage_offset(), torch.SymInt)
    return True


def collect_reports(sink: list[GraphReport]) -> contextvars.Token:
    return _collectors.set((*_collectors.get(), sink))


def stop_collecting(token: contextvars.Token) -> None:
    _collectors.reset(token)

"""From a Dynamo graph to a compiled callable: the compile's whole life.

``Backend`` is what ``torch.compile(backend="sdk:<name>")`` calls. For each
Dynamo graph it builds a :class:`Session` (the plugin, the resolved options,
the hook callers, the decomposition tables, the chain's peers) and passes the
graph through the stages of ``core/stages``: AOT (AOTAutograd with the session's
decompositions, or a warm restore) -> partition (a chain's split) or build (a
:class:`~core.guards.Specializing` program) -> wrap (run-time fallback, wrapper
plugins). The stages take the session as a :class:`~core.session.CompileSession`.
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch

from sdk.errors import SDKError
from sdk.plugin import CompileContext, CoreOptions, PluginKind, PluginOptions
from sdk.report import GraphBreak, GraphReport

from . import arguments, fallback, records, warm
from . import options as opts
from .adapters import torch_private as tp
from .hooks import HookFailed, PluginHooks
from .registry import Registry, registry
from .stages import aot, build, partition, wrap
from .stages.capture import Capture
from .stages.job import Job

#: explain() collectors: every GraphReport compiled while one is active lands in it.
_collectors: contextvars.ContextVar[tuple[list[GraphReport], ...]] = contextvars.ContextVar(
    "sdk_collectors", default=()
)
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
        tp.locate_graph_breaks()  # each break's line, for explain and TORCH_LOGS=sdk

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
        self.hooks = PluginHooks(reg, plugin)
        #: why the plugin cannot compile this Dynamo graph at all (a preparation hook raised)
        self.broken: str | None = None
        #: why the plugin cannot compile on this machine, though it runs what the caches
        #: hold (its status answered sdk.CompileUnavailable): a miss goes to the chain or ATen
        self.cannot_compile: str | None = reg.compile_status(plugin)
        # read now: a backward graph compiles later, in autograd's thread
        self.sinks = _collectors.get()
        self._peers: dict[str, Session] = {plugin: self}
        #: this plugin's own decomposition table once built, and the ops it keeps whole
        self._own: dict[Any, Callable] | None = None
        self.kept: frozenset[Any] = frozenset()
        #: shared by this session, its peers and its narrowed copies: the backend plugin's
        #: session ("root") and the table AOTAutograd traced with ("common", see table)
        self._chain_state: dict[str, Any] = {"root": self}
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
            preferences=self.record.preferences,
            core_options=self.options,
            plugin_options=self.plugin_options,
            threads=torch.get_num_threads(),
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

    def table(self, ctx: CompileContext) -> dict[Any, Callable]:
        """The table AOTAutograd traces with: this plugin's own; with a chain, only what
        every plugin of the chain decomposes alike, so that no plugin's decompositions or
        kept ops reach another's graph: each plugin's compile then decomposes the graph
        further by its own table (:func:`core.stages.build.redecomposed`)."""
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
        """The ops this plugin decomposes that a graph traced with :meth:`table` may still
        hold (another plugin of the chain keeps them, or decomposes them otherwise)."""
        own = self.own_table(ctx)
        common = self.table(ctx)
        if own is common:
            return set()
        return {op for op, fn in own.items() if common.get(op) is not fn}

    # -- compile ------------------------------------------------------------

    # -- compile: the stages (core/stages) --------------------------------------

    def compile_dynamo_graph(self, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        """The AOT stage (:mod:`core.stages.aot`), which calls :meth:`compile_aten_graph`
        for each ATen graph AOTAutograd makes."""
        return aot.run(self, gm, example_inputs)

    def compile_aten_graph(
        self,
        ctx: CompileContext,
        gm: torch.fx.GraphModule,
        example_inputs: list[Any],
        *,
        recipe: warm.Recipe | None = None,
        parameters: Mapping[int, Any] | None = None,
        capture: Capture | None = None,
    ) -> Callable:
        """``gm`` compiled: split between the plugins of the chain (the partition stage), or
        whole by this session's plugin (the build stage); then wrapped (the wrap stage).
        ``recipe`` is filled with what a later process needs to restore the result;
        ``parameters``: the inputs that are the model's parameters and buffers (frozen
        parameters); ``capture``: the Dynamo graph it came from (the AOT stage's)."""
        recipe = recipe or warm.Recipe(ctx.graph_kind, ctx.device_type)
        arguments.numbers_as_tensors(gm)  # (before the fallback or the recipe takes gm)
        ctx = dataclasses.replace(ctx, written_inputs=fallback.written_inputs(gm))
        job = Job(
            ctx,
            gm,
            example_inputs,
            recipe,
            parameters=dict(parameters or {}),
            capture=capture,
            aten_ops=len(fallback.aten_calls(gm)),
        )
        built = partition.run(self, job) or build.run(self, job)
        return wrap.finish(self, built)

    def restore_aten_graph(
        self, state: dict[str, Any], graph: Callable, *, capture: Capture
    ) -> Callable:
        """What :meth:`compile_aten_graph` made, in a later process, from its recipe (the
        AOT stage's warm restore of ``capture``'s graph, :func:`core.stages.aot.restore`)."""
        return aot.restore(self, capture, state, graph)

    def _chained(self, plugin: str) -> Session:
        session = Session(
            self.registry, plugin, None, {}, core=dataclasses.replace(self.options, chain=())
        )
        session.sinks = self.sinks  # (the backward compiles in autograd's thread)
        session._chain_state = self._chain_state  # it compiles graphs this compile traced
        return session


def collect_reports(sink: list[GraphReport]) -> contextvars.Token:
    return _collectors.set((*_collectors.get(), sink))


def stop_collecting(token: contextvars.Token) -> None:
    _collectors.reset(token)

"""The AOT stage: one Dynamo graph through AOTAutograd, with the session's decompositions,
into ATen graphs (inference, or forward and backward), each handed to the session's
``compile_aten_graph`` (partition, build, wrap); or, on a hit of AOTAutograd's cache (a warm
start, :mod:`core.warm`), each ATen graph's program restored (:func:`restore`)."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import time
import weakref
from collections.abc import Callable
from typing import Any

import torch

from sdk.plugin import PluginKind
from sdk.report import GraphReport

from .. import logs, passes, program, warm
from ..adapters import torch_private as tp
from ..session import CompileSession
from . import build, wrap
from .capture import Capture
from .job import Built

_log = logging.getLogger(__name__)
_graph_ids = itertools.count()


def run(session: CompileSession, gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
    """The Dynamo graph through AOTAutograd (or restored from its cache, :func:`restore`),
    each ATen graph AOTAutograd makes handed to ``session.compile_aten_graph``."""
    device = _device_type(example_inputs, session.info.device_types) or session.info.device_types[0]
    graph_id = next(_graph_ids)
    ctx = session.context("inference", f"g{graph_id}", device)
    tag, cache = warm.cache_tag(session, ctx)
    _log.debug(
        "capture g%d: Dynamo graph of %d nodes, %d inputs on %s, for sdk:%s; AOTAutograd's "
        "cache %s",
        graph_id,
        len(gm.graph.nodes),
        len(example_inputs),
        device,
        session.info.name,
        cache,
    )
    capture = Capture(graph_id, tag, cache, time.perf_counter())
    # a cache hit restores the programs through it
    token = warm.current.set(functools.partial(session.restore_aten_graph, capture=capture))
    # a graph-level plugin that asks for frozen parameters: which inputs are the model's
    # parameters and buffers (weakly: a replaced weight must not stay alive for this)
    dynamo_inputs = _model_state(gm, example_inputs) if _freezes(session) else None
    try:
        compiled = tp.aot_compile(
            gm,
            example_inputs,
            forward=_aten_compiler(session, capture, "forward", device),
            backward=_aten_compiler(session, capture, "backward", device),
            inference=_aten_compiler(session, capture, "inference", device, dynamo_inputs),
            # built only if AOTAutograd traces (not on a hit of its cache)
            decompositions=tp.LazyTable(lambda: session.table(ctx)),
            cache_tag=capture.cache_tag,
            on_cache_refused=warm.lookup_refused,
            cache_keys=warm.key_memo(),
            joint_pass=_joint_pass(session, ctx),
            # writes into inputs stay in the graph for the core's programs to do in
            # their kernels (core/lowering/mutation.py); a graph-level plugin and a
            # chain's partitions get functional graphs
            keep_input_mutations=(
                session.info.kind == PluginKind.CODEGEN and not session.options.chain
            ),
        )
    finally:
        warm.current.reset(token)
    _log.debug(
        "aot g%d: AOTAutograd and the compile of each graph it made (%.3fs)",
        graph_id,
        time.perf_counter() - capture.captured,
    )
    return compiled


def _joint_pass(session: CompileSession, ctx: Any) -> Callable | None:
    """The core's passes over AOTAutograd's joint graph (:data:`core.passes.JOINT_PASSES`:
    accumulations through a permutation, max pooling's offsets), those the plugin left on."""
    try:
        plan = passes.choose(session.hooks, ctx, {})  # (the passes' names: no graph yet)
    except Exception:  # noqa: BLE001 - the plugin's bad answer fails each graph's compile,
        return None  # which reports it (and falls back) as for any compile hook
    chosen = [
        passes.JOINT_PASSES[p.name]
        for p, by in plan.passes
        if not by and p.name in passes.JOINT_PASSES
    ]
    if not chosen:
        return None

    def joint(gm: Any) -> None:
        for rewrite in chosen:
            rewrite(gm)

    return joint


def _freezes(session: CompileSession) -> bool:
    """Whether a plugin of the compile's chain asks for frozen parameters."""
    if session.info.frozen_parameters:
        return True
    infos = [session.registry.record(p).info for p in session.options.chain]
    return any(i.kind == PluginKind.GRAPH and i.frozen_parameters for i in infos)


def _model_state(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> list[Any]:
    """Per input of Dynamo's graph, a weak reference to the model's parameter or buffer it
    is, else None."""
    buffers = tp.module_buffers(gm)
    return [
        weakref.ref(x)
        if isinstance(x, torch.nn.Parameter) or (isinstance(x, torch.Tensor) and i in buffers)
        else None
        for i, x in enumerate(example_inputs)
    ]


def _aten_compiler(
    session: CompileSession,
    capture: Capture,
    kind: str,
    device: str,
    dynamo_inputs: list[Any] | None = None,
) -> Callable:
    def compile_aten(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable:
        params = (
            tp.model_state_inputs([r or (lambda: None) for r in dynamo_inputs], example_inputs)
            if dynamo_inputs
            else {}
        )
        ctx = session.context(
            kind,
            f"g{capture.graph_id}_{kind}",
            _device_type(example_inputs, session.info.device_types) or device,
        )
        took = time.perf_counter() - capture.captured
        if kind != "backward":  # (a backward graph comes with its forward, or later)
            capture.aot_seconds = took
        _log.debug(
            "aot %s: ATen graph of %d nodes from AOTAutograd (%.3fs after capture)",
            ctx.graph_name,
            len(gm.graph.nodes),
            took,
        )
        if capture.cache_tag is None:
            return session.compile_aten_graph(
                ctx, gm, example_inputs, parameters=params, capture=capture
            )
        recipe = warm.Recipe(kind, ctx.device_type)
        compiled = session.compile_aten_graph(
            ctx, gm, example_inputs, recipe=recipe, parameters=params, capture=capture
        )
        return warm.output_code(compiled, recipe, gm)

    return compile_aten


def restore(
    session: CompileSession, capture: Capture, state: dict[str, Any], graph: Callable
) -> Callable:
    """What ``compile_aten_graph`` made, in a later process, from its recipe
    (:mod:`core.warm`): each stored variant's program from the whole-graph cache, other
    variants built from the stored ATen graph (``graph()``) when their inputs come."""
    start = time.perf_counter()
    kind = state["kind"]
    if kind != "backward":
        capture.aot_seconds = start - capture.captured
    ctx = dataclasses.replace(
        session.context(kind, f"g{capture.graph_id}_{kind}", state["device_type"]),
        written_inputs=frozenset(state["written_inputs"]),
    )
    report = GraphReport(name=ctx.graph_name, kind=kind, plugin=ctx.plugin, notes=ctx.notes)
    report.aten_ops, report.sizes = state["aten_ops"], state["sizes"]
    report.warm = "hit"
    stored = dict(state["variants"])
    keys: dict[tuple, str | None] = {}

    plan = passes.choose(session.hooks, ctx, {})  # (the passes' names: the graph is not here)

    def load(specs: tuple, key: str | None) -> Callable | None:
        hit = None if key is None else program.load_program(session, ctx, key, plan=plan)
        if hit is None:
            return None
        fn, part = hit
        build.fill(report, ctx.plugin, part)
        build.announce(session, ctx, report)
        keys[specs] = key
        return fn

    def rebuild(specs: tuple) -> Callable:
        key = stored.pop(specs, None)
        fn = load(specs, key)
        if fn is None:
            # built again from the stored graph; a stored variant's program goes back
            # under the key the recipe names, so the next process finds it
            gm = tp.concrete_graph(graph(), specs)
            fn = build.build_variant(
                session,
                ctx,
                build.redecomposed(session, ctx, gm),
                specs,
                report,
                keys=keys,
                key=key,
                common=lambda: gm,
            )
        return fn

    first, guarded = state["first"], state["guarded"]
    with logs.stage(_log, "restore", ctx.graph_name, times=report.stage_seconds) as detail:
        if state["general"]:
            # (the stored graph has no symbolic metadata to build it from again: if the
            # program is gone, torch compiles the Dynamo graph afresh)
            general = load(first, stored.pop(first, None))
            if general is None:
                raise LookupError("the symbolic program is not in the whole-graph cache")
            made = build.Specializing(rebuild, first, general=general, dynamo_guarded=guarded)
        else:
            made = build.Specializing(rebuild, first, dynamo_guarded=guarded)
        detail.append(f"{len(state['variants'])} stored variant(s) of sdk:{ctx.plugin}")
    return wrap.finish(session, Built(ctx, graph, made, report, start, capture=capture))


def _device_type(inputs: list[Any], declared: tuple[str, ...]) -> str | None:
    """Where a graph's kernels run: the device of its first tensor input on a device the
    plugin declares (a CUDA model may take a CPU step count first), else of its first."""
    types = [x.device.type for x in inputs if isinstance(x, torch.Tensor)]
    return next((t for t in types if t in declared), types[0] if types else None)

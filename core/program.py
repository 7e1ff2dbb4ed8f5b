"""The executable program of one ATen graph variant: from the whole-graph cache where it is
there, else built and stored there.

The build is :mod:`core.build_stages`, a table of named stages run by one driver: graph
passes -> lowering -> scheduling -> the plugin renders and compiles the kernels -> kernel
choices measured -> the program (memory planning and the program's steps, which allocate
buffers, launch kernels and externs in order, free what is dead and return the outputs: its
writer is core/wrapper.py; the native runner and the step interpreter run them).
This module looks programs up, has them built, and stores and loads them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import torch
import torch.fx

from sdk.plugin import CompileContext, KernelSource
from sdk.report import (
    ExternReport,
    FallbackReport,
    KernelChoiceReport,
    KernelReport,
    PassReport,
)

from . import build_stages, graph_cache, logs, native, passes, warm
from . import steps as st
from .adapters import torch_private as tp
from .build_stages.artifacts import PluginFailure, ProgramParts
from .build_stages.assemble import announce_kernels
from .build_stages.compile import compile_sources
from .fallback import op_name
from .interp import _PUBLIC_FUNCTIONS
from .lowering import LIBRARY_OPS
from .scheduler import Decision
from .session import CompileSession
from .wrapper import Wrapper, _qualname, _runner, inputs_written, python_launches

#: (the wrapper's names, importable from here as before)
__all__ = [
    "_PUBLIC_FUNCTIONS",
    "PluginFailure",
    "ProgramParts",
    "build_program",
    "inputs_written",
    "load_program",
    "vendor_externs",
]

_log = logging.getLogger(__name__)


def build_program(
    session: CompileSession,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    specs: tuple,
    key: str | None = None,
) -> tuple[Callable, ProgramParts]:
    """``gm`` compiled for inputs of ``specs``, from the whole-graph cache where it is
    there. ``key``: the cache key to use (a restored recipe's) instead of one computed."""
    start = time.perf_counter()
    why = None
    vendor = vendor_externs(session, ctx, gm)
    plan = passes.choose(session.hooks, ctx, vendor)
    with logs.stage(_log, "graph cache", ctx.graph_name) as found:
        if key is None:
            key, why = _cache_key(session, ctx, gm, specs, vendor, plan)
        hit = None if key is None else load_program(session, ctx, key, vendor, plan)
        found.append("hit" if hit is not None else f"miss ({why or 'not there'})")
    if hit is not None:
        return hit
    notes = len(ctx.notes)
    built = build_stages.run(session, ctx, build_stages.Graph(gm, specs, vendor, plan, start))
    fn, parts, wrapper = built.fn, built.parts, built.wrapper
    # the forward's outputs' strides, as its schedule told AOTAutograd (the backward is
    # compiled for saved activations of these strides): a hit tells it again
    parts.output_strides = tp.reported_output_strides() or []
    sources, fns = built.compiled.sources, built.compiled.fns
    parts.cache = why or "stored"
    if key is not None:
        with logs.stage(_log, "store", ctx.graph_name) as stored:
            try:
                # (the runner's build, once per machine, is not this graph's compile)
                took = time.perf_counter() - start - native.build_seconds_since(start)
                entry = _entry(wrapper, sources, fns, parts, ctx.notes[notes:], vendor, took, plan)
                graph_cache.store().put(key, entry)
            except (graph_cache.Uncacheable, OSError) as exc:
                parts.cache = f"not stored: {exc}"
            else:
                parts.key = key
                warm.record(key, entry)
            stored.append(f"whole-graph cache: {parts.cache}")
    return fn, parts


def vendor_externs(
    session: CompileSession, ctx: CompileContext, gm: torch.fx.GraphModule
) -> dict[str, tuple[str, Callable]]:
    """The plugin's own functions for the graph's library calls (``sdk_extern``): call node
    name -> (the call's place in the graph, which names it in the whole-graph cache: node
    names change when a graph is pickled; the function). Asked before the cache is looked
    up: a hit calls what the plugin answers now."""
    out: dict[str, tuple[str, Callable]] = {}
    for i, n in enumerate(gm.graph.nodes):
        if n.op != "call_function" or n.target not in LIBRARY_OPS:
            continue
        fn = session.hooks.sdk_extern(ctx=ctx, op=n.target, node=n)
        if fn is None:
            continue
        if not callable(fn):
            raise PluginFailure(
                f"sdk:{ctx.plugin} sdk_extern answered a {type(fn).__name__} for "
                f"{op_name(n.target)} (node {n.name}); return a callable, or None to let "
                "ATen run the op"
            )
        out[n.name] = (f"{i}:{op_name(n.target)}", fn)
    return out


# -- the whole-graph cache (core/graph_cache.py) ---------------------------------


def _cache_key(
    session: CompileSession,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    specs: tuple,
    vendor: dict[str, tuple[str, Callable]],
    plan: passes.Plan,
) -> tuple[str | None, str | None]:
    """The program's cache key, or None and why there is none. ``vendor``: which call
    nodes run the plugin's own function, and which (by qualified name), are in the key;
    ``plan``: the graph passes that run (by name and owner; a pass's code is the SDK's
    sources, or the plugin's, which its key covers)."""
    if not ctx.core_options.cache:
        return None, "off"
    plugin_key = session.hooks.sdk_cache_key(ctx=ctx)
    if plugin_key is None:
        return None, f"off: sdk:{ctx.plugin} does not implement sdk_cache_key"
    if vendor:
        plugin_key += "|sdk_extern:" + repr(sorted((c, _qualname(f)) for c, f in vendor.values()))
    plugin_key += "|passes:" + plan.key
    try:
        return graph_cache.graph_key(gm, specs, ctx, session.info.version, plugin_key), None
    except graph_cache.Uncacheable as exc:
        return None, f"not stored: {exc}"


def _entry(
    wrapper: Wrapper,
    sources: list[KernelSource],
    fns: list[Callable],
    parts: ProgramParts,
    notes: list[str],
    vendor: dict[str, tuple[str, Callable]],
    seconds: float,
    plan: passes.Plan,
) -> bytes:
    enc = graph_cache.Encoder(fns)
    doc = {
        "wrapper": {
            # the program (core/steps.py)
            "steps": enc(wrapper.steps),
            "n_slots": wrapper.n_slots,
            "n_regs": wrapper.n_regs,
            "native_why": wrapper.native_why,
            "isa": wrapper.isa_version,  # the ISA version the steps were written for
            # the Python functions CALL_PY steps call; the plugin's own library functions by call node: asked again on a hit
            "named": {
                k: {"t": "vendor", "v": wrapper.vendor[k]} if k in wrapper.vendor else enc(v)
                for k, v in wrapper.named.items()
            },
            "constants": {k: enc.tensor(t) for k, t in wrapper.constants.items()},
            "device": wrapper.device,
            "layout_free": sorted(wrapper.layout_free),
            "kernel_read": sorted(wrapper.kernel_read),
            "requires": [list(r) for r in wrapper.requires],
        },
        "sources": [
            {
                "name": s.name,
                "language": s.language,
                "source": s.source,
                "entry": s.entry,
                "meta": enc(s.meta),
            }
            for s in sources
        ],
        "kernels": [
            [k.name, k.plugin, list(k.nodes), k.source, list(k.inputs), list(k.outputs)]
            for k in parts.kernels
        ],
        "externs": [[e.op, e.node, e.plugin] for e in parts.externs],
        "fallbacks": [[f.op, f.reason, f.node] for f in parts.fallbacks],
        "views": sorted(parts.views),
        "decisions": [
            [d.first, d.second, d.saved_bytes, d.fused, d.reason, d.by] for d in parts.decisions
        ],
        "notes": list(notes),
        "sdk_extern": sorted(c for c, _ in vendor.values()),  # the calls sdk_extern took
        "compile_seconds": seconds,  # the cold compile (explain shows it on a hit)
        "passes": [[p.name, p.rewrites, p.plugin, p.off] for p in parts.passes],
        "pass_plan": plan.key,  # the passes chosen to run
        # the kernel choices measured (sdk_kernel_choices): the sources above are the kept ones
        "choices": [
            [c.kernel, c.chosen, [list(t) for t in c.times], c.bytes, c.reused, c.errors]
            for c in parts.choices
        ],
        "tuning": parts.tuning,
        "output_strides": [None if t is None else list(t) for t in parts.output_strides],
    }
    return graph_cache.pack(doc, enc.blobs)


def load_program(
    session: CompileSession,
    ctx: CompileContext,
    key: str,
    vendor: dict[str, tuple[str, Callable]] | None = None,
    plan: passes.Plan | None = None,
) -> tuple[Callable, ProgramParts] | None:
    """The program stored under ``key`` in the whole-graph cache, rebuilt (its kernels
    compiled through the plugin, whose binary cache makes that a load), or None.

    ``vendor``: the plugin's answers of ``sdk_extern`` for the graph now, by call node
    (None: not asked, as where a warm start has no graph yet). A program whose library calls
    through the plugin are not those nodes' is a miss; the others get today's functions.
    ``plan``: the graph passes chosen now; a program compiled with others is a miss."""
    data = graph_cache.store().get(key)
    if data is None:
        return None
    try:
        doc, blobs = graph_cache.unpack(data)
        answers = dict((vendor or {}).values())  # call -> function
        if doc["sdk_extern"] != sorted(answers):
            return None
        if plan is not None and doc["pass_plan"] != plan.key:
            return None
        dec = graph_cache.Decoder([], blobs)
        sources = [
            KernelSource(s["name"], s["language"], s["source"], s["entry"], dec(s["meta"]))
            for s in doc["sources"]
        ]
        fns = compile_sources(session, ctx, sources)
    except Exception:  # noqa: BLE001 - an entry this code cannot read or build is a miss
        return None
    try:
        dec.kernels = fns
        w = doc["wrapper"]
        wrapper = Wrapper(
            dec(w["steps"]),
            w["n_slots"],
            w["n_regs"],
            {k: answers[v["v"]] if v["t"] == "vendor" else dec(v) for k, v in w["named"].items()},
            {k: dec.tensor(v["v"]) for k, v in w["constants"].items()},
            w["device"],
            frozenset(w["layout_free"]),
            frozenset(w["kernel_read"]),
            {k: v["v"] for k, v in w["named"].items() if v["t"] == "vendor"},
            native_why=w["native_why"],
            isa_version=w["isa"],
            requires=tuple((str(t), int(n)) for t, n in w["requires"]),
        )
        fn = wrapper.materialize(ctx.graph_name, ctx.core_options.runner)
        parts = ProgramParts(
            kernels=[
                KernelReport(n, p, tuple(nodes), src, tuple(ins), tuple(outs))
                for n, p, nodes, src, ins, outs in doc["kernels"]
            ],
            externs=[ExternReport(*e) for e in doc["externs"]],
            fallbacks=[FallbackReport(*f) for f in doc["fallbacks"]],
            views=set(doc["views"]),
            decisions=[Decision(*d) for d in doc["decisions"]],
            runner=_runner(fn, wrapper),
            python_launches=python_launches(fn, wrapper),
            program=st.describe(wrapper.steps),
            cache="hit",
            cold_seconds=float(doc.get("compile_seconds", 0.0)),
            key=key,
            passes=[PassReport(*p) for p in doc["passes"]],
            choices=[
                KernelChoiceReport(
                    name,
                    chosen,
                    tuple((lab, s) for lab, s in times),
                    size,
                    reused,
                    tuple(tuple(e) for e in errors),
                )
                for name, chosen, times, size, reused, errors in doc.get("choices", ())
            ],
            tuning=f"{doc['tuning']} (at the cold compile)" if doc.get("tuning") else "",
        )
    except Exception:  # noqa: BLE001 - as above
        return None
    strides = [None if t is None else tuple(t) for t in doc.get("output_strides", ())]
    if strides:
        # as the build's schedule did: without it, AOTAutograd compiles the backward for
        # eager's strides of the saved activations, and the first backward call compiles it
        # again for the layouts this program leaves them in
        tp.report_output_strides(strides)
        parts.output_strides = strides
    for note in doc["notes"]:
        ctx.note(note)
    announce_kernels(session, ctx, sources, parts.hook_faults)
    warm.record(key, data)
    return fn, parts

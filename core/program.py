"""Build the executable program of one ATen graph variant.

lowering -> scheduling -> kernels -> the plugin renders and compiles them ->
memory planning -> a generated Python function that allocates buffers,
launches kernels and externs in order, frees what is dead, and returns the
outputs. That function's per-call work is the launches and allocations only.
The wrapper's writer (and the program as data for the native runner) is
core/wrapper.py; this module builds programs and stores and loads them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx

from sdk.plugin import CompileContext, KernelSource
from sdk.report import (
    ExternReport,
    FallbackReport,
    HookFault,
    KernelChoiceReport,
    KernelReport,
    PassReport,
)

from . import graph_cache, logs, passes, tune, warm
from . import steps as st
from .adapters.torch_private import report_output_strides
from .fallback import op_name
from .ir.graph import ComputedView, ExternNode, TensorValue
from .ir.kernel import Kernel, Layout, check_kernel
from .lowering import (
    COLLECTIVE_OPS,
    LIBRARY_OPS,
    SEED_BUFFER,
    WAIT_OPS,
    Lowerer,
    _dense,
    channels_last_wanted,
    same_strides,
    shape_of,
    strides_of,
)
from .memory import (
    step_reads,
    step_writes,
)
from .registry import CannotCompile, observe
from .scheduler import Decision, Scheduler, _Builder, kernel_name
from .session import CompileSession
from .wrapper import _PUBLIC_FUNCTIONS, Wrapper, _qualname, _runner, _WrapperWriter, inputs_written

#: (the wrapper's names, importable from here as before)
__all__ = ["_PUBLIC_FUNCTIONS", "build_program", "inputs_written", "load_program", "vendor_externs"]

_log = logging.getLogger(__name__)


class PluginFailure(RuntimeError):
    """The plugin could not produce the graph's kernels: the pipeline falls back."""


@dataclass
class ProgramParts:
    kernels: list[KernelReport] = field(default_factory=list)
    externs: list[ExternReport] = field(default_factory=list)
    fallbacks: list[FallbackReport] = field(default_factory=list)
    views: set[str] = field(default_factory=set)
    decisions: list[Decision] = field(default_factory=list)
    wrapper_source: str = ""
    runner: str = ""  # GraphReport.runner
    program: str = ""  # GraphReport.program
    cache: str = ""  # GraphReport.cache
    #: a program from the whole-graph cache: what building it took when it was stored
    cold_seconds: float = 0.0
    key: str | None = None  # the program's key in the whole-graph cache, where it is there
    hook_faults: list[HookFault] = field(default_factory=list)  # observers, passes that raised
    passes: list[PassReport] = field(default_factory=list)  # GraphReport.passes
    choices: list[KernelChoiceReport] = field(default_factory=list)  # GraphReport.choices
    tuning: str = ""  # GraphReport.tuning


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
    fn, parts, wrapper, sources, fns = _build(session, ctx, gm, specs, vendor, plan, start)
    parts.cache = why or "stored"
    if key is not None:
        with logs.stage(_log, "store", ctx.graph_name) as stored:
            try:
                took = time.perf_counter() - start
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


def _build(
    session: CompileSession,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    specs: tuple,
    vendor: dict[str, tuple[str, Callable]] | None = None,
    plan: passes.Plan | None = None,
    start: float | None = None,
) -> tuple[Callable, ProgramParts, Wrapper, list[KernelSource], list[Callable]]:
    """``start``: when the variant's compile began (``time.perf_counter()``), the base of the
    automatic budget for measuring kernel choices (default: now)."""
    start = time.perf_counter() if start is None else start
    # decided on the graph as AOTAutograd made it (its size counts), before the passes
    layout = channels_last_wanted(gm, ctx)
    faults: list[HookFault] = []
    ran: list[PassReport] = []
    if plan is not None:
        with logs.stage(_log, "passes", ctx.graph_name) as done:
            gm, ran, faults = passes.run(plan, gm, ctx, session.registry)
            done.append(passes.summary(ran))
    refused: dict[str, str] = {}
    while True:
        L, sched, outputs, layouts, program = _schedule(
            session, ctx, gm, specs, refused, vendor, layout
        )
        over = _over_limits(ctx, sched.limits, program)
        if not over:
            break
        # an ATen op whose kernel exceeds the plugin's limits on its own (fusion never
        # does): it runs in ATen, and the graph is lowered again around it
        fresh = {k: v for k, v in over.items() if k not in refused}
        if not fresh:
            raise PluginFailure(f"kernels over sdk:{ctx.plugin}'s sdk_kernel_limits: {over}")
        refused.update(fresh)

    if L.free_outputs:
        report_output_strides(
            [
                _strides(outputs[i], layouts) if i in L.free_outputs else None
                for i in range(len(outputs))
            ]
        )
    program = overlap_communication(program)
    kernels = [k for k in program if isinstance(k, Kernel)]
    debug = session.debug
    sources = []
    with logs.stage(_log, "codegen", ctx.graph_name) as rendered:
        for k in kernels:
            if debug:
                check_kernel(k)
            src = session.hooks.sdk_render_kernel(ctx=ctx, kernel=k)
            if src is None:
                raise PluginFailure(
                    f"sdk:{ctx.plugin} rendered nothing for kernel {k.name} "
                    "(its sdk_render_kernel returned None)"
                )
            sources.append(src)
        rendered.append(f"sdk:{ctx.plugin} rendered {len(sources)} kernels")
    with logs.stage(_log, "compile", ctx.graph_name) as built:
        compiling = time.perf_counter()
        fns = _compile(session, ctx, sources, building=True)
        compiling = time.perf_counter() - compiling
        built.append(f"sdk:{ctx.plugin} compiled {len(fns)} kernels")
    with logs.stage(_log, "measure", ctx.graph_name) as measured:
        sources, fns, choices, tuning = tune.choose(
            session, ctx, kernels, sources, fns, time.perf_counter() - start, faults, compiling
        )
        measured.append(tuning or "nothing measured")

    compiled = dict(zip((k.name for k in kernels), fns))
    with logs.stage(_log, "wrap", ctx.graph_name) as wrapped:
        wrapper = _WrapperWriter(L, program, compiled, outputs, layouts).write()
        fn = wrapper.materialize(ctx.graph_name, ctx.core_options.runner)
        wrapped.append(f"Python wrapper of {len(wrapper.source.splitlines())} lines")
    parts = ProgramParts(
        runner=_runner(fn, wrapper),
        program=st.describe(wrapper.steps) if wrapper.steps is not None else "",
        kernels=[
            KernelReport(k.name, ctx.plugin, k.origins, s.source, *_kernel_io(k))
            for k, s in zip(kernels, sources)
        ],
        externs=L.externs,
        fallbacks=L.fallbacks,
        views=L.views,
        decisions=sched.decisions,
        wrapper_source=wrapper.source,
        hook_faults=faults,
        passes=ran,
        choices=choices,
        tuning=tuning,
    )
    _announce_kernels(session, ctx, sources, parts)
    return fn, parts, wrapper, sources, fns


def _strides(entry: tuple, layouts: dict[str, Layout]) -> tuple[int, ...] | None:
    """The strides a graph output of this plan entry (see :func:`_plan_outputs`) leaves in."""
    kind, name, layout = entry
    if kind == "view":
        return tuple(layout.strides)
    if kind == "buf" and name in layouts:
        return tuple(layouts[name].strides)
    return None


def _schedule(
    session: CompileSession,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    specs: tuple,
    refused: dict,
    vendor: dict[str, tuple[str, Callable]] | None = None,
    layout: tuple[bool, str] | None = None,
) -> tuple[Lowerer, Scheduler, list, dict[str, Layout], list[Kernel | ExternNode]]:
    """Lower ``gm`` (the ATen nodes of ``refused`` run in ATen, for its reason) and
    schedule it into kernels and library calls, in program order; with the outputs' plan.
    ``layout``: whether activations are channels-last (see ``Lowerer``)."""
    with logs.stage(_log, "lower", ctx.graph_name) as lowered:
        L = Lowerer(
            gm, specs, ctx, session.hooks, refused=refused, vendor=vendor, channels_last=layout
        )
        L.run()
        lowered.append(
            f"{len(gm.graph.nodes)} FX nodes -> {len(L.nodes)} IR nodes, "
            f"{len(L.externs)} library calls, {len(L.fallbacks)} fallbacks, {len(L.views)} views"
        )
    outputs, keep = _plan_outputs(L)
    with logs.stage(_log, "schedule", ctx.graph_name) as scheduled:
        sched = Scheduler(L.nodes, ctx, session.hooks, keep, fusion=ctx.core_options.fusion)
        steps = sched.run()
        fused = sum(d.fused for d in sched.decisions)
        scheduled.append(
            f"{len(steps)} steps, {fused} fusions made, {len(sched.decisions) - fused} refused"
        )

    layouts: dict[str, Layout] = {}
    for name, spec in L.inputs:
        if name:
            layouts[name] = Layout(
                spec.sizes, spec.strides, spec.offset, spec.dtype, spec.device.type
            )
    for n in L.nodes:
        if isinstance(n, ExternNode):
            layouts.update({o[0]: o[1] for o in n.outputs if o})
        else:
            layouts[n.name] = n.layout
    for name, t in L.constants.items():
        layouts[name] = Layout(
            tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, t.device.type
        )
    for dev_name, (_host, dev_layout) in L.host.items():
        layouts[dev_name] = dev_layout
    layouts[SEED_BUFFER] = Layout((1,), (1,), 0, torch.int64, ctx.device_type)

    owner = sched._owner()
    program: list[Kernel | ExternNode] = []
    used_names: set[str] = set()
    for step in steps:
        if isinstance(step, ExternNode):
            program.append(step)
            continue
        stored = sched.stored(step, owner)
        if not stored:
            continue  # nothing outside the group needs it: dead
        name = kernel_name(step)
        base, i = name, 0
        while name in used_names:
            i += 1
            name = f"{base}_{i}"
        used_names.add(name)
        origins = tuple(dict.fromkeys(o for n in step.members for o in n.origins))
        program.append(_Builder(sched.ctx, step).kernel(name, stored, layouts, origins))
    return L, sched, outputs, layouts, program


def _kernel_io(k: Kernel) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The buffers kernel ``k`` reads and those it writes."""
    return (
        tuple(a.name for a in k.args if a.role in ("in", "inout")),
        tuple(a.name for a in k.args if a.role in ("out", "inout")),
    )


def _over_limits(
    ctx: CompileContext, limits: Any, program: list[Kernel | ExternNode]
) -> dict[str, str]:
    """ATen node name -> why it runs in ATen, for each ATen node of a kernel over the
    plugin's ``sdk_kernel_limits`` (only a kernel of one unsplittable op can be)."""
    if limits is None:
        return {}
    out: dict[str, str] = {}
    for k in program:
        if not isinstance(k, Kernel):
            continue
        ins, outs = _kernel_io(k)
        over = limits.exceeded(len(ins), len(outs), len(set(ins) | set(outs)))
        if over is None:
            continue
        why = (
            f"its kernel alone would take {over} (sdk:{ctx.plugin}'s sdk_kernel_limits); "
            "raise the limit or decompose the op into smaller ones to compile it"
        )
        names = [o.split(": ", 1)[0] for o in k.origins if ": aten." in o or ": prims." in o]
        if not names:
            raise PluginFailure(f"kernel {k.name} ({', '.join(k.origins)}): {why}")
        out.update(dict.fromkeys(names, why))
    return out


def _announce_kernels(
    session: CompileSession, ctx: CompileContext, sources: list[KernelSource], parts: ProgramParts
) -> None:
    for src in sources:
        observe(session.registry, ctx, parts.hook_faults, "sdk_on_kernel_compiled", source=src)


def _touches(step: Kernel | ExternNode) -> set[str]:
    return step_reads(step) | set(step_writes(step))


def overlap_communication(program: list[Kernel | ExternNode]) -> list[Kernel | ExternNode]:
    """Computation between a collective and its wait overlaps the communication: each
    collective moves up to just after the last step that writes what it reads, then each
    wait down to just before the first step that reads what it returns (the program's
    outputs are read at its end). Collectives keep their order among themselves, and so do
    waits; every rank runs the same program, so the collectives start in one order on all
    ranks."""
    out = list(program)
    for i in range(len(out)):
        step = out[i]
        if isinstance(step, ExternNode) and step.target in COLLECTIVE_OPS:
            ins = step_reads(step)
            j = i
            while (
                j > 0
                and not (set(step_writes(out[j - 1])) & ins)
                and not _is(out[j - 1], COLLECTIVE_OPS)
            ):
                j -= 1
            out.insert(j, out.pop(i))
    for i in range(len(out) - 1, -1, -1):
        step = out[i]
        if isinstance(step, ExternNode) and step.target in WAIT_OPS:
            made = _touches(step)  # the wait returns (an alias of) its input
            j = i
            while (
                j + 1 < len(out)
                and not (_touches(out[j + 1]) & made)
                and not _is(out[j + 1], WAIT_OPS)
            ):
                j += 1
            out.insert(j, out.pop(i))
    return out


def _is(step: Kernel | ExternNode, ops: frozenset) -> bool:
    return isinstance(step, ExternNode) and step.target in ops


def _compile(
    session: CompileSession,
    ctx: CompileContext,
    sources: list[KernelSource],
    *,
    building: bool = False,
) -> list[Callable]:
    """The plugin's callables of ``sources``; ``building``: they are new (not a cache hit's,
    which the plugin loads from its own cache), so a plugin that cannot compile here is not
    asked (:class:`~core.registry.CannotCompile`)."""
    if not sources:
        return []
    if building and session.cannot_compile:
        raise CannotCompile(ctx.plugin, session.cannot_compile)
    fns = session.hooks.sdk_compile_kernels(ctx=ctx, sources=sources)
    if fns is None or len(fns) != len(sources):
        raise PluginFailure(
            f"sdk:{ctx.plugin} compiled {0 if fns is None else len(fns)} "
            f"of {len(sources)} kernels; sdk_compile_kernels must return "
            "one callable per source"
        )
    return list(fns)


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
            "source": wrapper.source,
            # the plugin's own library functions by call node: asked again on a hit
            "named": {
                k: {"t": "vendor", "v": wrapper.vendor[k]} if k in wrapper.vendor else enc(v)
                for k, v in wrapper.named.items()
            },
            "constants": {k: enc.tensor(t) for k, t in wrapper.constants.items()},
            "on_device": list(wrapper.on_device),
            "device": wrapper.device,
            "layout_free": sorted(wrapper.layout_free),
            "kernel_read": sorted(wrapper.kernel_read),
            # the program as data (core/steps.py), for the native runner
            "steps": None if wrapper.steps is None else enc(wrapper.steps),
            "n_slots": wrapper.n_slots,
            "n_regs": wrapper.n_regs,
            "native_why": wrapper.native_why,
            "isa": wrapper.isa_version,  # the ISA version the steps were written for
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
        fns = _compile(session, ctx, sources)
    except Exception:  # noqa: BLE001 - an entry this code cannot read or build is a miss
        return None
    try:
        dec.kernels = fns
        w = doc["wrapper"]
        wrapper = Wrapper(
            w["source"],
            {k: answers[v["v"]] if v["t"] == "vendor" else dec(v) for k, v in w["named"].items()},
            {k: dec.tensor(v["v"]) for k, v in w["constants"].items()},
            tuple(w["on_device"]),
            w["device"],
            frozenset(w["layout_free"]),
            frozenset(w["kernel_read"]),
            {k: v["v"] for k, v in w["named"].items() if v["t"] == "vendor"},
            steps=None if w["steps"] is None else dec(w["steps"]),
            n_slots=w["n_slots"],
            n_regs=w.get("n_regs", 0),
            native_why=w["native_why"],
            isa_version=w.get("isa", 0),  # (0: written before versions: the runner refuses it)
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
            wrapper_source=wrapper.source,
            runner=_runner(fn, wrapper),
            program=st.describe(wrapper.steps) if wrapper.steps is not None else "",
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
    for note in doc["notes"]:
        ctx.note(note)
    _announce_kernels(session, ctx, sources, parts)
    warm.record(key, data)
    return fn, parts


def _plan_outputs(L: Lowerer) -> tuple[list[tuple], set[str]]:
    """How each graph output is produced, and the computed buffers that must be stored."""
    plan, keep = [], set()
    returned: set[str] = set()
    for i, (v, meta) in enumerate(zip(L.outputs, L.output_metas)):
        st = v.storage if isinstance(v, TensorValue) else None
        if st is not None and st.buffer in L.merged and st.buffer in returned:
            # two graph nodes of equal values became one node: each output gets its own
            v = L.pointwise(v.sizes, v.dtype, v.load, cse=False)
        if st is not None:
            returned.add(st.buffer)
        if (
            L.channels_last
            and i not in L.free_outputs
            and isinstance(v, TensorValue)
            and isinstance(meta, torch.Tensor)
        ):
            # a layout the core chose stays inside the graph: outputs leave in eager's
            want = strides_of(meta)
            st = v.storage
            if (
                st is not None
                and shape_of(meta) == tuple(v.sizes)
                and _dense(v.sizes, want)
                and not same_strides(v.sizes, st.layout.strides, want)
            ):
                v = L.require_layout(v, want)
        if isinstance(v, ComputedView) and v.reindex is None and v.sizes == v.node.sizes:
            plan.append(("buf", v.node.name, None))
            keep.add(v.node.name)
        elif isinstance(v, TensorValue) and v.storage is not None:
            st = L.on_host(v.storage)  # a host value leaves the graph as itself, as in eager
            plan.append(("view", st.buffer, st.layout))
            if isinstance(v, ComputedView):
                keep.add(v.node.name)
        elif isinstance(v, TensorValue):
            copy = L.pointwise(v.sizes, v.dtype, v.load)
            plan.append(("buf", copy.node.name, None))
            keep.add(copy.node.name)
        else:
            plan.append(("const", v, None))
    # the new values of inputs written in place are stored (into the inputs' memory)
    keep |= set(L.written)
    return plan, keep

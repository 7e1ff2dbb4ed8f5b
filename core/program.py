"""Build the executable program of one ATen graph variant.

lowering -> scheduling -> kernels -> the plugin renders and compiles them ->
memory planning -> a generated Python function that allocates buffers,
launches kernels and externs in order, frees what is dead, and returns the
outputs. That function's per-call work is the launches and allocations only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx

from sdk.errors import SDKError
from sdk.plugin import CompileContext, KernelSource
from sdk.report import ExternReport, FallbackReport, HookFault, KernelReport, PassReport

from . import graph_cache, logs, passes, warm
from .adapters.torch_private import buffer_ops
from .fallback import op_name
from .guards import is_symbolic, size_bindings
from .ir.graph import ComputedView, ExternNode, StorageView, TensorValue
from .ir.index import is_static, print_size, print_sizes, static
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
from .memory import plan_memory, step_reads, step_writes
from .registry import observe
from .scheduler import Decision, Scheduler, _Builder, kernel_name

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
    cache: str = ""  # GraphReport.cache
    key: str | None = None  # the program's key in the whole-graph cache, where it is there
    hook_faults: list[HookFault] = field(default_factory=list)  # observers, passes that raised
    passes: list[PassReport] = field(default_factory=list)  # GraphReport.passes


def build_program(
    session: Any,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    specs: tuple,
    key: str | None = None,
) -> tuple[Callable, ProgramParts]:
    """``gm`` compiled for inputs of ``specs``, from the whole-graph cache where it is
    there. ``key``: the cache key to use (a restored recipe's) instead of one computed."""
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
    fn, parts, wrapper, sources, fns = _build(session, ctx, gm, specs, vendor, plan)
    parts.cache = why or "stored"
    if key is not None:
        with logs.stage(_log, "store", ctx.graph_name) as stored:
            try:
                entry = _entry(wrapper, sources, fns, parts, ctx.notes[notes:], vendor, plan)
                graph_cache.store().put(key, entry)
            except (graph_cache.Uncacheable, OSError) as exc:
                parts.cache = f"not stored: {exc}"
            else:
                parts.key = key
                warm.record(key, entry)
            stored.append(f"whole-graph cache: {parts.cache}")
    return fn, parts


def vendor_externs(
    session: Any, ctx: CompileContext, gm: torch.fx.GraphModule
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
    session: Any,
    ctx: CompileContext,
    gm: torch.fx.GraphModule,
    specs: tuple,
    vendor: dict[str, tuple[str, Callable]] | None = None,
    plan: passes.Plan | None = None,
) -> tuple[Callable, ProgramParts, Wrapper, list[KernelSource], list[Callable]]:
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
        fns = _compile(session, ctx, sources)
        built.append(f"sdk:{ctx.plugin} compiled {len(fns)} kernels")

    compiled = dict(zip((k.name for k in kernels), fns))
    with logs.stage(_log, "wrap", ctx.graph_name) as wrapped:
        wrapper = _WrapperWriter(L, program, compiled, outputs, layouts).write()
        fn = wrapper.materialize(ctx.graph_name)
        wrapped.append(f"Python wrapper of {len(wrapper.source.splitlines())} lines")
    parts = ProgramParts(
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
    )
    _announce_kernels(session, ctx, sources, parts)
    return fn, parts, wrapper, sources, fns


def _schedule(
    session: Any,
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
        sched = Scheduler(L.nodes, ctx, session.hooks, keep, fusion=ctx.options["fusion"])
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
        program.append(_Builder(sched, step).kernel(name, stored, layouts, origins))
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
    session: Any, ctx: CompileContext, sources: list[KernelSource], parts: ProgramParts
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


def _compile(session: Any, ctx: CompileContext, sources: list[KernelSource]) -> list[Callable]:
    if not sources:
        return []
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
    session: Any,
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
    if not graph_cache.enabled(ctx.options):
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
        "passes": [[p.name, p.rewrites, p.plugin, p.off] for p in parts.passes],
        "pass_plan": plan.key,  # the passes chosen to run
    }
    return graph_cache.pack(doc, enc.blobs)


def load_program(
    session: Any,
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
        )
        fn = wrapper.materialize(ctx.graph_name)
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
            cache="hit",
            key=key,
            passes=[PassReport(*p) for p in doc["passes"]],
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
    for v, meta in zip(L.outputs, L.output_metas):
        st = v.storage if isinstance(v, TensorValue) else None
        if st is not None and st.buffer in L.merged and st.buffer in returned:
            # two graph nodes of equal values became one node: each output gets its own
            v = L.pointwise(v.sizes, v.dtype, v.load, cse=False)
        if st is not None:
            returned.add(st.buffer)
        if L.channels_last and isinstance(v, TensorValue) and isinstance(meta, torch.Tensor):
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


@dataclass
class Wrapper:
    """The generated wrapper: its source and what the source names (beside the standard
    helpers :meth:`materialize` provides). Plain data, so the whole-graph cache can keep it."""

    source: str
    named: dict[str, Any]  # the _cN objects: kernels, extern ops, constants of the calls
    constants: dict[str, torch.Tensor]  # the graph's constant tensors, by buffer name
    on_device: tuple[str, ...]  # constants copied to the device once, on the first call
    device: str
    layout_free: frozenset[int]
    kernel_read: frozenset[int]
    #: the names in ``named`` of the plugin's own library functions, and their calls
    vendor: dict[str, str] = field(default_factory=dict)

    def materialize(self, graph_name: str) -> Callable:
        device = torch.device(self.device)
        empty, empty_fast, view, is_current = buffer_ops(device)
        env: dict[str, Any] = {
            "torch": torch,
            "_as_strided": torch.as_strided,
            "_view": view,
            "_restride": _restride,
            "_dev": device,
            "_empty": empty_fast or empty,
            "_empty_fast": empty_fast,
            "_empty_any": empty,
            "_is_current": is_current,
            "_seed": _make_seed,
            "_vendor_result": _vendor_result,
            "_writes": _WRITES,
        }
        moved: dict[str, Any] = {}
        for name, t in self.constants.items():
            env[name] = t
            if name in self.on_device:
                env[f"{name}_src"] = _OnDevice(t, moved, name)
        env.update(self.named)
        exec(compile(self.source, f"<sdk wrapper {graph_name}>", "exec"), env)  # noqa: S102
        call = env["call"]
        # what the per-call guard must check (guards.make_check): only sizes of inputs
        # nothing bakes the layout of; only alignment where Dynamo already guards layouts
        call.layout_free = self.layout_free
        call.kernel_read = self.kernel_read
        return call


class _WrapperWriter:
    """Writes the source of one program's wrapper: ``call(args)``, which binds the inputs,
    runs every kernel and library call in order and returns the outputs.

    :meth:`write` calls one method per part of that function, in the order the lines come.
    The parts share what the source names (the ``_cN`` objects, :meth:`_const`), the memory
    plan, and what the per-call guard must learn from the source: the inputs whose strides
    it bakes in, and those a kernel reads (:meth:`_wrapper`).
    """

    def __init__(
        self,
        L: Lowerer,
        program: list,
        compiled: dict[str, Callable],
        outputs: list[tuple],
        layouts: dict[str, Layout],
    ) -> None:
        self.L, self.program, self.compiled = L, program, compiled
        self.outputs, self.layouts = outputs, layouts
        self.copy_of = {host.buffer: dev for dev, (host, _) in L.host.items()}  # host -> device
        self.named: dict[str, Any] = {}
        self.vendor: dict[str, str] = {}  # named plugin functions -> their calls
        self._consts: dict[int, str] = {}
        out_bufs = {b for kind, b, _ in outputs if kind in ("buf", "view")}
        #: buffers that are graph inputs written in place (core/lowering/mutation.py)
        self.written = L.written
        self.mem = plan_memory(
            program, layouts, out_bufs, {n for n, _ in L.inputs if n}, self.written
        )
        # device copies of host values, made where (and only if) a kernel or output reads one:
        # a copy costs a host-device transfer per call, and cannot be captured in a CUDA graph
        self.read = set(out_bufs)
        for step in program:
            self.read |= {a.name for a in step.args} if isinstance(step, Kernel) else step.reads
        # inputs whose strides something here bakes in: read by a kernel (which also
        # assumes the pointer's alignment), or re-viewed with fixed strides; the others only
        # reach library calls whole
        self.baked: set[str] = set()
        self.kernel_read: set[str] = set()
        self.input_names = {n for n, _ in L.inputs if n}
        # buffers whose storage offset at run time is their layout's: inputs (Dynamo guards
        # it) and what the kernels write (the memory plan places them)
        self.placed = self.input_names | {
            a.name for k in program if isinstance(k, Kernel) for a in k.args if a.role != "in"
        }
        self.lines = ["def call(args):"]

    def write(self) -> Wrapper:
        """The wrapper: its prologue, each step between the memory plan's lines, the return."""
        self._prologue()
        writing = False
        for i, step in enumerate(self.program):
            self._emit(self.mem.before.get(i, []))
            if isinstance(step, Kernel):
                self._launch(step)
            else:
                self._call_extern(i, step)
            if not writing and _writes_input(step, self.written):
                # an input is written: a failure from here on may not run the graph again
                # through ATen (that would write it twice). (A step that raised before it
                # returned wrote nothing: a launch or a compile that failed.)
                writing = True
                self.lines.append("    _writes.begun = True")
            self._emit(self.mem.after.get(i, []))
        if writing:
            self.lines.append("    _writes.begun = False")
        self._return_outputs()
        return self._wrapper()

    def _emit(self, lines: list[str]) -> None:
        """The memory plan's lines (allocations, frees) at the function's indentation."""
        for line in lines:
            self.lines.append("    " + line)

    def _const(self, x: Any) -> str:
        """The name the source calls ``x`` by (an object it cannot spell: a kernel, an op, a
        tensor, ``inf``); one name per object, numbered in the order first used."""
        key = id(x)
        if key not in self._consts:
            self._consts[key] = f"_c{len(self._consts)}"
            self.named[self._consts[key]] = x
        return self._consts[key]

    def _device_copy(self, host: str) -> list[str]:
        """The line that copies host value ``host`` to the device, if anything reads the copy."""
        dev = self.copy_of.get(host)
        if dev not in self.read:
            return []
        if host in self.L.constants:
            return [f"    {dev} = {host}_src.get(_dev)"]
        return [f"    {dev} = {host}.to(_dev).contiguous()"]

    def _prologue(self) -> None:
        """Everything before the first step: the allocator, the inputs (and their device
        copies), the RNG seed, and the size symbols' values for this call."""
        L, lines = self.L, self.lines
        _, empty_fast, _, is_current = buffer_ops(L.device)
        if empty_fast is not None and is_current is not None:
            # the fast allocator allocates on the current device: another may be current
            lines.append("    _empty = _empty_fast if _is_current() else _empty_any")
        for i, (name, _spec) in enumerate(L.inputs):
            if name:
                lines.append(f"    {name} = args[{i}]")
                lines += self._device_copy(name)
        for name in L.constants:
            lines += self._device_copy(name)
        if L.needs_seed:
            lines.append(f"    {SEED_BUFFER} = _seed(_dev)")
        if is_symbolic(L.specs):
            # the size symbols' values, read from the inputs (the guard checked they fit)
            for sym, src in size_bindings(L.specs).items():
                lines.append(f"    {sym.name} = {src}")

    def _restrided(self, buf: str, layout: Layout, *, result: bool = False) -> str:
        """A view of ``buf``. An intermediate is reinterpreted in place (no autograd view
        record); a result is a real view, as eager's would be."""
        delta = static(sympy.expand(sympy.sympify(layout.offset) - self.layouts[buf].offset))
        sizes, strides = print_sizes(layout.sizes), print_sizes(layout.strides)
        if buf in self.placed and not result:
            return f"_view({buf}, {sizes}, {strides}, {print_size(delta)})"
        offset = print_size(layout.offset)
        if buf in self.input_names:
            offset = f"{buf}.storage_offset()" + (f" + {print_size(delta)}" if delta != 0 else "")
        return f"_as_strided({buf}, {sizes}, {strides}, {offset})"

    def _arg(self, x: Any) -> str:
        """A library call's argument as source: a buffer (viewed where its layout is not the
        buffer's), a literal, a symbolic size, or a named object."""
        if isinstance(x, StorageView):
            base = self.layouts[x.buffer]
            if x.layout == base:
                return x.buffer
            self.baked.add(x.buffer)
            return self._restrided(x.buffer, x.layout)
        if isinstance(x, (list, tuple)):
            inner = ", ".join(self._arg(y) for y in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner}{',' if len(x) == 1 else ''})"
        if isinstance(x, sympy.Expr):  # a symbolic size handed to a library call
            return print_size(x)
        if isinstance(x, (bool, int, float)) or x is None:
            return (
                repr(x)
                if not (isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))))
                else self._const(x)
            )
        return self._const(x)

    def _launch(self, step: Kernel) -> None:
        """A kernel's launch: its buffers, then its size arguments. A kernel bakes in the
        strides (and alignment) of every input it reads."""
        self.baked.update(a.name for a in step.args)
        self.kernel_read.update(a.name for a in step.args)
        fname = self._const(self.compiled[step.name])
        call_args = [a.name for a in step.args] + [s.name for s in step.size_args]
        self.lines.append(f"    {fname}({', '.join(call_args)})")

    def _call_extern(self, i: int, step: ExternNode) -> None:
        """A library call, or its in-place form where the memory plan chose one (the report
        then names the in-place op that runs)."""
        L = self.L
        in_place = self.mem.extern_in_place.get(i)
        if in_place is not None and step.name in L.extern_report:
            at = L.extern_report[step.name]
            L.externs[at] = ExternReport(op_name(in_place), L.externs[at].node)
        if step.vendor is not None:
            self._call_vendor(step)
            return
        op = self._const(_callable(step) if in_place is None else in_place)
        call_args = ", ".join(self._arg(a) for a in step.args)
        kw = ", ".join(f"{k}={self._arg(v)}" for k, v in step.kwargs.items())
        call = f"{op}({call_args}{', ' if call_args and kw else ''}{kw})"
        names = [o[0] if o else "_" for o in step.outputs]
        if in_place is not None:
            # its output is its first argument, in the layout planned for it
            self.lines.append(f"    {call}  # {in_place}")
            return
        if step.multi_output:
            self.lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = {call}")
        else:
            self.lines.append(f"    {names[0]} = {call}")
        self._check_extern_outputs(step)

    def _call_vendor(self, step: ExternNode) -> None:
        """A library call through the plugin's own function (``sdk_extern``), named once per
        call site (the whole-graph cache asks the plugin for it again by its call node).
        Each tensor it returns is checked against the op's shape, dtype and device, and
        put in the strides the graph reads it in."""
        call, fn = step.vendor
        node = step.origins[0].split(":")[0]
        op = f"_x{len(self.vendor)}"
        self.named[op], self.vendor[op] = fn, call
        call_args = ", ".join(self._arg(a) for a in step.args)
        kw = ", ".join(f"{k}={self._arg(v)}" for k, v in step.kwargs.items())
        call = f"{op}({call_args}{', ' if call_args and kw else ''}{kw})"
        who = (
            f"sdk:{self.L.ctx.plugin}'s sdk_extern function for {op_name(step.target)} "
            f"(node {node})"
        )
        expected = []
        for out in step.outputs:
            if not out:
                expected.append("None")
                continue
            lay = out[1]
            expected.append(
                f"({print_sizes(lay.sizes)}, {print_sizes(lay.strides)}, "
                f"{self._const(lay.dtype)}, {lay.device!r})"
            )
        specs = f"({', '.join(expected)}{',' if len(expected) == 1 else ''})"
        names = [o[0] if o else "_" for o in step.outputs]
        multi = step.multi_output
        self.lines.append(
            f"    {', '.join(names)}{',' if len(names) == 1 else ''} = "
            f"_vendor_result({call}, {specs}, {multi}, {who!r})"
        )
        for out in step.outputs:  # host outputs: the device copy
            if out and out[0] in self.copy_of:
                self.lines += self._device_copy(out[0])

    def _check_extern_outputs(self, step: ExternNode) -> None:
        """After a library call: copy its host outputs to the device, and give each output
        read later the strides the kernels index it with (the op may have chosen others)."""
        lines = self.lines
        for out in step.outputs:
            if out and out[0] in self.copy_of:
                lines += self._device_copy(out[0])
                continue
            if not out or out[0] not in self.read:
                continue  # unused (an attention op may even return None for it)
            if step.target in COLLECTIVE_OPS:
                continue  # not ready until its wait: the wait's output is checked
            # (a size symbol is >= 2)
            dims = [d for d, n in enumerate(out[1].sizes) if not is_static(n) or n > 1]
            if dims:
                # kernels index this buffer with the strides the trace gave it; an
                # op that chose others (they may follow its inputs') is copied into them
                name, lay = out
                got = ", ".join(f"{name}.stride({d})" for d in dims)
                want = ", ".join(print_size(lay.strides[d]) for d in dims)
                lines.append(f"    if {name} is not None and ({got},) != ({want},):")
                lines.append(f"        {name} = _restride({name}, {print_sizes(lay.strides)})")

    def _return_outputs(self) -> None:
        """The return: each graph output as a buffer, a view of one, a size or a constant."""
        rets = []
        for kind, buf, layout in self.outputs:
            if kind == "buf":
                rets.append(buf)
            elif kind == "view":
                base = self.layouts[buf]
                if layout != base:
                    self.baked.add(buf)
                rets.append(buf if layout == base else self._restrided(buf, layout, result=True))
            elif isinstance(buf, sympy.Expr):  # a symbolic size (saved for the backward)
                rets.append(print_size(buf))
            else:
                rets.append(self._const(buf))
        self.lines.append(f"    return ({', '.join(rets)}{',' if len(rets) == 1 else ''})")

    def _wrapper(self) -> Wrapper:
        """The source with what it names, and what the per-call guard needs: the inputs
        whose layout nothing here bakes in (``layout_free``: their sizes alone are checked)
        and those a kernel reads (``kernel_read``: their alignment is checked too)."""
        L = self.L
        return Wrapper(
            "\n".join(self.lines),
            self.named,
            dict(L.constants),
            tuple(n for n in L.constants if n in self.copy_of),
            str(L.device),
            vendor=dict(self.vendor),
            layout_free=frozenset(
                i
                for i, (name, _) in enumerate(L.inputs)
                if name and name not in self.baked and name not in self.copy_of
            ),
            kernel_read=frozenset(
                i for i, (name, _) in enumerate(L.inputs) if name and name in self.kernel_read
            ),
        )


#: ATen ops whose public ``torch`` function runs the same overload with less per-call host
#: work than calling the ``OpOverload`` (its schema-driven argument conversion costs about
#: 6 us more per call on an H100 host: a graph with 60 convolutions pays 0.4 ms a call).
#: The keyword arguments each function takes by the schema's names.
_PUBLIC_FUNCTIONS: dict[str, tuple[str, frozenset[str]]] = {
    "aten.convolution.default": ("convolution", frozenset()),
    "aten.mm.default": ("mm", frozenset()),
    "aten.bmm.default": ("bmm", frozenset()),
    "aten.addmm.default": ("addmm", frozenset({"beta", "alpha"})),
    "aten.baddbmm.default": ("baddbmm", frozenset({"beta", "alpha"})),
    "aten._addmm_activation.default": ("_addmm_activation", frozenset({"beta", "alpha"})),
}


#: per thread: whether the program running (or the one that just raised) has begun writing
#: graph inputs in place (its wrapper sets it before the first such step, and clears it
#: when it returns)
_WRITES = threading.local()


def inputs_written() -> bool:
    """Whether the program that raised on this thread had begun writing its graph inputs
    in place (then running the graph again through ATen would apply those writes twice).
    Clears the mark."""
    begun = getattr(_WRITES, "begun", False)
    _WRITES.begun = False
    return begun


def _writes_input(step: Kernel | ExternNode, written: dict[str, str]) -> bool:
    if isinstance(step, ExternNode):
        return step.into is not None
    return any(a.name in written for a in step.args if a.role != "in")


def _callable(step: ExternNode) -> Any:
    """What the wrapper calls for an extern: the public function where one is equivalent."""
    entry = _PUBLIC_FUNCTIONS.get(str(step.target))
    if entry is None or not set(step.kwargs) <= entry[1]:
        return step.target
    return getattr(torch, entry[0])


def _qualname(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__qualname__)}"


def _vendor_result(result: Any, specs: tuple, multi: bool, who: str) -> tuple:
    """What a plugin's library function returned, as the outputs of its call: each tensor
    checked against ``specs`` (sizes, strides, dtype, device type per output; None: not a
    tensor) and put in those strides where it is in others. Raises :class:`SDKError` naming
    the function, what it returned and what the op gives."""
    outs = tuple(result) if multi and isinstance(result, (tuple, list)) else (result,)
    if len(outs) != len(specs):
        raise SDKError(
            f"{who} returned {len(outs)} value(s) where the op returns {len(specs)}; "
            "return what the ATen op returns (a tuple where it returns several)"
        )
    checked = []
    for i, (t, spec) in enumerate(zip(outs, specs)):
        if spec is None:
            checked.append(t)
            continue
        sizes, strides, dtype, device = spec
        if (
            not isinstance(t, torch.Tensor)
            or tuple(t.shape) != tuple(sizes)
            or t.dtype != dtype
            or t.device.type != device
        ):
            got = (
                f"a tensor of shape {tuple(t.shape)}, {t.dtype} on {t.device.type}"
                if isinstance(t, torch.Tensor)
                else f"a {type(t).__name__}"
            )
            raise SDKError(
                f"{who} returned {got} as output {i}, where the op gives shape "
                f"{tuple(sizes)}, {dtype} on {device}; fix that function (or answer None "
                "from sdk_extern for such calls, to let ATen run them)"
            )
        if any(n != 1 and t.stride(d) != s for d, (n, s) in enumerate(zip(sizes, strides))):
            t = _restride(t, tuple(strides))
        checked.append(t)
    return tuple(checked)


def _make_seed(device: torch.device) -> torch.Tensor:
    """A fresh seed per call, drawn from the device's generator (so manual_seed reproduces
    runs). Drawn on the device: no host-device copy, and a CUDA graph replay draws anew."""
    return torch.randint(0, 2**62, (1,), dtype=torch.int64, device=device)


class _OnDevice:
    """A constant from another device (a CPU scalar), copied to the graph's device once."""

    def __init__(self, tensor: torch.Tensor, cache: dict[str, Any], name: str) -> None:
        self.tensor, self.cache, self.name = tensor, cache, name

    def get(self, device: torch.device) -> torch.Tensor:
        t = self.cache.get(self.name)
        if t is None:
            t = self.cache[self.name] = self.tensor.to(device).contiguous()
        return t


def _restride(t: torch.Tensor, strides: tuple[int, ...]) -> torch.Tensor:
    """``t``'s values in a tensor of these strides."""
    out = torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device)
    out.copy_(t)
    return out

"""The ``schedule`` stage: the IR fused into kernels (:class:`~core.scheduler.Scheduler`) and
library calls, in program order, communication overlapped with computation. A kernel of one
ATen op over the plugin's ``sdk_kernel_limits`` (fusion never makes one) sends that op to ATen:
the stage answers :class:`Again`, and the driver lowers the graph again around it."""

from __future__ import annotations

import dataclasses
from typing import Any

from sdk.ir.graph import ExternNode
from sdk.ir.kernel import Kernel, Layout
from sdk.plugin import CompileContext

from ..adapters.torch_private import report_output_strides
from ..lowering import COLLECTIVE_OPS, WAIT_OPS
from ..memory import step_reads, step_writes
from ..scheduler import Scheduler, _Builder, kernel_name
from ..session import CompileSession
from .artifacts import Again, Lowered, PluginFailure, Scheduled, kernel_io


def run(session: CompileSession, ctx: CompileContext, lowered: Lowered) -> Scheduled | Again:
    L = lowered.lowerer
    sched = Scheduler(
        L.nodes,
        ctx,
        session.hooks,
        lowered.keep,
        fusion=ctx.core_options.fusion,
        # a host value's device copy is made right after the call that returns the value:
        # its readers come after that call (a fused kernel ran before it, on a GPU)
        copies={dev: host.buffer for dev, (host, _) in L.host.items()},
    )
    groups = sched.run()
    owner = sched._owner()
    steps: list[Kernel | ExternNode] = []
    used_names: set[str] = set()
    for step in groups:
        if isinstance(step, ExternNode):
            steps.append(step)
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
        steps.append(_Builder(sched.ctx, step).kernel(name, stored, lowered.layouts, origins))
    over = _over_limits(ctx, sched.limits, steps)
    if over:
        graph = lowered.graph
        fresh = {k: v for k, v in over.items() if k not in graph.refused}
        if not fresh:
            raise PluginFailure(f"kernels over sdk:{ctx.plugin}'s sdk_kernel_limits: {over}")
        again = dataclasses.replace(graph, refused={**graph.refused, **fresh})
        return Again("lower", again, f"{len(fresh)} ATen ops over the kernel limits run in ATen")
    if L.free_outputs:
        report_output_strides(
            [
                _strides(lowered.outputs[i], lowered.layouts) if i in L.free_outputs else None
                for i in range(len(lowered.outputs))
            ]
        )
    return Scheduled(lowered, sched, overlap_communication(steps))


def _strides(entry: tuple, layouts: dict[str, Layout]) -> tuple[int, ...] | None:
    """The strides a graph output of this plan entry (see
    :func:`~core.build_stages.lower.plan_outputs`) leaves in."""
    kind, name, layout = entry
    if kind == "view":
        return tuple(layout.strides)
    if kind == "buf" and name in layouts:
        return tuple(layouts[name].strides)
    return None


def _over_limits(
    ctx: CompileContext, limits: Any, steps: list[Kernel | ExternNode]
) -> dict[str, str]:
    """ATen node name -> why it runs in ATen, for each ATen node of a kernel over the
    plugin's ``sdk_kernel_limits`` (only a kernel of one unsplittable op can be)."""
    if limits is None:
        return {}
    out: dict[str, str] = {}
    for k in steps:
        if not isinstance(k, Kernel):
            continue
        ins, outs = kernel_io(k)
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

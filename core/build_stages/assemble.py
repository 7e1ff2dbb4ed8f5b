"""The ``program`` stage: the program's steps, which run the kernels and library calls in
order over the memory plan (:mod:`core.wrapper`), made callable, with
what the variant's build reports; the observers told of each compiled kernel."""

from __future__ import annotations

from sdk.plugin import CompileContext, KernelSource
from sdk.report import HookFault, KernelReport

from .. import steps as st
from ..registry import observe
from ..session import CompileSession
from ..wrapper import _runner, _WrapperWriter
from .artifacts import Compiled, Program, ProgramParts, kernel_io


def run(session: CompileSession, ctx: CompileContext, compiled: Compiled) -> Program:
    rendered = compiled.rendered
    scheduled = rendered.scheduled
    lowered = scheduled.lowered
    L, graph = lowered.lowerer, lowered.graph
    # (the kernels the program runs: the measured choices where there were any)
    announce_kernels(session, ctx, compiled.sources, graph.faults)
    by_name = dict(zip((k.name for k in rendered.kernels), compiled.fns))
    wrapper = _WrapperWriter(L, scheduled.steps, by_name, lowered.outputs, lowered.layouts).write()
    fn = wrapper.materialize(ctx.graph_name, ctx.core_options.runner)
    parts = ProgramParts(
        runner=_runner(fn, wrapper),
        program=st.describe(wrapper.steps),
        kernels=[
            KernelReport(k.name, ctx.plugin, k.origins, s.source, *kernel_io(k))
            for k, s in zip(rendered.kernels, compiled.sources)
        ],
        externs=L.externs,
        fallbacks=L.fallbacks,
        views=L.views,
        decisions=scheduled.scheduler.decisions,
        hook_faults=graph.faults,
        passes=graph.passes,
        choices=compiled.choices,
        tuning=compiled.tuning,
    )
    return Program(compiled, wrapper, fn, parts)


def announce_kernels(
    session: CompileSession,
    ctx: CompileContext,
    sources: list[KernelSource],
    faults: list[HookFault],
) -> None:
    """``sdk_on_kernel_compiled`` for each source (the observers' faults into ``faults``)."""
    for src in sources:
        observe(session.registry, ctx, faults, "sdk_on_kernel_compiled", source=src)

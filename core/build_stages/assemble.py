"""The ``program`` stage: the program's steps, which run the kernels and library calls in
order over the memory plan (:mod:`core.wrapper`), made callable, with
what the variant's build reports; the observers told of each compiled kernel."""

from __future__ import annotations

from sdk.plugin import CompileContext, KernelSource
from sdk.report import HookFault, KernelReport

from .. import steps as st
from ..guards import parse_requires, requirement_text
from ..ir.index import dominant_bounds
from ..registry import observe
from ..session import CompileSession
from ..wrapper import _runner, _WrapperWriter, python_launches
from .artifacts import Compiled, PluginFailure, Program, ProgramParts, kernel_io


def run(session: CompileSession, ctx: CompileContext, compiled: Compiled) -> Program:
    rendered = compiled.rendered
    scheduled = rendered.scheduled
    lowered = scheduled.lowered
    L, graph = lowered.lowerer, lowered.graph
    # (the kernels the program runs: the measured choices where there were any)
    announce_kernels(session, ctx, compiled.sources, graph.faults)
    by_name = dict(zip((k.name for k in rendered.kernels), compiled.fns))
    wrapper = _WrapperWriter(L, scheduled.steps, by_name, lowered.outputs, lowered.layouts).write()
    wrapper.requires = size_requirements(ctx, rendered.kernels, compiled.sources, L.requires)
    fn = wrapper.materialize(ctx.graph_name, ctx.core_options.runner)
    parts = ProgramParts(
        runner=_runner(fn, wrapper),
        python_launches=python_launches(fn, wrapper),
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


def size_requirements(
    ctx: CompileContext, kernels: list, sources: list[KernelSource], lowered: list = ()
) -> tuple[tuple[str, int], ...]:
    """The program's size requirements: its sources' ``requires``, each checked to be an
    expression over its kernel's size arguments (PluginFailure naming the kernel if not),
    and the lowering's own (``lowered``: :attr:`Lowerer.requires`)."""
    out: dict[int, list] = {}
    for expr, limit in lowered:
        out.setdefault(limit, []).append(expr)
    for k, src in zip(kernels, sources):
        if not src.requires:
            continue
        try:
            parsed = parse_requires(src.requires)
        except ValueError as exc:
            raise PluginFailure(f"sdk:{ctx.plugin}: kernel {src.name}: {exc}") from None
        names = {s.name for s in k.size_args}
        for text, (expr, limit) in zip((t for t, _ in src.requires), parsed):
            stray = sorted(s.name for s in expr.free_symbols if s.name not in names)
            if stray:
                raise PluginFailure(
                    f"sdk:{ctx.plugin}: kernel {src.name} requires {text!r} <= {limit}, but "
                    f"{stray} are not among its size arguments {sorted(names)}"
                )
            out.setdefault(limit, []).append(expr)
    # (one per limit of those that bound the others: the per-call check evaluates each)
    return tuple(
        (requirement_text(e), n) for n, exprs in out.items() for e in dominant_bounds(exprs)
    )


def announce_kernels(
    session: CompileSession,
    ctx: CompileContext,
    sources: list[KernelSource],
    faults: list[HookFault],
) -> None:
    """``sdk_on_kernel_compiled`` for each source (the observers' faults into ``faults``)."""
    for src in sources:
        observe(session.registry, ctx, faults, "sdk_on_kernel_compiled", source=src)

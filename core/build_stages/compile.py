"""The ``compile`` stage: the plugin's callables of the rendered sources
(``sdk_compile_kernels``)."""

from __future__ import annotations

import time
from collections.abc import Callable

from sdk.plugin import CompileContext, KernelSource

from ..registry import CannotCompile
from ..session import CompileSession
from .artifacts import Compiled, PluginFailure, Rendered


def run(session: CompileSession, ctx: CompileContext, rendered: Rendered) -> Compiled:
    start = time.perf_counter()
    fns = compile_sources(session, ctx, rendered.sources, building=True)
    return Compiled(rendered, rendered.sources, fns, time.perf_counter() - start)


def compile_sources(
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

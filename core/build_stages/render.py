"""The ``render`` stage: each kernel's source, from the plugin's ``sdk_render_kernel`` (the
IR checked first under ``debug``)."""

from __future__ import annotations

from sdk.ir.kernel import check_kernel
from sdk.plugin import CompileContext

from ..session import CompileSession
from .artifacts import PluginFailure, Rendered, Scheduled


def run(session: CompileSession, ctx: CompileContext, scheduled: Scheduled) -> Rendered:
    kernels = scheduled.kernels
    sources = []
    for k in kernels:
        if session.debug:
            check_kernel(k)
        src = session.hooks.sdk_render_kernel(ctx=ctx, kernel=k)
        if src is None:
            raise PluginFailure(
                f"sdk:{ctx.plugin} rendered nothing for kernel {k.name} "
                "(its sdk_render_kernel returned None)"
            )
        sources.append(src)
    return Rendered(scheduled, kernels, sources)

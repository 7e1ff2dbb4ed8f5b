"""The hooks that reach other plugins than the compile's own: ``sdk_wrap_compiled``, which
reaches the wrapper plugins the compile asked for, and the observers (``sdk_on_*``), which
reach every available plugin.

Part of the hook specification, :mod:`sdk.hookspecs`, which imports these hooks: pluggy reads
them there, and its doc says what an exception from a hook means.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sdk._hookspec import hookspec

if TYPE_CHECKING:
    from sdk.context import CompileContext
    from sdk.kernels import KernelSource
    from sdk.report import GraphReport


# ---------------------------------------------------------------------------
# Wrapping: the wrapper plugins the compile asked for
# ---------------------------------------------------------------------------


@hookspec(firstresult=True)
def sdk_wrap_compiled(ctx: CompileContext, compiled: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a compiled graph (for example to capture and replay it as a CUDA graph).

    Called once per compiled graph. The core answers innermost with
    ``compiled`` unchanged; implement it as ``@sdk.hookimpl(wrapper=True)``:
    ``inner = yield`` gives the (possibly already wrapped) callable, and what
    you return replaces it. The callable takes the graph's inputs (tensors
    and ints) as positional arguments and returns a tuple of outputs.
    Several wrappers apply in the order of ``options["wrappers"]``, the first innermost; one
    whose hook raises is left out (the fault is in the graph's report).

    :param ctx: the compile (``ctx.plugin`` is the codegen plugin that made ``compiled``;
        ``ctx.written_inputs``: the inputs ``compiled`` writes in place, which a wrapper
        that runs it on copies must copy back, and must not write more than once a call).
    :param compiled: the compiled graph as the core would run it.
    :return: the callable to run. Stops at first non-None result.
    :raises: an exception leaves the graph unwrapped (strict mode: :class:`sdk.PluginHookError`).

    API version: 1.
    """


# ---------------------------------------------------------------------------
# Observers: every available plugin
# ---------------------------------------------------------------------------


@hookspec
def sdk_on_graph_compiled(ctx: CompileContext, report: GraphReport) -> None:
    """A graph finished compiling (after its wrappers).

    :param ctx: the graph's compile (``ctx.plugin``: the codegen plugin of the compile).
    :param report: the graph's :class:`sdk.GraphReport` (``sdk.report.GraphReport``): its
        kernels, library calls, fallbacks and their reasons, as ``sdk.explain`` prints
        them. Read it; do not change it.
    :return: ignored. 1:N: every available plugin is told.
    :raises: a fault of this plugin's only (see :mod:`sdk.hookspecs`).

    API version: 1.
    """


@hookspec
def sdk_on_kernel_compiled(ctx: CompileContext, source: KernelSource) -> None:
    """A kernel was rendered and compiled.

    :param ctx: the graph's compile.
    :param source: what the codegen plugin's ``sdk_render_kernel`` returned for it.
    :return: ignored. 1:N: every available plugin is told.
    :raises: a fault of this plugin's only (see :mod:`sdk.hookspecs`).

    API version: 1.
    """


@hookspec
def sdk_on_fallback(ctx: CompileContext, op: str, reason: str) -> None:
    """An ATen op runs through the op-level fallback instead of a generated kernel.

    :param ctx: the graph's compile.
    :param op: the op's name, ``"aten.mul.Tensor"``.
    :param reason: why (the refusal, the missing lowering, the hook that failed).
    :return: ignored. 1:N: every available plugin is told.
    :raises: a fault of this plugin's only (see :mod:`sdk.hookspecs`).

    API version: 1.
    """

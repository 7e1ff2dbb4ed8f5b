"""Acme's torch-backend-sdk plugin: ``torch.compile(model, backend="sdk:acme")``.

A vendor plugin is a module of hook functions decorated with ``@sdk.hookimpl``,
named after the hooks of ``sdk/hookspecs.py``. It imports only the public
``sdk`` API (and torch).

This example renders no kernels yet (it has no ``sdk_render_kernel``), so it
refuses every op in ``sdk_op_support`` and the SDK runs each one through ATen,
exactly as eager mode would. A real plugin accepts the ops it can render and
implements ``sdk_render_kernel`` and ``sdk_compile_kernels``.
"""

from __future__ import annotations

from collections import Counter

import torch

import sdk

__version__ = "0.1.0"

#: The hook-API version this plugin was written against: a literal, so an SDK that
#: dropped or changed a hook refuses the plugin instead of calling it wrongly.
#: (``sdk.HOOK_API_VERSION`` is the installed SDK's version; using it here would
#: make the check always pass.)
HOOK_API = 1

#: ATen ops Acme's hardware cannot compute, and why; ``sdk.explain`` shows the reason.
REFUSED = {
    torch.ops.aten.sin.default: "Acme has no transcendental unit for sin",
}

#: What the observer hooks saw in this process: graph kinds compiled, ops that fell back.
graphs_compiled: Counter[str] = Counter()
fallbacks: Counter[str] = Counter()


@sdk.hookimpl
def sdk_plugin_info() -> sdk.PluginInfo:
    return sdk.PluginInfo(
        name="acme",
        version=__version__,
        hook_api=HOOK_API,
        device_types=("cpu",),
        kind=sdk.PluginKind.CODEGEN,
        capabilities=frozenset({sdk.Capability.REDUCTIONS}),
        options={
            "unroll": sdk.OptionSpec(1, "unroll factor of the innermost loop of each kernel", int),
        },
        description="Acme CPU accelerator (example vendor plugin)",
    )


@sdk.hookimpl
def sdk_plugin_status() -> str | None:
    return None  # runs wherever the CPU does


@sdk.hookimpl
def sdk_op_support(ctx: sdk.CompileContext, op, node) -> sdk.Support:
    reason = REFUSED.get(op)
    if reason is not None:
        return sdk.Support.no(f"{reason}; it runs through ATen")
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and val.dtype == torch.float64:
        return sdk.Support.no("Acme kernels compute in float32 at most")
    return sdk.Support.no("this example renders no kernels (no sdk_render_kernel yet)")


@sdk.hookimpl
def sdk_on_graph_compiled(ctx: sdk.CompileContext, report) -> None:
    if ctx.plugin == "acme":
        graphs_compiled[report.kind] += 1


@sdk.hookimpl
def sdk_on_fallback(ctx: sdk.CompileContext, op: str, reason: str) -> None:
    if ctx.plugin == "acme":
        fallbacks[op] += 1

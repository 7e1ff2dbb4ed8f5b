"""torch-backend-sdk: plug a compiler backend into ``torch.compile``.

The public API, and all a vendor imports::

    import sdk

    @sdk.hookimpl
    def sdk_plugin_info():
        return sdk.PluginInfo(name="acme", version="1.0", hook_api=1, device_types=("cpu",))

``hook_api`` is the hook-API version the plugin was written against, as a literal: the
SDK refuses a plugin written for a newer API than it has. ``sdk.HOOK_API_VERSION`` is the
installed SDK's version, and would make that check always pass (docs/vendor-guide.md, "Versioning").
The hooks and their contract are in :mod:`sdk.hookspecs`; the IR in :mod:`sdk.ir`
(``from sdk import ir``: ``import sdk`` alone does not import it).

Users compile with ``torch.compile(model, backend="sdk:<plugin>")``.
"""

from __future__ import annotations

from typing import Any

import pluggy

# (first: a clear error where the checkout is imported uninstalled, see sdk/_checkout.py)
from sdk import _checkout  # noqa: F401

# installs the core's side of sdk._seams, what the contract's own modules need of the core
# (before any of them runs; it imports no torch)
from sdk.core import seams as _core_seams  # noqa: F401

# next: registers TORCH_LOGS=sdk before anything here imports torch (which parses TORCH_LOGS)
from sdk.core.adapters import backend_names as _backend_names
from sdk.core.adapters import logs as _logs  # noqa: F401
from sdk.core.adapters import mega_cache as _mega_cache
from sdk.errors import (
    CacheDirWarning,
    LoweringError,
    OptionError,
    PluginFallbackWarning,
    PluginHookError,
    PluginHookWarning,
    PluginUnavailableError,
    SDKDeprecationWarning,
    SDKError,
    UnknownPluginError,
)
from sdk.explain import collect_reports, explain, reset
from sdk.hookspecs import PROJECT as _PROJECT
from sdk.options import option
from sdk.plugin import (
    HOOK_API_VERSION,
    Capability,
    ClaimGroups,
    CompileContext,
    CompiledSubgraph,
    CompileUnavailable,
    CoreOptions,
    GraphPass,
    KernelChoices,
    KernelFn,
    KernelLimits,
    KernelSource,
    KernelVariant,
    NativeEntry,
    OptionSpec,
    PluginInfo,
    PluginKind,
    PluginOptions,
    Preferences,
    Support,
)
from sdk.report import (
    CallCounts,
    ExplainReport,
    FallbackReport,
    GraphBreak,
    GraphReport,
    HookFault,
    KernelChoiceReport,
    KernelReport,
    OpPlacement,
    PartitionReport,
    PassReport,
)

__version__ = "0.6.0"


def _populate_programs(key: str, payload: bytes) -> None:
    from sdk.core.warm import populate

    populate(key, payload)


def _populate_libraries(key: str, payload: bytes) -> None:
    from sdk.toolchain import _populate

    _populate(key, payload)


# torch.compiler.load_cache_artifacts() must know the SDK's artifact types before it reads a
# blob that holds one: registered here, at import (core.warm records the programs,
# sdk.toolchain the libraries they load and the plugins' cache keys)
_mega_cache.register("sdk_programs", _populate_programs)
_mega_cache.register("sdk_libraries", _populate_libraries)

# torch.compile(backend="sdk:<name>") of a name no wheel declares (a typo, a plugin not
# installed) raises the SDK's error, naming the installed plugins, not Dynamo's
# InvalidBackend (when Dynamo is imported: import sdk does not import it)
_backend_names.install()

#: Marks a plugin's hook functions: ``@sdk.hookimpl`` (or ``@sdk.hookimpl(wrapper=True)``).
hookimpl = pluggy.HookimplMarker(_PROJECT)


def backend(name: str, **options: Any) -> Any:
    """The ``torch.compile`` backend of plugin ``name`` (also spelt ``"sdk:name"``).

    ``sdk.backend("cpu_cpp", fusion=False)`` is the same backend as
    ``torch.compile(..., backend="sdk:cpu_cpp", options={"fusion": False})``.
    Raises at once if the plugin is unknown or unavailable, or an option is.
    """
    from sdk.core.pipeline import Backend

    if name.startswith("sdk:"):
        name = name[4:]
    return Backend(name, options)


def list_plugins() -> list[dict[str, Any]]:
    """Every discovered plugin: name, version, distribution, devices, kind, status.

    status is "ok", "unavailable: <why and the fix>", "cached programs only: <why it cannot
    compile here and the fix>" (its status answered :class:`sdk.CompileUnavailable`: what
    the caches hold runs, the rest in ATen), or "faulty: <hooks that raised in this process>"
    for a usable plugin whose observers or wrapper raised (compiles went on without them;
    ``sdk.explain`` shows where).
    """
    from sdk.core.registry import registry

    reg = registry()
    rows = []
    for key, rec in reg.records.items():
        info = rec.info
        rows.append(
            {
                "name": rec.name,
                "version": info.version if info else rec.dist_version,
                "distribution": f"{rec.distribution} {rec.dist_version}",
                "devices": ",".join(info.device_types) if info else "?",
                "kind": info.kind.value if info else "?",
                "status": _status_text(
                    rec.name,
                    reg.status(key),
                    rec.faults,
                    reg.compile_status(key) if rec.loaded else None,
                ),
            }
        )
    return rows


def __getattr__(name: str) -> Any:
    # removed names that plugins written for an earlier hook API still import
    if name == "Verdict":
        from sdk.plugin import _removed_verdict

        return _removed_verdict()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _status_text(
    name: str, why: str | None, faults: dict[str, str], cannot_compile: str | None = None
) -> str:
    """ "ok", "unavailable: why", "cached programs only: why" or "faulty: ..." for a usable
    plugin whose hooks raised in this process (compiles go on without those hooks)."""
    if why is not None:
        return f"unavailable: {why}"
    if cannot_compile is not None:
        return f"cached programs only: {cannot_compile}"
    if not faults:
        return "ok"
    raised = "; ".join(f"{hook} raised {error}" for hook, error in faults.items())
    return f"faulty: {raised}; fix those hooks, or deny it with SDK_PLUGINS_DENY={name}"


__all__ = [
    "HOOK_API_VERSION",
    "CacheDirWarning",
    "CallCounts",
    "Capability",
    "ClaimGroups",
    "CompileContext",
    "CompileUnavailable",
    "CompiledSubgraph",
    "CoreOptions",
    "ExplainReport",
    "FallbackReport",
    "GraphBreak",
    "GraphPass",
    "GraphReport",
    "HookFault",
    "KernelChoiceReport",
    "KernelChoices",
    "KernelFn",
    "KernelLimits",
    "KernelReport",
    "KernelSource",
    "KernelVariant",
    "LoweringError",
    "NativeEntry",
    "OpPlacement",
    "OptionError",
    "OptionSpec",
    "PartitionReport",
    "PassReport",
    "PluginFallbackWarning",
    "PluginHookError",
    "PluginHookWarning",
    "PluginInfo",
    "PluginKind",
    "PluginOptions",
    "PluginUnavailableError",
    "Preferences",
    "SDKDeprecationWarning",
    "SDKError",
    "Support",
    "UnknownPluginError",
    "backend",
    "collect_reports",
    "explain",
    "hookimpl",
    "list_plugins",
    "option",
    "reset",
]

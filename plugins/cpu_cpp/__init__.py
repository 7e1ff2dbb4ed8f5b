"""The C++/OpenMP CPU plugin: renders loop-IR kernels to C++ and builds them with the system compiler."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sdk
import sdk.toolchain

__version__ = "0.1.0"


@dataclass(frozen=True)
class CppOptions:
    """cpu_cpp's own options (``torch.compile(..., options={"extra_flags": (...)})``):
    ``ctx.plugin_options`` is one of these."""

    #: added after the compiler flags cpu_cpp builds with (``toolchain.default_flags``);
    #: the whole-graph cache keys on them, as on every option
    extra_flags: tuple[str, ...] = sdk.option(
        (),
        "C++ compiler flags added after cpu_cpp's own (e.g. ('-fno-unroll-loops',))",
        examples=(("-fno-unroll-loops",),),
    )


@sdk.hookimpl
def sdk_plugin_info() -> sdk.PluginInfo:
    return sdk.PluginInfo(
        name="cpu_cpp",
        version=__version__,
        hook_api=6,
        device_types=("cpu",),
        kind=sdk.PluginKind.CODEGEN,
        capabilities=frozenset(
            {
                sdk.Capability.REDUCTIONS,
                sdk.Capability.MULTI_STAGE,
                sdk.Capability.STORE_THEN_LOAD,
                sdk.Capability.SYMBOLIC_SIZES,
            }
        ),
        description="C++ with OpenMP, built by the system C++ compiler",
        options=CppOptions,
    )


@sdk.hookimpl
def sdk_plugin_status() -> str | None:
    """Usable wherever its built kernels load (ctypes); without a compiler it runs what the
    caches hold (:class:`sdk.CompileUnavailable`), and sends the rest to ATen."""
    from . import toolchain

    try:
        sdk.toolchain.find_compiler(toolchain.LANGUAGE)
    except FileNotFoundError as e:
        return sdk.CompileUnavailable(str(e))
    return None


@sdk.hookimpl
def sdk_preferences() -> sdk.Preferences:
    # ATen's CPU index_put with accumulate adds in a thread-dependent order; index_add adds
    # in index order: the same bits in every run
    return sdk.Preferences(ordered_index_add=True)


@sdk.hookimpl
def sdk_cache_key(ctx: sdk.CompileContext) -> str | None:
    """The compiler, its identity (version, what -march=native means here) and flags, and
    this plugin's sources."""
    from . import toolchain

    return sdk.toolchain.cache_key(toolchain.LANGUAGE, toolchain.default_flags(), __name__)


@sdk.hookimpl
def sdk_render_kernel(ctx: sdk.CompileContext, kernel: Any) -> sdk.KernelSource:
    from . import render

    return render.render_kernel(kernel)


@sdk.hookimpl
def sdk_compile_kernels(
    ctx: sdk.CompileContext, sources: list[sdk.KernelSource]
) -> list[sdk.KernelFn]:
    """Build every kernel of the graph in one translation unit (one compiler run)."""
    import sdk.clike

    from . import render, toolchain

    unit = render.TARGET.unit(sources)
    # (a context built by hand, in a test, may hold no options of this plugin)
    extra = getattr(ctx.plugin_options, "extra_flags", ())
    if any(not isinstance(f, str) for f in extra):
        raise sdk.OptionError(
            f"option 'extra_flags' for sdk:cpu_cpp must hold strings, got {extra!r}"
        )
    flags = toolchain.default_flags() + tuple(extra)
    lib = toolchain.compile_and_load(
        unit, flags=flags, plugin_version=__version__, prelude=render.TARGET.prelude
    )
    return sdk.clike.launchers(lib, sources)

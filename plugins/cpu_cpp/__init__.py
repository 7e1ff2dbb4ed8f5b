"""The C++/OpenMP CPU plugin: renders loop-IR kernels to C++ and builds them with the system compiler."""

from __future__ import annotations

import shutil

import sdk

__version__ = "0.1.0"


@sdk.hookimpl
def sdk_plugin_info() -> sdk.PluginInfo:
    return sdk.PluginInfo(
        name="cpu_cpp",
        version=__version__,
        hook_api=1,
        device_types=("cpu",),
        kind=sdk.PluginKind.CODEGEN,
        capabilities=frozenset({
            sdk.Capability.FP64, sdk.Capability.BF16, sdk.Capability.REDUCTIONS,
            sdk.Capability.MULTI_STAGE, sdk.Capability.INDIRECT_LOADS, sdk.Capability.RANDOM,
        }),
        description="C++ with OpenMP, built by the system C++ compiler",
    )


@sdk.hookimpl
def sdk_plugin_status() -> str | None:
    import os

    cxx = os.environ.get("CXX")
    if cxx and shutil.which(cxx):
        return None
    if any(shutil.which(c) for c in ("g++", "c++", "clang++")):
        return None
    return "no C++ compiler found (looked for $CXX, g++, c++, clang++); install g++ or set CXX"

"""The native runner: built once per machine, then every compiled program's steps run in it.

``core/runner.cpp`` is compiled by the system C++ compiler (:mod:`sdk.toolchain`, with its
time limit and verified cache) against the installed torch's headers and libraries, into a
Python extension module kept in the per-user cache (``$SDK_RUNNER_DIR``, else the cache
root's ``runner/``), keyed by the source, the compiler and its flags, torch's version and the
SDK's. The first build prints one progress line; a machine where it cannot be built (no
compiler, no headers) gets one warning naming the cause, and every program runs through its
Python form. Never one build per graph.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import sys
import sysconfig
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from sdk import _config as config

from .steps import MAX_LAUNCH_ARGS, check

_MODULE_NAME = "_sdk_runner"
_lock = threading.Lock()
_state: dict[str, Any] = {}


def _call_c() -> str:
    """``call_c``: one direct call per arity (pointers and int64 sizes travel in the same
    registers on the 64-bit ABIs the toolchain builds for)."""
    lines = ["int64_t call_c(void* f, const I* a, size_t n, bool checked) {", "  switch (n) {"]
    for n in range(MAX_LAUNCH_ARGS + 1):
        params = ", ".join(["I"] * n)
        args = ", ".join(f"a[{i}]" for i in range(n))
        lines += [
            f"    case {n}:",
            f"      if (checked) return reinterpret_cast<int64_t (*)({params})>(f)({args});",
            f"      reinterpret_cast<void (*)({params})>(f)({args});",
            "      return 0;",
        ]
    lines += ["  }", '  throw std::invalid_argument("sdk runner: too many launch arguments");']
    return "\n".join(["namespace {", *lines, "}", "}  // namespace"])


def source() -> str:
    text = (Path(__file__).with_name("runner.cpp")).read_text()
    return text.replace("@CALL_C@", _call_c())


def _flags() -> tuple[str, ...]:
    from torch.utils import cpp_extension

    include = [f"-I{p}" for p in cpp_extension.include_paths()]
    include.append(f"-I{sysconfig.get_paths()['include']}")
    lib = cpp_extension.library_paths()[0]
    abi = int(torch.compiled_with_cxx11_abi())
    return (
        "-O2",
        "-std=c++20",
        "-shared",
        "-fPIC",
        "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
        f"-DSDK_RUNNER_MODULE={_MODULE_NAME}",
        *include,
        f"-L{lib}",
        f"-Wl,-rpath,{lib}",
        "-lc10",
        "-ltorch",
        "-ltorch_cpu",
        "-ltorch_python",
    )


def module() -> ModuleType | None:
    """The runner's module, built or loaded once per process; None (after one warning)
    where it cannot be built."""
    with _lock:
        if "module" in _state:
            return _state["module"]
        _state["module"] = None
        try:
            _state["module"] = _load()
        except Exception as exc:  # noqa: BLE001 - any failure: one warning, the Python path
            _state["why"] = f"{type(exc).__name__}: {exc}"
            warnings.warn(
                "sdk: the native runner could not be built, so compiled graphs run through "
                f"their Python programs (slower per call): {str(exc).splitlines()[0][:300]}. "
                "Fix: install a C++ compiler (g++ or clang++; or set CXX) and a torch with "
                "its C++ headers (torch/include), or pass options={'runner': 'python'} to "
                "silence this.",
                RuntimeWarning,
                stacklevel=3,
            )
        return _state["module"]


def why_not() -> str | None:
    """Why the runner is not available in this process (None: it is, or not tried yet)."""
    return _state.get("why")


def _load() -> ModuleType:
    """Build (or find the verified build of) the runner, and import it. Called once per
    process, by :func:`module`."""
    import sdk
    from sdk import toolchain

    text = source()
    key = ("sdk-runner", torch.__version__, sdk.__version__, sys.version_info[:2])
    build = dict(language="c++", flags=_flags(), namespace="runner", key=key)
    with _runner_cache():
        if not toolchain.is_built(text, **build):
            print(
                "sdk: building the native runner (once per machine and torch version; "
                "about a minute)...",
                file=sys.stderr,
                flush=True,
            )
        path = toolchain.compile_library(text, **build)
    loader = importlib.machinery.ExtensionFileLoader(_MODULE_NAME, str(path))
    spec = importlib.util.spec_from_loader(_MODULE_NAME, loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _runner_cache() -> contextlib.AbstractContextManager[None]:
    """The cache the runner is built in: ``$SDK_RUNNER_DIR`` where set, else the SDK's."""
    runner_dir = config.variable("SDK_RUNNER_DIR")
    return config.overridden(SDK_CACHE_DIR=runner_dir) if runner_dir else contextlib.nullcontext()


def program(steps: list[tuple], n_slots: int, mark_writes: Callable[[], None]) -> Any | None:
    """The runner's program for ``steps`` (checked first), or None without a runner."""
    mod = module()
    if mod is None:
        return None
    check(steps, n_slots)
    return mod.Program(steps, n_slots, mark_writes)

"""Kernels compiled in the SDK's compile workers (``sdk.workers``), for the caller's GPU.

Triton's front end and much of its pass pipeline hold the GIL, so the thread pool of
:func:`.launch._precompile` runs them mostly one at a time. Before it, the kernels go to the
compile workers, one process per CPU. A worker cannot use CUDA (``sdk.workers``), and Triton's
JIT asks its active driver for the current device, stream and target: in a worker that
driver is :class:`_Target`, which answers the caller's target and never touches a GPU. The
kernel then compiles exactly as the caller's own warm-up would (the same source, function,
argument dtypes, constexprs and options; the caller's ``TRITON_*`` variables, Triton's cache
directory among them) and lands in Triton's cache under the key the caller computes. The
caller's warm-up then finds it there, and every kernel still goes through that warm-up: a
worker that fails or is slow costs time, never a result.
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

_log = logging.getLogger(__name__)

#: the environment variables a worker takes from the caller at each compile: Triton's
#: (its cache directory and every variable its cache key reads) and the SDK cache, where
#: :func:`.launch.load_module` writes kernel sources
ENV_PREFIXES = ("TRITON_", "SDK_CACHE_DIR")


class Spec(NamedTuple):
    """One kernel to compile: what ``JITFunction.warmup`` is given, and the target."""

    source: str  # the kernel module's source (``.launch.load_module``)
    fn: str  # the ``@triton.jit`` function's name in it
    dtypes: tuple[str, ...]  # per argument: the torch dtype's name (a pointer's element)
    grid: tuple[int, int, int]
    kwargs: dict[str, Any]  # constexprs and options (num_warps, num_stages, debug, ...)
    target: Any  # the caller's ``triton.backends.compiler.GPUTarget``


class _Target:
    """A worker's Triton driver: the caller's target, device 0, the null stream; what
    ``JITFunction`` asks of a driver to compile (not to launch)."""

    def __init__(self, target: Any) -> None:
        self.target = target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_current_target(self) -> Any:
        return self.target


def compile_in_worker(spec: Spec) -> str:
    """Compile ``spec`` into Triton's cache (in a compile worker); Triton's hash of it."""
    import torch
    from triton.runtime.driver import driver

    from .launch import load_module

    driver.set_active(_Target(spec.target))
    fn = getattr(load_module(spec.source), spec.fn)
    dtypes = [getattr(torch, name) for name in spec.dtypes]
    return fn.warmup(*dtypes, grid=spec.grid, **spec.kwargs).hash


#: kernels compiled in the compile workers by this process, and those a worker failed
#: (:func:`compile_in_workers`; tests read it)
WORKER_COMPILES = {"compiled": 0, "failed": 0}

#: seconds :func:`compile_in_workers` waits for the workers before compiling the rest itself
WORKER_TIMEOUT = 300.0


def compile_in_workers(specs: list[tuple[str, str, tuple[str, ...], Any, dict[str, Any]]]) -> None:
    """Compile ``specs`` (source, function, argument dtypes, grid, constexprs and options)
    into Triton's cache in the SDK's compile workers, where they are ready;
    :func:`.launch._precompile` then finds them there. Nothing where there are no workers,
    or a single kernel to compile."""
    from sdk.workers import compile_workers

    workers = compile_workers()
    if len(specs) < 2 or not workers.ready:
        return
    from triton.runtime.driver import driver

    target = driver.active.get_current_target()
    unique = list({repr(s): s for s in specs}.values())
    done = workers.map(
        compile_in_worker,
        [Spec(*s, target) for s in unique],
        env_prefixes=ENV_PREFIXES,
        timeout=WORKER_TIMEOUT,
    )
    for spec, outcome in zip(unique, done or ()):
        if isinstance(outcome, BaseException):
            WORKER_COMPILES["failed"] += 1
            _log.info("compile worker: %s failed, compiled here: %s", spec[1], outcome)
        else:
            WORKER_COMPILES["compiled"] += 1

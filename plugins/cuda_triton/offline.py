"""Kernels compiled in the SDK's compile workers (``sdk.workers``), for the caller's GPU.

Triton's front end and much of its pass pipeline hold the GIL, so the thread pool of
:func:`.launch._precompile` runs them mostly one at a time. Before it, the kernels go to the
compile workers, one process per CPU. A worker cannot use CUDA (``sdk.workers``), and Triton's
JIT asks its active driver for the current device, stream and target: in a worker that
driver is :class:`_Target`, which answers the caller's target and never touches a GPU. The
kernel then compiles exactly as the caller's own warm-up would (the same source, function,
argument dtypes, constexprs and options; the caller's ``TRITON_*`` variables, Triton's cache
directory among them) and lands in Triton's cache under the key the caller computes.

Each worker answers its kernel's record (:class:`.records.KernelRecord`: the cubin and its
launch metadata, with the pointers 16-byte aligned as the guards require), and the caller
launches the kernel from that record, as a warm process does
(:func:`.launch.compile_sources`): no Triton warm-up, module load or launcher build on the
caller's side. A kernel with no record (one the shim does not launch, a worker that failed
or was slow) goes through the caller's own warm-up, which finds it in Triton's cache when a
worker compiled it: a worker costs time, never a result.
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


class Compiled(NamedTuple):
    """A worker's answer: Triton's hash of the kernel and its record's bytes (None where the
    shim does not launch it, :func:`.records.from_compiled`)."""

    hash: str
    record: bytes | None


def compile_in_worker(spec: Spec) -> Compiled:
    """Compile ``spec`` into Triton's cache (in a compile worker); its hash and record."""
    import torch
    from triton.runtime.driver import driver

    from . import records
    from .launch import load_module

    driver.set_active(_Target(spec.target))
    fn = getattr(load_module(spec.source), spec.fn)
    dtypes = [getattr(torch, name) for name in spec.dtypes]
    compiled = fn.warmup(*dtypes, grid=spec.grid, **spec.kwargs)
    # every pointer aligned: what the caller's warm-up assumes, and the guards require
    rec = records.from_compiled(compiled, spec.grid, (True,) * len(dtypes))
    return Compiled(str(compiled.hash), None if rec is None else rec.to_bytes())


#: kernels compiled in the compile workers by this process, how many of them came back with
#: a record the caller launches, and those a worker failed (:func:`compile_in_workers`;
#: tests read it)
WORKER_COMPILES = {"compiled": 0, "records": 0, "failed": 0}

#: a kernel as a launcher hands it over (``fn.offline``): source, function, argument dtypes,
#: grid, constexprs and options, and the key its record is stored under
Offline = tuple[str, str, tuple[str, ...], tuple[int, int, int], dict[str, Any], str]

#: seconds :func:`compile_in_workers` waits for the workers before compiling the rest itself
WORKER_TIMEOUT = 300.0


def compile_in_workers(kernels: list[Offline]) -> dict[str, Any]:
    """Compile ``kernels`` in the SDK's compile workers, where they are ready, into Triton's
    cache; each kernel's record that came back, usable on the current device, by its record
    key (and stored under it). Nothing where there are no workers, or a single kernel to
    compile: the caller's warm-up (:func:`.launch._precompile`) compiles those."""
    from sdk.workers import compile_workers

    workers = compile_workers()
    unique = list({k[5]: k for k in kernels}.values())
    if len(unique) < 2 or not workers.ready:
        return {}
    import torch
    from triton.runtime.driver import driver

    from . import records

    target = driver.active.get_current_target()
    major, minor = torch.cuda.get_device_capability()
    done = workers.map(
        compile_in_worker,
        [Spec(*k[:5], target) for k in unique],
        env_prefixes=ENV_PREFIXES,
        timeout=WORKER_TIMEOUT,
    )
    made: dict[str, Any] = {}
    for kernel, outcome in zip(unique, done or ()):
        if isinstance(outcome, BaseException):
            WORKER_COMPILES["failed"] += 1
            _log.info("compile worker: %s failed, compiled here: %s", kernel[1], outcome)
            continue
        WORKER_COMPILES["compiled"] += 1
        rec = records.usable(outcome.record, major * 10 + minor)
        if rec is not None:
            WORKER_COMPILES["records"] += 1
            records.save(kernel[5], rec)
            made[kernel[5]] = rec
    return made

"""Compile workers: processes beside this one that compile a plugin's kernels in parallel.

Threads do not make a kernel compiler parallel where it holds the GIL, as Triton's front end
and much of its pass pipeline do. Measured on one H200 (BENCHMARKS.md, "Parallel kernel
compiles"): the 245 kernels of a ResNet-50 training step compile in 25.5 s one after another
and in 8.8 s on 16 threads. The workers here are torch's own, the ones Inductor compiles in:
a sidecar process (``torch/_inductor/compile_worker``, never a second run of the user's
``__main__``, as ``multiprocessing``'s spawn would be) that forks them. There is one pool
per process, shared by every plugin, started by the first :meth:`CompileWorkers.start`.

A job is a module-level function, which a worker imports by its module and name, applied to
one picklable item; what it returns comes back pickled. Workers cannot use the GPU (they are
forked from a process that has initialized CUDA, as Inductor's are): a job compiles for a
target it is given, typically into its compiler's disk cache, where the caller's own compile
then finds it. The caller still compiles every kernel itself: a worker that fails, is slow or
is gone costs time, never a result. The environment variables with the prefixes a ``map``
names are the caller's, at that ``map``, in every worker.

``SDK_COMPILE_WORKERS``: how many workers: a number (0 or 1: none, and :meth:`CompileWorkers.map`
answers None), or ``auto``, the default: the CPUs this process may run on, at most 32, as
Inductor's ``compile_threads``. On an H200 they took a ResNet-50 training step's cold compile
from 27.2 s to 21.3 s (BENCHMARKS.md, "Parallel kernel compiles").

    from sdk.workers import compile_workers

    workers = compile_workers()
    workers.start()  # early: the workers start while the graph is traced
    ...
    done = workers.map(my_plugin.jobs.compile_one, specs, env_prefixes=("ACME_",), timeout=60)
    if done is None:
        ...  # no workers: compile in this process
"""

from __future__ import annotations

import atexit
import concurrent.futures
import functools
import logging
import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from sdk import _config, _seams

_log = logging.getLogger(__name__)

#: the most workers started by default (Inductor's ``compile_threads`` cap)
MAX_DEFAULT_WORKERS = 32


def default_workers() -> int:
    """The CPUs this process may run on (its affinity), at most :data:`MAX_DEFAULT_WORKERS`."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return min(MAX_DEFAULT_WORKERS, cpus)


def _in_worker(env_prefixes: tuple[str, ...], env: dict[str, str], fn: Callable, item: Any) -> Any:
    """What a worker runs for one item: the caller's variables of ``env_prefixes``, then
    ``fn(item)``."""
    _config.replace_variables(env_prefixes, env)
    return fn(item)


class CompileWorkers:
    """The process's compile workers (:func:`compile_workers`; see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: Any = None
        self._ping: concurrent.futures.Future | None = None
        self._why_not: str | None = None

    @property
    def workers(self) -> int:
        """How many workers :meth:`start` starts (0: none), as ``SDK_COMPILE_WORKERS`` says
        now (unset: ``auto``)."""
        n = _config.compile_workers(default_workers())
        return n if n > 1 else 0

    def start(self) -> None:
        """Start the workers, without waiting for them (they take seconds to start: call
        this early). Does nothing when started, or when ``SDK_COMPILE_WORKERS`` asks for none.
        A pool that cannot start is logged once, and :meth:`map` answers None."""
        with self._lock:
            if self._pool is not None or self._why_not is not None:
                return
            try:
                n = self.workers
            except ValueError as exc:  # SDK_COMPILE_WORKERS is neither a number nor auto
                self._why_not = str(exc)
                warnings.warn(f"sdk: no compile workers: {exc}", RuntimeWarning, stacklevel=2)
                return
            if not n:
                return
            try:
                self._pool = _seams.private_torch().compile_worker_pool(n)
                self._ping = self._pool.submit(os.getpid)
            except Exception as exc:  # noqa: BLE001 - no workers: callers compile themselves
                self._why_not = f"{type(exc).__name__}: {exc}"
                _log.warning("sdk: compile workers did not start (%s)", self._why_not)
                return
            atexit.register(self.shutdown)

    @property
    def ready(self) -> bool:
        """Started, and a worker has answered."""
        ping = self._ping
        return (
            ping is not None
            and ping.done()
            and ping.exception() is None
            and getattr(self._pool, "running", True)
        )

    def _asked(self) -> bool:
        try:
            return self.workers > 0
        except ValueError:  # (start() warned of it)
            return False

    def why_not(self) -> str | None:
        """Why there are no workers (None: started, or not asked to start yet)."""
        if self._why_not is None and not self._asked():
            return "SDK_COMPILE_WORKERS asks for none (set it to a number of workers, or auto)"
        return self._why_not

    def map(
        self,
        fn: Callable[[Any], Any],
        items: Sequence[Any],
        *,
        env_prefixes: tuple[str, ...] = (),
        timeout: float | None = None,
    ) -> list[Any] | None:
        """``fn(item)`` for every item in the workers, in order: each entry is what ``fn``
        returned, or the exception that stopped it (``TimeoutError`` where ``timeout``
        seconds passed first, for all the items together). None when no worker is
        :attr:`ready`, or ``SDK_COMPILE_WORKERS`` now asks for none: compile in this
        process."""
        if not self.ready or not self._asked():
            return None
        if not items:
            return []
        env = _config.variables_with(env_prefixes) if env_prefixes else {}
        job = functools.partial(_in_worker, env_prefixes, env, fn)
        try:
            futures = [self._pool.submit(job, item) for item in items]
        except Exception as exc:  # noqa: BLE001 - the pool closed: compile in this process
            _log.info("compile workers refused a job: %s", exc)
            return None
        done, _ = concurrent.futures.wait(futures, timeout=timeout)
        return [_outcome(f) if f in done else TimeoutError(timeout) for f in futures]

    def shutdown(self) -> None:
        """Stop the workers (at exit, or to give their memory back); :meth:`start` starts
        new ones."""
        with self._lock:
            pool, self._pool, self._ping = self._pool, None, None
        if pool is not None:
            try:
                pool.shutdown()
            except Exception as exc:  # noqa: BLE001 - at exit: nothing left to do about it
                _log.info("compile workers did not shut down cleanly: %s", exc)


def _outcome(future: concurrent.futures.Future) -> Any:
    exc = future.exception()
    return exc if exc is not None else future.result()


@functools.cache
def compile_workers() -> CompileWorkers:
    """This process's compile workers (one pool, shared by every plugin)."""
    return CompileWorkers()

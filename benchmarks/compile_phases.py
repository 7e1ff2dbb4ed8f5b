"""Where a cold compile's time goes: the sdk's phases beside Inductor's total, per row.

    python benchmarks/compile_phases.py qwen2_train_bf16,resnet18_fp32 [--size small]
    python benchmarks/compile_phases.py resnet50_train_bf16 --options channels_last=False
    python benchmarks/compile_phases.py resnet50_train_bf16 --also-env TRITON_DEFAULT_FP_FUSION=0
    python benchmarks/compile_phases.py resnet50_train_bf16 --also-env SDK_COMPILE_WORKERS=0

For each model-suite row (``python -m sdk bench --suite models --list``): a cold first step
with Inductor, then a cold first step with the sdk (``sdk:cuda_triton`` on a GPU, else
``sdk:cpu_cpp``), each after a Dynamo reset with fresh cache directories and Inductor's
FX-graph and AOTAutograd caches off (as ``sdk bench`` measures cold compile). The sdk's
step is split by wall time spent in its phases:

* lower: ATen graph -> loop IR (``Lowerer.run``);
* schedule: fusion (``Scheduler.run``);
* render: kernels -> source (the plugin's renderer);
* build: the plugin's ``compile_sources``/``compile_library`` (Triton or the C++ compiler;
  for Triton this includes the parallel precompile of every kernel);
* program: ``build_program`` in all (the four above, kernel IR building, memory plan,
  wrapper);
* the rest of the step: Dynamo, AOTAutograd, decompositions, the first run.

The native runner is built (or loaded from its cache) before the rows: it is built once per
machine and torch version, not per compile. Then, as ``sdk bench`` does, each backend compiles
a trivial function, so that the first row's Inductor step does not pay the process's first
imports, CUDA libraries and Inductor's worker pool. (Until 2026-12-01 this script did not, and
its sdk/Inductor ratios read lower than the models suite's: resnet50 training 0.54 here against
0.82 in the suite, on one H200 in two calls of one session.)

``--cprofile DIR`` runs each sdk step under cProfile (its times then grow; the compile's
threads are not seen) and writes its top functions to ``DIR/<row>.prof.txt``. Each sdk line
says when in the step the compile workers first answered: kernels rendered before that
compile in this process's threads.
"""

from __future__ import annotations

import argparse
import collections
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from sdk.core import lowering, native, program, scheduler
from sdk.core.adapters import torch_private
from sdk.tools import bench, bench_timing
from sdk.tools import bench_models as bm

spent: collections.Counter[str] = collections.Counter()


def _timed(owner: Any, attr: str, label: str) -> None:
    fn: Callable[..., Any] = getattr(owner, attr)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[label] += time.perf_counter() - t0

    setattr(owner, attr, wrapper)


def _instrument(plugin: str) -> None:
    _timed(program, "build_program", "program")
    _timed(lowering.Lowerer, "run", "lower")
    _timed(scheduler.Scheduler, "run", "schedule")
    if plugin == "cuda_triton":
        from sdk.plugins.cuda_triton import launch, render

        _timed(render, "render", "render")
        _timed(launch, "compile_sources", "build")
    else:
        from sdk.plugins.cpu_cpp import render, toolchain

        _timed(render, "render_kernel", "render")
        _timed(toolchain, "compile_library", "build")


#: seconds into the last sdk step at which its compile workers first answered (None: never)
workers_ready: list[float | None] = [None]


def _watch_workers(t0: float, stop: threading.Event) -> None:
    from sdk.workers import compile_workers

    workers_ready[0] = None
    while not stop.wait(0.05):
        if compile_workers().ready:
            workers_ready[0] = time.perf_counter() - t0
            return


def _in_workers(plugin: str) -> str:
    """How many kernels cuda_triton compiled in the compile workers since the last call,
    and when in the step the workers were ready."""
    if plugin != "cuda_triton":
        return ""
    from sdk.plugins.cuda_triton import offline

    done = dict(offline.WORKER_COMPILES)
    offline.WORKER_COMPILES.update(compiled=0, records=0, failed=0)
    ready = workers_ready[0]
    when = "never" if ready is None else f"{ready:.1f} s into the step"
    return (
        f"; in compile workers {done['compiled']} kernels ({done['records']} launched from "
        f"their records, {done['failed']} failed), workers ready {when}"
    )


def _cold(
    case: bench.Case, backend: Any, dev: torch.device, profile_to: str | None = None
) -> float:
    """One cold step's wall seconds; with ``profile_to``, under cProfile, its top functions
    (by own and by cumulative time) written to that file."""
    torch_private.reset_dynamo()
    bench._fresh_cache_dirs()
    if torch.cuda.is_available():
        # cuda_triton keeps each kernel module it imported, with Triton's compiled kernels in
        # memory: a second sdk step of a row (--options, --also-env) would find the kernels
        # it shares with the first already compiled
        from sdk.plugins.cuda_triton import launch

        launch._MODULES.clear()
    f = torch.compile(case.target, backend=backend)
    stop = threading.Event()
    threading.Thread(target=_watch_workers, args=(time.perf_counter(), stop), daemon=True).start()
    try:
        return _step(case, f, dev, profile_to)
    finally:
        stop.set()


def _step(case: bench.Case, f: Any, dev: torch.device, profile_to: str | None) -> float:
    if profile_to is None:
        secs, _ = bench._Clock(dev.type == "cuda", 0).wall(lambda: case.step(f))
        return secs
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    secs, _ = bench._Clock(dev.type == "cuda", 0).wall(lambda: prof.runcall(case.step, f))
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(40)
    with open(profile_to, "w") as fh:
        fh.write(out.getvalue())
    return secs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--size", default=None, help="full (GPU default) or small (CPU default)")
    ap.add_argument(
        "--options",
        default=None,
        metavar="K=V,...",
        help="also a cold sdk step with these options (Python literals), e.g. channels_last=False",
    )
    ap.add_argument(
        "--also-env",
        default=None,
        metavar="K=V",
        help="also a cold sdk step with this environment variable set, e.g. TRITON_DEFAULT_FP_FUSION=0",
    )
    ap.add_argument(
        "--cprofile",
        default=None,
        metavar="DIR",
        help="profile each sdk step (cProfile: its times grow) into DIR/<row>.prof.txt",
    )
    args = ap.parse_args()
    import ast
    import os
    from unittest import mock

    options = {}
    for item in (args.options or "").split(","):
        if item:
            k, _, v = item.partition("=")
            options[k.strip()] = ast.literal_eval(v.strip())
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    plugin = "cuda_triton" if cuda else "cpu_cpp"
    size = args.size or ("full" if cuda else "small")
    torch_private.configure_for_benchmark()
    # the native runner is built once per machine and torch version, not per compile: built
    # (or loaded) here, before the rows, or the first row's build_program would hold it
    t0 = time.perf_counter()
    native.module()
    print(
        f"the native runner, built or loaded once (not in the rows): {time.perf_counter() - t0:.1f} s"
    )
    # as `sdk bench` does: a trivial compile with each backend first, so that the first
    # row's Inductor step is not charged with imports and worker pools that the sdk's
    # step then finds ready
    print(f"prewarm (not in the rows): {bench_timing._prewarm(dev, f'sdk:{plugin}'):.1f} s")
    _instrument(plugin)
    table = bm.rows()
    try:
        for name in args.rows.split(","):
            model, dtype = table[name]
            case = model.build(dev, dtype, size)
            ind = _cold(case, "inductor", dev)
            runs = [("sdk", f"sdk:{plugin}", None)]
            if options:
                import sdk

                runs.append((f"sdk {args.options}", sdk.backend(plugin, **options), None))
            if args.also_env:
                runs.append((f"sdk {args.also_env}", f"sdk:{plugin}", args.also_env))
            for i, (label, backend, env) in enumerate(runs):
                spent.clear()
                key, _, value = (env or "").partition("=")
                with mock.patch.dict(os.environ, {key: value} if env else {}):
                    tag = f"_{i}" if i else ""
                    where = args.cprofile and os.path.join(args.cprofile, f"{name}{tag}.prof.txt")
                    sdk_s = _cold(case, backend, dev, where or None)
                parts = ", ".join(
                    f"{k} {spent[k]:.2f}"
                    for k in ("lower", "schedule", "render", "build", "program")
                )
                print(
                    f"{name:26s} inductor {ind:6.2f} s | {label} {sdk_s:6.2f} s: {parts}, "
                    f"rest {sdk_s - spent['program']:.2f}{_in_workers(plugin)}",
                    flush=True,
                )
            del case
    finally:
        bench._remove_temp_dirs()


if __name__ == "__main__":
    main()

"""Cold compile with measured kernel choices (core/tune.py) against without, per model row.

    python benchmarks/tune_cold.py gpt2_train_bf16,resnet50_train_bf16 [--size full]

For each model-suite row and each setting: ``tune_budget_s=0`` (nothing measured: the
compile as before measured choices), the default (the automatic budget) and
``autotune=True``: a cold first step in fresh cache directories (its wall time, and the time
spent measuring: ``tune.choose``), the kernels measured, then the same compile again in the
same directories after a Dynamo reset (a whole-graph cache hit: checked to measure nothing),
and the median wall time of 20 synchronized steps. The issue-40 bound: a default cold compile
within 1.2x of the ``tune_budget_s=0`` one.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

import sdk
from sdk.core import pipeline, tune
from sdk.core.adapters import torch_private
from sdk.tools import bench
from sdk.tools import bench_models as bm

measuring = [0.0, 0]  # seconds in tune.choose, its calls
_real_choose = tune.choose


def _choose(*args: Any, **kwargs: Any) -> Any:
    t0 = time.perf_counter()
    try:
        return _real_choose(*args, **kwargs)
    finally:
        measuring[0] += time.perf_counter() - t0
        measuring[1] += 1


tune.choose = _choose  # (core/program.py calls it through the module)


def _compile(case: bench.Case, options: dict[str, Any], dev: torch.device) -> tuple[float, Any]:
    torch_private.reset_dynamo()
    reports: list[Any] = []
    token = pipeline.collect_reports(reports)
    plugin = "cuda_triton" if dev.type == "cuda" else "cpu_cpp"  # (cpu_cpp offers no choices)
    f = torch.compile(case.target, backend=sdk.backend(plugin, **options))
    try:
        secs, _ = bench._Clock(dev.type == "cuda", 0).wall(lambda: case.step(f))
    finally:
        pipeline.stop_collecting(token)
    return secs, (f, reports)


def _steps(case: bench.Case, f: Any, dev: torch.device, n: int = 20) -> float:
    clock = bench._Clock(dev.type == "cuda", 0)
    for _ in range(3):
        case.step(f)
    return statistics.median(clock.wall(lambda: case.step(f))[0] for _ in range(n))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--size", default=None, help="full (GPU default) or small (CPU default)")
    ap.add_argument("--settings", default="off,default,autotune")
    ap.add_argument(
        "--share",
        type=float,
        default=None,
        help="the automatic budget's share of the compile (core.tune.AUTO_SHARE) for the "
        "'default' setting: how a default not yet turned on would cost",
    )
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    size = args.size or ("full" if dev.type == "cuda" else "small")
    torch_private.configure_for_benchmark()
    settings = {
        "off": {"tune_budget_s": 0},
        "default": {},
        "autotune": {"autotune": True},
    }
    if args.share is not None:
        tune.AUTO_SHARE = args.share
    table = bm.rows()
    try:
        for name in args.rows.split(","):
            model, dtype = table[name]
            case = model.build(dev, dtype, size)
            cold_off = None
            for label in args.settings.split(","):
                opts = settings[label]
                bench._fresh_cache_dirs()
                measuring[:] = [0.0, 0]
                cold, (f, reports) = _compile(case, opts, dev)
                spent = measuring[0]
                kernels = sum(len(g.kernels) for g in reports)
                measured = sum(len(g.choices) for g in reports)
                changed = sum(1 for g in reports for c in g.choices if c.chosen != c.times[0][0])
                step = _steps(case, f, dev)
                measuring[:] = [0.0, 0]
                warm, (_f, again) = _compile(case, opts, dev)
                hits = {g.cache for g in again}
                if cold_off is None and label == "off":
                    cold_off = cold
                ratio = f" ({cold / cold_off:.2f}x off)" if cold_off else ""
                print(
                    f"{name:24s} {label:8s} cold {cold:6.2f}s{ratio}, measuring {spent:5.2f}s, "
                    f"{measured}/{kernels} kernels measured, {changed} changed | "
                    f"second compile {warm:5.2f}s (cache {sorted(hits)}, measuring "
                    f"{measuring[0]:.3f}s) | step {step * 1e3:7.2f} ms",
                    flush=True,
                )
                for g in reports:
                    if g.tuning:
                        print(f"    {g.name}: {g.tuning}")
                        for c in g.choices[:4]:
                            print(f"      {c}")
                del f, reports, _f, again
            del case
    finally:
        bench._remove_temp_dirs()


if __name__ == "__main__":
    main()

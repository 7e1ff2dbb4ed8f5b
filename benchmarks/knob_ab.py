"""A plugin heuristic at two values, in one process: a models-suite row compiled by the sdk
with its default and with another value (cuda_triton on a GPU, else cpu_cpp at the suite's
small size), both timed in interleaved rounds beside eager,
then one profiled step of each (launches and device ms per kernel class).

    python benchmarks/knob_ab.py ROWS MODULE:NAME VALUE [--json FILE]

e.g. whether BatchNorm's short column reductions should split (more launches, less device
time) on a host-bound training step:

    python benchmarks/knob_ab.py mobilenet_v3_large_train_bf16,resnet50_train_bf16 \\
        sdk.plugins.cuda_triton.heuristics:SPLIT_MIN_INNER_CHAIN_COLUMNS 8192

The knob is set while the second compile runs (its cold call and warm-up compile every
graph, the backward's included) and restored after; each compile starts from empty cache
directories, so the second cannot load the first's kernels. The launches per step tell
whether the knob changed the program at all. Compare only within a row.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
from typing import Any


def _row(name: str, mod: Any, attr: str, value: Any) -> dict[str, Any]:
    import torch

    import sdk
    from sdk.tools import bench_models, bench_timing
    from sdk.tools.bench_launches import cuda_launches

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    clock = bench_timing._Clock(cuda, 0)
    backend = sdk.backend("cuda_triton" if cuda else "cpu_cpp")
    model, dtype = bench_models.rows()[name]
    case = model.build(dev, dtype, "full" if cuda else "small")
    print(f"[{name}] {case.desc}", flush=True)
    eager, ref, eager_step = bench_timing._prepare(name, case, clock, None, None, None)
    fp64 = case.fp64_outputs() if case.fp64_outputs is not None else None
    results: dict[str, Any] = {"eager": eager}
    steps = [(eager, eager_step)]
    default = getattr(mod, attr)
    for label, v in (("default", default), ("knob", value)):
        setattr(mod, attr, v)
        try:
            res, _, step = bench_timing._prepare(
                name,
                case,
                clock,
                lambda t: torch.compile(t, backend=backend),
                ref,
                fp64,
                [],
                reset=False,
            )
        finally:
            setattr(mod, attr, default)
        print(f"  {label} ({attr}={v}): cold {res.cold_s} s, {res.check} {res.error}", flush=True)
        results[label] = res
        if step is not None:
            steps.append((res, step))
    bench_timing._time_interleaved(name, case, clock, steps, cuda_launches if cuda else None)
    out: dict[str, Any] = {"row": name, "knob": f"{mod.__name__}:{attr}", "value": value}
    for label, res in results.items():
        prof = res.profile or {}
        out[label] = {
            "median_ms": res.ms,
            "round_ms": res.round_ms,
            "cold_s": res.cold_s,
            "check": res.check,
            "launches": prof.get("launches"),
            "device_ms": prof.get("device_ms"),
            "by_class": prof.get("by_class"),
        }
        print(
            f"  {label:8s} {res.ms and round(res.ms, 3)} ms (rounds {res.round_ms}), "
            f"launches {prof.get('launches')}, device {prof.get('device_ms')} ms",
            flush=True,
        )
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    rows, target, raw = argv[0].split(","), argv[1], argv[2]
    path = argv[argv.index("--json") + 1] if "--json" in argv else None
    module, attr = target.split(":")
    import sdk.cache

    sdk.cache.cold_compiles()
    mod = importlib.import_module(module)
    value = ast.literal_eval(raw)
    done = []
    for name in rows:
        done.append(_row(name, mod, attr, value))
        if path:
            with open(path, "w") as f:
                json.dump(done, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

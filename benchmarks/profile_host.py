"""GPU: where a compiled step's host time goes, Inductor beside the sdk, on model-suite rows.

    python benchmarks/profile_host.py t5_train_bf16,qwen2_train_bf16 [--steps 20] [--top 25]

For each row (names as ``python -m sdk bench --suite models --list`` prints them): builds the
suite's case at full size, compiles it with Inductor and with ``sdk:cuda_triton``, warms both,
then per backend prints

* ms per step, synchronized (median of ``--steps``), and the host ms per step: the same steps
  without a synchronize in between, timed until the last launch returns (the device queue
  absorbs the launches while the host is slower than the GPU);
* the graph breaks Dynamo made, and
* cProfile's functions by own time over ``--steps`` steps (``--top`` of them).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch

import sdk
from sdk.core.adapters.torch_private import graph_break_count, reset_dynamo
from sdk.tools.bench_models import rows


def _time(step, target, n: int) -> tuple[float, float]:
    torch.cuda.synchronize()
    each = []
    for _ in range(n):
        t0 = time.perf_counter()
        step(target)
        torch.cuda.synchronize()
        each.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    for _ in range(n):
        step(target)
    host = (time.perf_counter() - t0) / n
    torch.cuda.synchronize()
    return statistics.median(each) * 1e3, host * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("rows")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    table = rows()
    for name in a.rows.split(","):
        model, dtype = table[name]
        for label, make in (
            ("inductor", lambda t: torch.compile(t)),
            ("sdk", lambda t: torch.compile(t, backend=sdk.backend("cuda_triton"))),
        ):
            reset_dynamo()
            breaks = graph_break_count()
            case = model.build("cuda", dtype, "full")
            target = make(case.target)
            for _ in range(3):
                case.step(target)
            breaks = graph_break_count() - breaks
            ms, host = _time(case.step, target, a.steps)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(a.steps):
                case.step(target)
            torch.cuda.synchronize()
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(a.top)
            print(
                f"== {name} {label}: {ms:.2f} ms per step, host {host:.2f} ms, graph breaks {breaks}"
            )
            text = out.getvalue()
            print(text[text.find("ncalls") :])


if __name__ == "__main__":
    main()

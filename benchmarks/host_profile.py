"""GPU: where the host time of a model-suite row's step goes, per backend.

    TAG=_4c taskset -c 0-3 python benchmarks/host_profile.py resnet50_train_bf16 OUTDIR

For eager, Inductor and the sdk (``BES=inductor,sdk:cuda_triton`` to choose): the median of 30
synchronized steps, 10 steps issued without a synchronization (the host's time per step),
the garbage collections during the 30, then a cProfile of 10 steps (top 30 by own time) and
one step under ``torch.profiler`` (CPU activities, top 30 by self CPU time). Written to
``OUTDIR/host_<row><TAG>.txt`` and printed.
"""

from __future__ import annotations

import cProfile
import functools
import gc
import io
import os
import pstats
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

import sdk
from sdk.tools import bench_models as bm
from sdk.tools.bench_timing import _Clock

#: one synchronized step, wall seconds (host and device), as the suite times a cold call
CLOCK = _Clock(cuda=True, repeat=0)


def _timed(case, f) -> tuple[list[float], list[int]]:
    counts = [0, 0, 0]

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            counts[info["generation"]] += 1

    gc.callbacks.append(count)
    times = [CLOCK.wall(functools.partial(case.step, f))[0] for _ in range(30)]
    gc.callbacks.remove(count)
    return times, counts


def _cprofile(call, calls: int, top: int) -> str:
    """A cProfile of ``calls`` calls, synchronized after the last: the ``top`` functions by
    their own time (here, not the tree's clock: an older tree's has no profile)."""
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
    pr.disable()
    out = io.StringIO()
    pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main(row: str, outdir: str) -> None:
    tag = os.environ.get("TAG", "")
    model, dtype = bm.rows()[row]
    case = model.build(torch.device("cuda"), dtype, "full")
    with open(os.path.join(outdir, f"host_{row}{tag}.txt"), "w") as rep:

        def say(text: str) -> None:
            print(text, flush=True)
            print(text, file=rep, flush=True)

        for be in os.environ.get("BES", "eager,inductor,sdk:cuda_triton").split(","):
            sdk.reset()
            torch._dynamo.reset()
            f = case.target if be == "eager" else torch.compile(case.target, backend=be)
            with sdk.collect_reports() as compiled:
                for _ in range(5):
                    case.step(f)
            if be.startswith("sdk"):
                say(str(compiled)[:3000])
            times, counts = _timed(case, f)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(10):
                case.step(f)
            host = (time.perf_counter() - t0) / 10
            say(
                f"== {row} {be}: step {statistics.median(times) * 1e3:.2f} ms (min "
                f"{min(times) * 1e3:.2f}); 10 steps unsynced: host {host * 1e3:.2f} ms/step; "
                f"gc {counts}; objects {len(gc.get_objects())}"
            )
            say(_cprofile(functools.partial(case.step, f), 10, 30)[:7000])
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                case.step(f)
                torch.cuda.synchronize()
            table = prof.key_averages().table(
                sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=70
            )
            say(table[:9000])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

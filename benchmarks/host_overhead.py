"""GPU: host time per call of eager, Inductor and the sdk (native runner, and its Python
program) on model-suite rows.

    python benchmarks/host_overhead.py resnet18_fp32,mobilenet_v3_large_bf16 [PROFILE_ROWS]

For each row (``python -m sdk bench --suite models --list``), each backend is warmed up, then
timed in three interleaved rounds of 40 single calls: the host time of a call (from the
call to its return, the GPU still working) and its step time (to the end of a synchronize),
medians per round. A row whose step time equals its host time is bound by the host. With
PROFILE_ROWS > 0, 20 calls of Inductor and of the sdk then run under cProfile and its
PROFILE_ROWS most expensive functions (own time) are printed.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import time

import torch

import sdk
from sdk.tools import bench_models as bm

BACKENDS = ("eager", "inductor", "sdk:cuda_triton", "sdk python runner")


def _backend(name: str):
    import sdk

    if name == "sdk python runner":
        return sdk.backend("cuda_triton", runner="python")
    return name


def main(names: list[str], prof_rows: int) -> None:
    table = bm.rows()
    for name in names:
        model, dtype = table[name]
        case = model.build(torch.device("cuda"), dtype, "full")
        fns = {}
        for be in BACKENDS:
            sdk.reset()
            f = case.target if be == "eager" else torch.compile(case.target, backend=_backend(be))
            for _ in range(5):
                case.step(f)
            torch.cuda.synchronize()
            fns[be] = f
        res: dict[str, list[tuple[float, float]]] = {}
        for _ in range(3):
            for be, f in fns.items():
                host, step = [], []
                for _ in range(40):
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    case.step(f)
                    t1 = time.perf_counter()
                    torch.cuda.synchronize()
                    host.append(t1 - t0)
                    step.append(time.perf_counter() - t0)
                res.setdefault(be, []).append(
                    (statistics.median(host) * 1e3, statistics.median(step) * 1e3)
                )
        for be, v in res.items():
            print(
                f"{name:26s} {be:16s} host ms {[round(h, 3) for h, _ in v]}  "
                f"step ms {[round(s, 3) for _, s in v]}"
            )
        for be in BACKENDS[1:] if prof_rows else ():
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(20):
                case.step(fns[be])
            pr.disable()
            torch.cuda.synchronize()
            out = io.StringIO()
            pstats.Stats(pr, stream=out).sort_stats("tottime").print_stats(prof_rows)
            print(f"== {name} {be}: cProfile of 20 calls (own time)")
            print("\n".join(ln for ln in out.getvalue().splitlines() if ln.strip()))


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]) if len(sys.argv) > 2 else 0)

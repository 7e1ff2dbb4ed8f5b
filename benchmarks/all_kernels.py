"""GPU: every device kernel of Inductor and the sdk on model-suite rows, to JSON.

    python benchmarks/all_kernels.py resnet50_train_bf16,mixtral_train_bf16 out.json [MODE]

For each row and backend (compiled with torch.compile's ``MODE``, default: the default): the
first call's time (cold, no fresh cache directories), the median of 20 steps after 5 warm
ones, then one step under ``torch.profiler`` (CUDA activities): each kernel's name, launches
and device microseconds, most expensive first. The sdk's generated kernels are named
``k_<ops>_<digest>`` (``_1``, ``_2``: the later kernels of a split reduction's chain).
"""

from __future__ import annotations

import functools
import json
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import sdk
from sdk.tools import bench_models as bm
from sdk.tools.bench_launches import kernel_times
from sdk.tools.bench_timing import _Clock

#: one synchronized step, wall seconds (host and device), as the suite times a cold call
CLOCK = _Clock(cuda=True, repeat=0)


def _kernels(step) -> list[list]:
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    per = kernel_times(prof.events())
    return sorted(([n, c, round(us, 2)] for n, (c, us) in per.items()), key=lambda r: -r[2])


def main(rows: list[str], out: str, mode: str | None) -> None:
    res: dict[str, dict] = {}
    for name in rows:
        model, dtype = bm.rows()[name]
        case = model.build(torch.device("cuda"), dtype, "full")
        res[name] = {}
        for be in ("inductor", "sdk:cuda_triton"):
            sdk.reset()
            torch._dynamo.reset()
            f = torch.compile(case.target, backend=be, mode=mode)
            cold, _ = CLOCK.wall(functools.partial(case.step, f))
            for _ in range(5):
                case.step(f)
            times = [CLOCK.wall(functools.partial(case.step, f))[0] for _ in range(20)]
            ks = _kernels(functools.partial(case.step, f))
            r = res[name][be] = {
                "step_ms": statistics.median(times) * 1e3,
                "cold_s": cold,
                "device_ms": sum(k[2] for k in ks) / 1e3,
                "launches": sum(k[1] for k in ks),
                "kernels": ks,
            }
            print(
                f"{name} {be}: step {r['step_ms']:.3f} ms, device {r['device_ms']:.3f} ms, "
                f"{r['launches']} launches, cold {cold:.1f} s",
                flush=True,
            )
            with open(out, "w") as fh:
                json.dump(res, fh)
        del case
        sdk.reset()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)

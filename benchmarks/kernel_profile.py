"""GPU: the most expensive device kernels of Inductor and the sdk on model-suite rows.

    python benchmarks/kernel_profile.py distilbert_train_bf16,gpt2_train_bf16 [TOP]

For each row and backend: the median step time of 15 warm steps, then three steps under
``torch.profiler`` (CUDA activities): device time and launches per step, and the TOP
kernels by total device time per step (name, count per step). The sdk's generated kernels
are named ``k_<ops>`` after the ATen ops they fuse.
"""

from __future__ import annotations

import collections
import statistics
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from sdk import bench_models as bm
from sdk.core.adapters.torch_private import reset_dynamo


def main(names: list[str], top: int) -> None:
    for name in names:
        model, dtype = bm.rows()[name]
        case = model.build(torch.device("cuda"), dtype, "full")
        for be in ("inductor", "sdk:cuda_triton"):
            reset_dynamo()
            f = torch.compile(case.target, backend=be)
            for _ in range(4):
                case.step(f)
            times = []
            for _ in range(15):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                case.step(f)
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    case.step(f)
                torch.cuda.synchronize()
            agg: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
            for e in prof.events():
                if e.device_type == torch.autograd.DeviceType.CUDA:
                    agg[e.name][0] += 1
                    agg[e.name][1] += e.device_time_total
            total = sum(v[1] for v in agg.values()) / 3 / 1e3
            launches = int(sum(v[0] for v in agg.values()) // 3)
            print(f"== {name} {be}: step {statistics.median(times) * 1e3:.2f} ms, "
                  f"device {total:.2f} ms, launches {launches}")
            for k, (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1])[:top]:
                print(f"   {us / 3 / 1e3:7.3f} ms  x{int(n) // 3:<3d} {k[:110]}")


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]) if len(sys.argv) > 2 else 12)

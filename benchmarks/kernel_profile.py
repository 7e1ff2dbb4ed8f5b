"""GPU: the most expensive device kernels of Inductor and the sdk on model-suite rows.

    python benchmarks/kernel_profile.py distilbert_train_bf16,gpt2_train_bf16 [TOP]

For each row and backend: the median step time of 15 warm steps, then one step through the
model suite's probe (:func:`sdk.tools.bench_models.cuda_launches`): device time and launches per
step, and the TOP kernels by device time. The sdk's generated kernels are named
``k_<ops>`` after the ATen ops they fuse.
"""

from __future__ import annotations

import functools
import statistics
import sys

import torch

import sdk
from sdk.tools import bench_models as bm
from sdk.tools.bench_timing import _Clock

#: one synchronized step, wall seconds (host and device), as the suite times a cold call
CLOCK = _Clock(cuda=True, repeat=0)


def main(names: list[str], top: int) -> None:
    for name in names:
        model, dtype = bm.rows()[name]
        case = model.build(torch.device("cuda"), dtype, "full")
        for be in ("inductor", "sdk:cuda_triton"):
            sdk.reset()
            f = torch.compile(case.target, backend=be)
            for _ in range(4):
                case.step(f)
            times = [CLOCK.wall(functools.partial(case.step, f))[0] for _ in range(15)]
            prof = bm.cuda_launches(functools.partial(case.step, f), top)
            if "error" in prof:
                print(f"== {name} {be}: {prof['error']}")
                continue
            print(
                f"== {name} {be}: step {statistics.median(times) * 1e3:.2f} ms, "
                f"device {prof['device_ms']:.2f} ms, launches {prof['launches']}"
            )
            for k in prof["top_kernels"]:
                print(f"   {k['ms']:7.3f} ms  {k['name'][:110]}")


if __name__ == "__main__":
    main(sys.argv[1].split(","), int(sys.argv[2]) if len(sys.argv) > 2 else 12)

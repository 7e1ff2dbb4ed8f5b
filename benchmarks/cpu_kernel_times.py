"""CPU: time spent in cpu_cpp's generated kernels per step of a model-suite row.

    python benchmarks/cpu_kernel_times.py qwen2_train_bf16 [TOP]

Compiles the row (``--size small``) with ``sdk:cpu_cpp``, warms up 5 steps, then times 20
steps and every kernel launch in them (``time.perf_counter`` around each launch, the data
pointers gathered inside). Prints the step time, the kernel time per step and the TOP
slowest kernels (mean per launch).
"""

from __future__ import annotations

import collections
import sys
import time

import torch

import sdk.toolchain
from sdk.tools import bench_models as bm

spent: collections.Counter[str] = collections.Counter()
count: collections.Counter[str] = collections.Counter()


def _timed_launcher(fn, nargs=None, nsizes=0, error=None):
    def launch(*args):
        n = len(args) if nargs is None else nargs  # tensors, then size arguments
        t0 = time.perf_counter()
        failed = fn(*[t.data_ptr() for t in args[:n]], *args[n:])
        spent[fn.__name__] += time.perf_counter() - t0
        count[fn.__name__] += 1
        if error is not None and failed:
            raise error()

    return launch


def main(name: str, top: int) -> None:
    sdk.toolchain.launcher = _timed_launcher  # kernels built from here on are timed
    model, dtype = bm.rows()[name]
    case = model.build(torch.device("cpu"), dtype, "small")
    f = torch.compile(case.target, backend="sdk:cpu_cpp")
    for _ in range(5):
        case.step(f)
    spent.clear()
    count.clear()
    steps = 20
    t0 = time.perf_counter()
    for _ in range(steps):
        case.step(f)
    total = time.perf_counter() - t0
    print(
        f"{name}: step {total / steps * 1e3:.2f} ms, generated kernels "
        f"{sum(spent.values()) / steps * 1e3:.2f} ms in {sum(count.values()) // steps} launches"
    )
    for k, v in spent.most_common(top):
        print(f"{v / count[k] * 1e6:8.1f} us x{count[k] // steps}  {k}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12)

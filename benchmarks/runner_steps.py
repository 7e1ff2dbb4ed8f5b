"""Where the native runner's host time goes, step by step: a model row's training step (or a
kernel-suite row) compiled with the sdk, then every program's per-step host timing switched
on (``Program.time_steps``, core/runner.cpp) for N calls; totals per kind of step (library
calls by ATen op, kernel launches, allocations, views), per call, beside the whole step.

    python benchmarks/runner_steps.py qwen2_train_bf16 [--steps 20] [--top 15]

Host times: each step from its start to its return, the device not synchronized (a launch's
host cost, not its kernel's run time). The timing itself adds about 50 ns a step.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections import defaultdict

import torch

from sdk.tools import bench_kernels as bk
from sdk.tools import bench_models as bm


def _case(name: str, device: torch.device):
    if name in bm.rows():
        model, dtype = bm.rows()[name]
        return model.build(device, dtype, "full" if device.type == "cuda" else "small")
    suite = bk._gpu_suite() if device.type == "cuda" else bk._cpu_suite()
    return suite[name](device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("row")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    plugin = "cuda_triton" if device.type == "cuda" else "cpu_cpp"
    case = _case(args.row, device)
    f = torch.compile(case.target, backend=f"sdk:{plugin}")
    for _ in range(5):
        case.step(f)
    sync()
    programs = [
        o for o in gc.get_objects() if type(o).__name__ == "Program" and hasattr(o, "step_kinds")
    ]
    if not programs:
        raise SystemExit("no program runs in the native runner (see sdk.explain's runner line)")
    for p in programs:
        p.time_steps(True)
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        case.step(f)
    host = (time.perf_counter() - t0) / args.steps * 1e3
    sync()
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for p in programs:
        for kind, ns in zip(p.step_kinds, p.step_ns(), strict=True):
            key = kind.split(".")[0] if kind.startswith("call") else kind
            total[key] += ns / args.steps / 1e6
            count[key] += 1
        p.time_steps(False)
    inside = sum(total.values())
    print(
        f"{args.row} on {device} ({plugin}): {len(programs)} programs; host ms per step "
        f"{host:.3f}, of which in the runner's steps {inside:.3f}"
    )
    print(f"{'step kind':48s} {'ms/step':>8s} {'steps':>6s} {'us each':>8s}")
    for key, ms in sorted(total.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{key[:48]:48s} {ms:8.3f} {count[key]:6d} {ms * 1e3 / count[key]:8.2f}")


if __name__ == "__main__":
    main()

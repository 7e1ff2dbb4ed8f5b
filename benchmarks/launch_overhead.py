"""Per-call CPU overhead of a compiled graph: sdk:<plugin> vs Inductor vs eager (GPU).

    python benchmarks/launch_overhead.py

Each function works on tiny tensors, so the GPU finishes long before the host
issues the next call: the time per call is the host-side cost of guards, the
runtime wrapper and the launches. Calls are issued back to back and timed with
one synchronize at the end.
"""

from __future__ import annotations

import time

import torch

import sdk


def per_call_us(fn, *args, n=2000):
    for _ in range(50):
        fn(*args)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn(*args)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main():
    x = torch.randn(16, device="cuda")
    cases = {
        "1 kernel (x + 1)": lambda x: x + 1,
        "1 fused kernel (8 pointwise ops)": lambda x: ((x * 2 + 1).sin() * x.cos() - 3).relu(),
        "3 kernels (2 reductions between)": lambda x: (x - x.mean()) / (x.std() + 1) * x.sum(),
    }
    print(f"{'case':36s} {'eager us':>9s} {'inductor us':>12s} {'sdk us':>8s}  sdk launches")
    for name, fn in cases.items():
        eager = per_call_us(fn, x)
        sdk.reset()
        ind = per_call_us(torch.compile(fn), x)
        sdk.reset()
        s = per_call_us(torch.compile(fn, backend=sdk.backend("cuda_triton")), x)
        r = sdk.explain(fn, x, backend="sdk:cuda_triton")
        print(f"{name:36s} {eager:9.1f} {ind:12.1f} {s:8.1f}  {len(r.kernels)} kernels")


if __name__ == "__main__":
    main()

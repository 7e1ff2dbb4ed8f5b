"""Host time per call of a batch-1 MLP (512-512-512-10, no_grad) under
``mode="reduce-overhead"``: Inductor's CUDA-graph trees beside sdk:cuda_triton with the
cudagraphs plugin. Calls are issued back to back without a synchronization (best of 5 runs of
1000 calls), so the figure is what the host spends per call; then a cProfile of the sdk's
calls. Needs a CUDA GPU.

    python benchmarks/cudagraph_host.py
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

import torch

import sdk  # noqa: F401  (registers the sdk: backends)


def main() -> None:
    torch.manual_seed(0)
    m = (
        torch.nn.Sequential(
            torch.nn.Linear(512, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 512),
            torch.nn.ReLU(),
            torch.nn.Linear(512, 10),
        )
        .cuda()
        .eval()
    )
    x = torch.randn(1, 512, device="cuda")
    res = {}
    for name, kw in (
        ("inductor", {"mode": "reduce-overhead"}),
        ("sdk", {"backend": "sdk:cuda_triton", "mode": "reduce-overhead"}),
    ):
        torch._dynamo.reset()
        f = torch.compile(m, **kw)
        with torch.no_grad():
            for _ in range(10):
                f(x)
            torch.cuda.synchronize()
            best = []
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(1000):
                    f(x)
                host = time.perf_counter() - t
                torch.cuda.synchronize()
                best.append(host / 1000 * 1e6)
            res[name] = min(best)
            if name == "sdk":
                pr = cProfile.Profile()
                pr.enable()
                for _ in range(2000):
                    f(x)
                pr.disable()
                s = io.StringIO()
                pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
                print(s.getvalue())
    print("host us per call (no sync):", {k: round(v, 1) for k, v in res.items()})


if __name__ == "__main__":
    main()

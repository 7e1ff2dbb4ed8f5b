"""Host time per call of one compiled program through each of its executors: the step
interpreter (core/interp.py) and the native runner (core/runner.cpp), on tiny CPU tensors
(the kernels' own time is small beside the host's). (Until issue 48's one emitter, the
wrapper also wrote a Python source of the program: 5.9 us a call fused, 20.4 unfused, against
the interpreter's 7.9 and 27.0 on the 2-core machine.)

    python benchmarks/interp_host.py [--calls 20000] [--fusion 0|1]

The graph: a matmul, then 20 pointwise ops. With fusion (the default) the pointwise ops are
a few kernels; ``--fusion 0`` makes each its own kernel and buffer: about 20 launches, 20
allocations and frees per call. Each executor is called directly (no guard, no Dynamo).
"""

from __future__ import annotations

import argparse
import time

import torch

import sdk
from sdk.core import interp, native, wrapper
from sdk.core import steps as st


def graph(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x @ w
    for k in range(5):
        y = (y * 1.5 + k).sin()
        y = (y - 0.25).relu() * y
    return y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--fusion", type=int, default=1)
    args = ap.parse_args()
    made: list[wrapper.Wrapper] = []
    real = wrapper.Wrapper.materialize

    def keep(self: wrapper.Wrapper, *a, **k):  # noqa: ANN202
        made.append(self)
        return real(self, *a, **k)

    wrapper.Wrapper.materialize = keep  # type: ignore[method-assign]
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    options = {"cache": False} if args.fusion else {"cache": False, "fusion": False}
    backend = sdk.backend("cpu_cpp", **options)
    torch.compile(graph, backend=backend)(x, w)
    (wr,) = made
    executors = {
        "interpreter": interp.program(
            wr.steps,
            wr.n_slots,
            wr.constants,
            torch.device(wr.device),
            wrapper._mark_writes,
            n_regs=wr.n_regs,
            named=wr.named,
            check_result=wrapper._vendor_result,
        ),
    }
    if native.module() is not None:
        executors["native"] = wr._native()
    kinds = sorted({st.NAMES[s[0]] for s in wr.steps})
    print(f"{len(wr.steps)} steps ({', '.join(kinds)})")
    inputs = [x, w]
    for fn in executors.values():
        torch.testing.assert_close(fn(inputs)[0], graph(x, w))
    times: dict[str, float] = {}
    for _ in range(5):  # (interleaved rounds: the best of each is reported)
        for name, fn in executors.items():
            for _ in range(200):
                fn(inputs)
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn(inputs)
            us = (time.perf_counter() - t0) / args.calls * 1e6
            times[name] = min(times.get(name, us), us)
    for name, us in times.items():
        print(f"{name:12s} {us:7.2f} us/call")


if __name__ == "__main__":
    main()

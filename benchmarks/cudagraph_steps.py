"""GPU: the host's share of a models-suite row's step under ``mode="reduce-overhead"``,
Inductor's CUDA-graph trees beside sdk:cuda_triton with the cudagraphs plugin.

    python benchmarks/cudagraph_steps.py gpt2_train_bf16 [inductor,sdk:cuda_triton] [--profile]

For each backend, after 15 warm steps: the median of 30 synchronized steps; the host's time
per step over 20 steps issued without a synchronization ("busy": the device still runs the
steps before); the same 20 steps each after a synchronization ("idle"); and, for each of
both, each CUDA graph's median host time per replay (``CUDAGraph.replay`` timed), so that a
slow replay and a slow wrapper around it can be told apart. ``--profile``: then a cProfile of
20 steps (top 35 by own time, and the run-time wrappers' top 35 by cumulative time).
Compare only within one run.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from typing import Any

import torch

import sdk
from sdk.tools import bench_models as bm
from sdk.tools.bench_timing import _Clock

#: one synchronized step, wall seconds (host and device), as the suite times a cold call
CLOCK = _Clock(cuda=True, repeat=0)

_REPLAYS: dict[int, list[float]] = {}
#: ``--profile``'s second table, by cumulative time: the compilers' run-time wrappers
WITHIN = "sdk/|plugins/|cudagraph_trees|runtime_wrappers|autograd/function"


def _timed_replays() -> None:
    """Time every ``CUDAGraph.replay`` (both compilers' wrappers call it) into ``_REPLAYS``."""
    graph = torch.cuda.CUDAGraph
    replay = graph.replay

    def timed(self: Any) -> None:
        t0 = time.perf_counter()
        replay(self)
        _REPLAYS.setdefault(id(self), []).append((time.perf_counter() - t0) * 1e6)

    graph.replay = timed


def _host(case: Any, f: Any, sync: bool) -> tuple[float, list[float]]:
    _REPLAYS.clear()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        if sync:
            torch.cuda.synchronize()
        case.step(f)
    host = (time.perf_counter() - t0) / 20 * 1e3
    torch.cuda.synchronize()
    return host, sorted(round(statistics.median(v), 1) for v in _REPLAYS.values())


def main(row: str, backends: list[str], profile: bool) -> None:
    model, dtype = bm.rows()[row]
    case = model.build(torch.device("cuda"), dtype, "full")
    print(f"[{row}] {case.desc}", flush=True)
    _timed_replays()
    for be in backends:
        sdk.reset()
        torch._dynamo.reset()
        f = torch.compile(case.target, backend=be, mode="reduce-overhead")
        for _ in range(15):
            case.step(f)
        steps = [CLOCK.wall(functools.partial(case.step, f))[0] * 1e3 for _ in range(30)]
        busy, busy_replays = _host(case, f, sync=False)
        idle, idle_replays = _host(case, f, sync=True)
        print(
            f"== {be}: step {statistics.median(steps):.3f} ms; host per step {busy:.3f} ms "
            f"busy, {idle:.3f} ms idle; {len(busy_replays)} graphs, replay us per graph "
            f"busy {busy_replays}, idle {idle_replays}",
            flush=True,
        )
        if profile:
            print(CLOCK.profile(functools.partial(case.step, f), 20, 35, WITHIN), flush=True)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--profile"]
    main(
        args[0],
        (args[1] if len(args) > 1 else "inductor,sdk:cuda_triton").split(","),
        "--profile" in sys.argv,
    )

"""The bs1 MLP of the kernel suite (3 Linear, ReLU, batch 1, fp32, inference): time per call
of eager, Inductor and the sdk, **each backend in a process of its own**.

Why a process each: Dynamo keeps its compiled entries per code object (``Sequential.forward``),
so with two backends compiled in one process every call of one first fails the guards of
the other's entry: measured on an H200 that adds about 29 us to a call of about 60 (and on
the 2-core CPU about 17 us). A user compiles with one backend. Each process warms up, then
times 5 rounds of ``--calls`` calls (no synchronize inside a round, one before and after: on a
GPU these calls are bound by the host); the median round in microseconds per call. The
processes run in the order given, twice (``--repeat``), and every run is printed.

    python benchmarks/bs1_mlp.py [--calls 2000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch

BACKENDS = ("eager", "inductor", "sdk")


def _child(backend: str, calls: int) -> None:
    from sdk.tools import bench_kernels as bk

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    plugin = "cuda_triton" if dev.type == "cuda" else "cpu_cpp"
    case = bk._gpu_suite()["mlp_bs1"](dev) if dev.type == "cuda" else None
    if case is None:  # the same MLP on the CPU
        case = bk._mlp_inference_case(dev, 1, [512, 512, 512, 10], torch.nn.ReLU, torch.float32)
    target = case.target
    if backend != "eager":
        target = torch.compile(
            target, backend="inductor" if backend == "inductor" else f"sdk:{plugin}"
        )
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(200):
        case.step(target)
    rounds = []
    for _ in range(5):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            case.step(target)
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
        sync()
    print(json.dumps({"backend": backend, "us": statistics.median(rounds), "rounds": rounds}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--child", choices=BACKENDS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.calls)
        return
    got: dict[str, list[float]] = {b: [] for b in BACKENDS}
    for _ in range(args.repeat):
        for b in BACKENDS:
            run = subprocess.run(
                [sys.executable, __file__, "--child", b, "--calls", str(args.calls)],
                capture_output=True,
                text=True,
                check=True,
            )
            row = json.loads(run.stdout.strip().splitlines()[-1])
            got[b].append(row["us"])
            print(f"{b:9s} {row['us']:8.2f} us/call  rounds {[round(r, 1) for r in row['rounds']]}")
    eager = statistics.median(got["eager"])
    for b in BACKENDS:
        us = statistics.median(got[b])
        print(f"{b:9s} median {us:8.2f} us   / eager {us / eager:5.2f}")


if __name__ == "__main__":
    main()

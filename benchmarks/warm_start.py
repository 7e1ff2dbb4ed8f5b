"""Cold and warm starts of one model-suite row, one fresh process per measurement.

For each process: the first training step's wall time (Dynamo tracing, AOTAutograd, the
sdk's compile, the step itself) and the part of it the sdk's compile of the ATen graphs took
(lowering to code generation and kernel builds, or the whole-graph cache). Processes:

* cold: an empty cache directory (no compiled programs, no built kernels);
* warm: the same directory afterwards, whole-graph cache on (the default);
* warm, graph cache off: ``SDK_GRAPH_CACHE=0``, built kernels still cached;
* aot_eager: Dynamo and AOTAutograd with no code generation, and eager: Dynamo alone (the
  floor of any cache that sits below Dynamo, as the sdk's and Inductor's do);
* Inductor, cold (an empty ``TORCHINDUCTOR_CACHE_DIR``) and warm (its FX graph and
  AOTAutograd caches filled), for comparison.

    python benchmarks/warm_start.py gpt2_train_fp32 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def child(name: str, backend: str) -> None:
    import torch

    from sdk.core import pipeline
    from sdk.tools import bench_models as bm

    spent: list[float] = []
    compile_aten = pipeline.Session.compile_aten_graph

    def timed(self, *a, **k):
        t = time.perf_counter()
        try:
            return compile_aten(self, *a, **k)
        finally:
            spent.append(time.perf_counter() - t)

    pipeline.Session.compile_aten_graph = timed
    model, dtype = bm.rows()[name]
    case = model.build(torch.device("cpu"), dtype, "small")
    f = torch.compile(case.target, backend=backend)
    t0 = time.perf_counter()
    case.step(f)
    print(f"RESULT {time.perf_counter() - t0:.3f} {sum(spent):.3f} {len(spent)}", flush=True)


def run(name: str, backend: str, env: dict[str, str]) -> tuple[float, float, int]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", name, backend],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    ).stdout
    line = next(x for x in out.splitlines() if x.startswith("RESULT"))
    step, sdk_s, graphs = line.split()[1:]
    return float(step), float(sdk_s), int(graphs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("row", nargs="?", default="gpt2_train_fp32")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", nargs=2, metavar=("ROW", "BACKEND"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as ind:
        env = {
            **os.environ,
            "SDK_CACHE_DIR": cache,
            "SDK_GRAPH_CACHE": "1",
            "TORCHINDUCTOR_CACHE_DIR": ind,
        }
        rows = {
            "cold": [run(args.row, "sdk:cpu_cpp", env)],
            "Inductor cold": [run(args.row, "inductor", env)],
        }
        for _ in range(args.repeat):  # interleaved, so that a slow phase of the host hits all
            rows.setdefault("warm", []).append(run(args.row, "sdk:cpu_cpp", env))
            rows.setdefault("warm, graph cache off", []).append(
                run(args.row, "sdk:cpu_cpp", {**env, "SDK_GRAPH_CACHE": "0"})
            )
            rows.setdefault("Inductor warm", []).append(run(args.row, "inductor", env))
            rows.setdefault("aot_eager", []).append(run(args.row, "aot_eager", env))
            rows.setdefault("eager (Dynamo alone)", []).append(run(args.row, "eager", env))
    print(f"{args.row}, one process each (median of {args.repeat} where repeated)")
    print(f"{'process':<24}{'first step s':>14}{'sdk compile s':>15}  graphs")
    for label, runs in rows.items():
        step = statistics.median(r[0] for r in runs)
        sdk_s = statistics.median(r[1] for r in runs)
        print(f"{label:<24}{step:14.2f}{sdk_s:15.2f}  {runs[0][2]}")


if __name__ == "__main__":
    main()

"""Cold and warm starts, the sdk beside Inductor: time to the first result of a training step
in a fresh process, per phase.

The step is a 2-layer HF GPT-2 with ``loss.backward()`` inside the compiled function (bf16,
8x512 tokens, n_embd 768 on a GPU; fp32, 2x128 tokens, n_embd 256 on the CPU). Each
measurement is one fresh process:

* cold: empty caches (the sdk's, torch's AOTAutograd/Inductor directory, Triton's);
* warm: the same caches afterwards (a restarted job or server).

Where torch's bytecode is not cached (``.pyc`` files: a read-only environment installed
without them, as on the lent GPU machines), each process would compile every module it imports
from source (about 2 s, either backend): the processes then share one bytecode cache, filled
by an uncounted cold run of each backend first, as on an installed torch.

The sdk and Inductor each get caches of their own; warm rounds are interleaved, so that a slow
phase of the host hits both. Per process: the first step's wall time from ``torch.compile``
(imports it triggers included) to the result, and torch's own ``dynamo_timed`` phases: Dynamo's
tracing, the backend (AOTAutograd and the compiler, or on a hit the cache key and the load),
AOTAutograd's trace and partition (a miss only), the load of a hit; for the sdk also its own
compile of the ATen graphs. Loss and gradients are compared bit for bit: a warm sdk
process must be identical to the cold one.

    python benchmarks/warm_start.py --repeat 3            # CPU, or the GPU when there is one
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PHASES = {
    "dynamo": "bytecode_tracing",
    "backend": "OutputGraph.call_user_compiler",
    "aot trace": "create_aot_dispatcher_function",
    "cache load": "AOTAutogradCache.inductor_load",
}


def child(backend: str, device: str, size: str, profile: int) -> None:
    if os.environ.get("BENCH_CHILD_PRELUDE"):
        # a diagnostic's patches (timers around torch's functions), run before the step
        import runpy

        runpy.run_path(os.environ["BENCH_CHILD_PRELUDE"], run_name="bench_prelude")
    import torch
    from torch._dynamo.utils import compilation_time_metrics as metrics
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    spent: list[float] = []
    if backend.startswith("sdk:"):
        from sdk.core import pipeline

        compile_aten = pipeline.Session.compile_aten_graph
        restore = pipeline.Session.restore_aten_graph

        def timed(fn):
            def run(*a, **k):
                t = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    spent.append(time.perf_counter() - t)

            return run

        pipeline.Session.compile_aten_graph = timed(compile_aten)
        pipeline.Session.restore_aten_graph = timed(restore)
    gpu = device == "cuda"
    large = gpu and size == "large"
    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=2,
        n_embd=768 if large else 256,
        n_head=12 if large else 4,
        vocab_size=50257 if gpu else 4096,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
    )
    dtype = torch.bfloat16 if gpu else torch.float32
    model = GPT2LMHeadModel(cfg).to(device=device, dtype=dtype).train()
    shape = (8, 512) if large else (4, 128) if gpu else (2, 128)
    ids = torch.randint(0, cfg.vocab_size, shape, device=device)

    def step(ids: torch.Tensor) -> torch.Tensor:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.detach()

    if gpu:
        torch.cuda.synchronize()
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t0 = time.perf_counter()
    loss = torch.compile(step, backend=backend)(ids)
    if gpu:
        torch.cuda.synchronize()
    first = time.perf_counter() - t0
    if profiler is not None:
        import pstats

        profiler.disable()
        stats = pstats.Stats(profiler, stream=sys.stderr)
        stats.sort_stats("cumulative").print_stats(profile)
        stats.sort_stats("tottime").print_stats(profile)
        stats.sort_stats("cumulative").print_stats(r"/(core|sdk|plugins)/", profile)
        for name in os.environ.get("BENCH_PROFILE_CALLERS", "").split(","):
            if name:
                stats.print_callers(name)
        if os.environ.get("BENCH_PROFILE_DUMP"):
            # the raw profile, for pstats elsewhere: who calls what, by how much
            name = backend.replace(":", "_") + ".prof"
            profiler.dump_stats(os.path.join(os.environ["BENCH_PROFILE_DUMP"], name))
    results = [loss, *(p.grad for p in model.parameters())]
    torch.save([t.float().cpu() for t in results], os.environ["BENCH_OUT"])
    from torch._dynamo.utils import counters

    out = {
        "first": first,
        "loss": float(loss),
        "frames": counters["stats"]["unique_graphs"],
        "breaks": sum(counters["graph_break"].values()),
    }
    for label, name in PHASES.items():
        out[label] = sum(metrics.get(name, ()))
    out["timed"] = {name: sum(times) for name, times in metrics.items()}
    out["sdk compile"] = sum(spent) if backend.startswith("sdk:") else None
    if backend == "sdk:cuda_triton":
        # the kernels launched from their records (cubins through the driver) and the times a
        # kernel went through Triton's JIT path
        from sdk.plugins.cuda_triton import native

        out["kernels"] = native.counts()
    print("RESULT " + json.dumps(out), flush=True)


def run(
    backend: str,
    device: str,
    env: dict[str, str],
    size: str = "large",
    profile: int = 0,
    imports: bool = False,
) -> dict:
    env = {**env, "BENCH_OUT": os.path.join(os.path.dirname(env["SDK_CACHE_DIR"]), "out.pt")}
    timing = ["-X", "importtime"] if imports else []
    proc = subprocess.run(
        [sys.executable, *timing, __file__, "--child", backend, device, size, str(profile)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if proc.returncode:
        raise SystemExit(f"{backend} failed:\n{proc.stderr[-3000:]}")
    if profile:
        prof = "\n".join(x for x in proc.stderr.splitlines() if not x.startswith("import time:"))
        print(f"--- {backend}: cProfile of the first call ---\n{prof}", file=sys.stderr)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    import torch

    out = {**json.loads(line[7:]), "results": torch.load(env["BENCH_OUT"])}
    if imports:
        out["imports"] = _import_times(proc.stderr)
    return out


def _import_times(stderr: str) -> dict[str, tuple[int, int]]:
    """``-X importtime``'s lines: module -> (self us, cumulative us)."""
    out = {}
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            own, cum, name = line[len("import time:") :].split("|")
            if own.strip().isdigit():
                out[name.strip()] = (int(own), int(cum))
    return out


def print_imports(sdk: dict, inductor: dict, top: int) -> None:
    """The modules only one of the two warm processes imported, by their import time."""
    for label, mine, other in (("sdk", sdk, inductor), ("Inductor", inductor, sdk)):
        only = {m: t for m, t in mine.items() if m not in other}
        total = sum(own for own, _cum in only.values()) / 1e6
        print(f"imported by the {label}'s warm process only: {len(only)} modules, {total:.2f} s")
        roots = [m for m in only if m.rpartition(".")[0] not in only]
        for m in sorted(roots, key=lambda m: -only[m][1])[:top]:
            print(f"  {only[m][1] / 1e6:6.3f} s  {m}")


def _bytecode_cached() -> bool:
    """Whether torch's modules have their bytecode cached (``.pyc`` files, as pip writes at
    install). Without (a read-only environment installed without them), every process
    compiles each module it imports from source, about 2 s per process for either backend."""
    import importlib.util

    import torch._dynamo

    return os.path.exists(importlib.util.cache_from_source(torch._dynamo.__file__))


def print_timed(sdk: dict, inductor: dict, top: int) -> None:
    """torch's ``dynamo_timed`` phases of the two last warm processes, by how much longer
    the sdk's took (seconds; a phase nests in others, so they do not add up)."""
    names = sorted(set(sdk) | set(inductor), key=lambda n: -abs(sdk.get(n, 0) - inductor.get(n, 0)))
    print(f"{'dynamo_timed phase (last warm processes)':<60}{'sdk':>9}{'Inductor':>10}")
    for n in names[:top]:
        print(f"{n[:58]:<60}{sdk.get(n, 0):9.3f}{inductor.get(n, 0):10.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", choices=("cpu", "cuda"), default=None)
    ap.add_argument("--backend", default=None, help="the sdk backend (default by device)")
    ap.add_argument(
        "--size",
        choices=("large", "small"),
        default="large",
        help="GPU only: large = 768 wide, 8x512 tokens; small = 256 wide, 4x128 tokens",
    )
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="print cProfile's N top functions of each backend's last warm first call (stderr); "
        "BENCH_PROFILE_CALLERS=a,b also prints who called the functions matching a and b; "
        "BENCH_PROFILE_DUMP=DIR writes the raw profiles there (sdk_cuda_triton.prof, ...); "
        "BENCH_CHILD_PRELUDE=FILE runs FILE in every process before its step",
    )
    ap.add_argument(
        "--imports",
        type=int,
        default=0,
        metavar="N",
        help="run the last warm round under -X importtime and print the N slowest imports "
        "each backend's warm process made and the other's did not",
    )
    ap.add_argument(
        "--timed",
        type=int,
        default=0,
        metavar="N",
        help="print the N of torch's dynamo_timed phases whose times differ most between the "
        "two backends' last warm processes",
    )
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        backend, device, size, profile = args.child
        child(backend, device, size, int(profile))
        return
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sdk = args.backend or ("sdk:cuda_triton" if device == "cuda" else "sdk:cpu_cpp")
    with tempfile.TemporaryDirectory() as tmp:
        # the native runner is built once per machine and torch version (a user's first
        # compile on a machine pays it once, not per cache): built here, outside the rows
        runner_dir = os.path.join(tmp, "runner")
        os.makedirs(runner_dir)
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", "from sdk.core import native; native.module()"],
            env={**os.environ, "SDK_RUNNER_DIR": runner_dir},
            check=True,
        )
        print(
            f"the native runner's build (once per machine, not in the rows): "
            f"{time.perf_counter() - t0:.1f} s"
        )

        pycache = {}
        if not _bytecode_cached():
            # as on an installed torch: one bytecode cache for every process, filled by a
            # first cold run of each backend that is not counted
            pycache = {"PYTHONPYCACHEPREFIX": os.path.join(tmp, "pycache")}
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            print(
                "torch's bytecode is not cached here: every process shares one bytecode cache, "
                "filled first by an uncounted cold run of each backend"
            )

        def env(who: str) -> dict[str, str]:
            os.makedirs(os.path.join(tmp, who), exist_ok=True)
            return {
                **os.environ,
                **pycache,
                "SDK_RUNNER_DIR": runner_dir,
                "SDK_CACHE_DIR": os.path.join(tmp, who, "sdk"),
                "SDK_GRAPH_CACHE": "1",
                "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, who, "inductor"),
                "TRITON_CACHE_DIR": os.path.join(tmp, who, "triton"),
            }

        if pycache:
            for who, backend in (("prime-sdk", sdk), ("prime-inductor", "inductor")):
                run(backend, device, env(who), args.size)
        rows: dict[str, list[dict]] = {
            f"{sdk} cold": [run(sdk, device, env("sdk"), args.size)],
            "Inductor cold": [run("inductor", device, env("inductor"), args.size)],
        }
        for i in range(args.repeat):
            final = i == args.repeat - 1
            last = args.profile if final else 0
            imports = bool(args.imports) and final
            rows.setdefault(f"{sdk} warm", []).append(
                run(sdk, device, env("sdk"), args.size, last, imports)
            )
            rows.setdefault("Inductor warm", []).append(
                run("inductor", device, env("inductor"), args.size, last, imports)
            )
    name = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({os.cpu_count()} cores)"
    if device != "cuda":
        wide = "256 wide, 2x128"
    else:
        wide = "768 wide, 8x512" if args.size == "large" else "256 wide, 4x128"
    print(
        f"2-layer GPT-2 ({wide} tokens) training step, first call in a fresh process, {name}, torch "
        f"{torch.__version__}; seconds, median of {args.repeat} warm rounds (cold: one)"
    )
    cols = ["first", *PHASES, "sdk compile"]
    print(f"{'process':<26}" + "".join(f"{c:>13}" for c in cols))
    med = {}
    for label, runs in rows.items():
        cells = []
        for c in cols:
            vals = [r[c] for r in runs if r[c] is not None]
            cells.append(f"{statistics.median(vals):13.2f}" if vals else f"{'-':>13}")
        med[label] = statistics.median(r["first"] for r in runs)
        print(f"{label:<26}" + "".join(cells))
    print(
        f"sdk/Inductor first call: cold {med[f'{sdk} cold'] / med['Inductor cold']:.2f}, "
        f"warm {med[f'{sdk} warm'] / med['Inductor warm']:.2f}"
    )
    cold = rows[f"{sdk} cold"][0]
    warm_runs = rows[f"{sdk} warm"]
    for r in warm_runs:
        diff = max(float((a - b).abs().max()) for a, b in zip(r["results"], cold["results"]))
        print(
            f"sdk warm vs cold: loss {r['loss']:.6f} vs {cold['loss']:.6f}, "
            + ("bit-equal" if _equal(r, cold) else f"not bit-equal, max abs difference {diff:.3g}")
        )
    for label in (f"{sdk} cold", f"{sdk} warm"):
        counts = [r["kernels"] for r in rows[label] if r.get("kernels")]
        if counts:
            print(
                f"{label}: kernels loaded from records "
                + "/".join(str(c["record"]) for c in counts)
                + ", through Triton's JIT "
                + "/".join(str(c["triton"]) for c in counts)
            )
            if label.endswith("warm") and counts[0].get("triton_kernels"):
                print(
                    "  through Triton in a warm process: " + "; ".join(counts[0]["triton_kernels"])
                )
    if len(warm_runs) > 1:
        same = all(_equal(r, warm_runs[0]) for r in warm_runs[1:])
        print("sdk warm vs warm: " + ("bit-equal" if same else "not bit-equal"))
    if args.timed:
        print_timed(warm_runs[-1]["timed"], rows["Inductor warm"][-1]["timed"], args.timed)
    if args.imports:
        print_imports(warm_runs[-1]["imports"], rows["Inductor warm"][-1]["imports"], args.imports)


def _equal(a: dict, b: dict) -> bool:
    """Loss and every gradient of two processes, bit for bit."""
    import torch

    return all(torch.equal(x, y) for x, y in zip(a["results"], b["results"], strict=True))


if __name__ == "__main__":
    main()

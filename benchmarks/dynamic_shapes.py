"""Symbolic sizes (issue 10): one program for every batch size, and what it costs per call.

For each workload, on the default plugin's device (cuda_triton on a GPU, else cpu_cpp):

Workloads: ``block_fw`` and ``mlp_train`` over 8n rows, ``gpt2_serve`` (HF GPT-2 inference,
4 prompts) and ``gpt2_train`` (its training step: loss and backward) over n + 1 tokens, for
the 20 values of n in ``SIZES``.

1. ``dynamic=True`` over 20 sizes: how many programs the sdk built (lowering through
   codegen), the compile time of the first call, and that every size matches eager.
2. Steady state at a few of those sizes: the symbolic program beside a static one compiled
   for that size alone (``dynamic=False`` after a Dynamo reset), interleaved in rounds
   (every other round in the reverse order), median ms of calls made with the garbage
   collector off; Inductor with ``dynamic=True`` and eager beside them in the same rounds.

    python benchmarks/dynamic_shapes.py [--plugin cpu_cpp] [--json out.json] [--lengths 12]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from collections.abc import Callable

import torch

import sdk
from sdk.core import pipeline, program
from sdk.core.adapters import torch_private as tp

SIZES = [1, 2, 3, 5, 7, 8, 13, 16, 17, 31, 32, 33, 64, 65, 100, 127, 128, 200, 255, 257]


def block(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = torch.nn.functional.gelu(x * w + 1.0)
    return torch.softmax(h, -1) * h.sum(-1, keepdim=True)


def workloads(dev: str, scale: int) -> dict[str, tuple[Callable, Callable[[int], tuple]]]:
    d = 256 * scale
    w = torch.randn(d, device=dev)
    mlp = torch.nn.Sequential(
        torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d), torch.nn.LayerNorm(d)
    ).to(dev)

    def train_step(x: torch.Tensor) -> torch.Tensor:
        out = mlp(x)
        out.square().mean().backward()
        return out

    out = {
        "block_fw": (block, lambda n: (torch.randn(n * 8, d, device=dev), w)),
        "mlp_train": (train_step, lambda n: (torch.randn(n * 8, d, device=dev),)),
    }
    try:
        import transformers
    except ImportError:
        return out
    cfg = transformers.GPT2Config(
        n_layer=4 if dev == "cuda" else 2,
        n_embd=128 * scale,
        n_head=4,
        vocab_size=8192,
        n_positions=512,
    )
    gpt2 = transformers.GPT2LMHeadModel(cfg).to(dev).eval()

    def serve(ids: torch.Tensor) -> torch.Tensor:  # a serving loop: one prompt length a call
        with torch.no_grad():
            return gpt2(ids).logits

    out["gpt2_serve"] = (serve, lambda n: (torch.randint(0, 8192, (4, n + 1), device=dev),))
    cfg_train = transformers.GPT2Config(
        **{**cfg.to_dict(), "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    )
    gpt2_train = transformers.GPT2LMHeadModel(cfg_train).to(dev)

    def train(ids: torch.Tensor) -> torch.Tensor:  # training on batches of varying length
        loss = gpt2_train(ids, labels=ids).loss
        loss.backward()
        return loss

    out["gpt2_train"] = (train, lambda n: (torch.randint(0, 8192, (4, n + 1), device=dev),))
    return out


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def device_and_host(fn: Callable, args: tuple, dev: str) -> tuple[float | None, float]:
    """Device time per call (the profiler's kernel time over 10 calls; GPU only) and host
    time per call (200 calls issued back to back, then one synchronize)."""
    device = None
    if dev == "cuda":
        from sdk.tools.bench_models import cuda_launches

        got = cuda_launches(lambda: [fn(*args) for _ in range(10)])
        device = got.get("device_ms", 0.0) / 10 if "error" not in got else None
    sync(dev)
    t0 = time.perf_counter()
    for _ in range(200):
        fn(*args)
    host = (time.perf_counter() - t0) / 200 * 1e3
    sync(dev)
    return device, host


def time_call(fn: Callable, args: tuple, dev: str, reps: int) -> float:
    """Median ms of ``reps`` synchronized calls, the garbage collector off while they run
    (as ``timeit`` does: a collection lands on whichever backend's call happens to be
    running)."""
    fn(*args)
    sync(dev)
    samples = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn(*args)
            sync(dev)
            samples.append((time.perf_counter() - t0) * 1e3)
    finally:
        gc.enable()
    return statistics.median(samples)


def steady_row(
    n: int,
    args: tuple,
    fn: Callable,
    dyn: Callable,
    ind: Callable | None,
    plugin: str,
    dev: str,
    rounds: int,
    reps: int,
) -> dict:
    """One steady-state row: the symbolic program beside a static one compiled for ``args``
    (and Inductor's dynamic one, and eager), interleaved in rounds, printed as it is made."""
    static = torch.compile(fn, backend=sdk.backend(plugin), dynamic=False)
    fns = {"sdk_symbolic": dyn, "sdk_static": static, "eager": fn}
    if ind is not None:
        fns["inductor_dynamic"] = ind
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds):  # (every other round in the reverse order: drift hits all)
        for k, f in list(fns.items())[:: 1 if r % 2 == 0 else -1]:
            times[k].append(time_call(f, args, dev, reps))
    med = {k: statistics.median(v) for k, v in times.items()}
    split = {k: device_and_host(fns[k], args, dev) for k in ("sdk_symbolic", "sdk_static")}
    s = {
        "n": n,
        "shape": next(list(t.shape) for t in args if isinstance(t, torch.Tensor)),
        **{k: round(v, 4) for k, v in med.items()},
        "symbolic_over_static": round(med["sdk_symbolic"] / med["sdk_static"], 3),
        "device_ms": {k: v[0] for k, v in split.items()},
        "host_ms": {k: v[1] for k, v in split.items()},
    }
    dv, ho = s["device_ms"], s["host_ms"]
    dev_txt = (
        f"; device {dv['sdk_symbolic']:.4f} vs {dv['sdk_static']:.4f} ms"
        if dv["sdk_symbolic"] is not None
        else ""
    )
    ind_ms = s.get("inductor_dynamic")
    ind_txt = f", inductor dynamic {ind_ms:.4f} ms" if ind_ms is not None else ""
    print(
        f"  {s['shape']!s:>12}: symbolic {s['sdk_symbolic']:.4f} ms, static "
        f"{s['sdk_static']:.4f} ms (x{s['symbolic_over_static']}){ind_txt}, eager "
        f"{s['eager']:.4f} ms{dev_txt}; host {ho['sdk_symbolic']:.4f} vs {ho['sdk_static']:.4f} ms",
        flush=True,
    )
    return s


def steady_sizes(spec: str, lengths: int | None) -> list[int]:
    """The n of the steady-state rows: ``--lengths K`` sizes of SIZES from n = 8 on, else the
    ``--steady`` list."""
    if lengths is not None:
        return [n for n in SIZES if n >= 8][:lengths]
    return [int(n) for n in spec.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=None, help="comma-separated workloads")
    ap.add_argument("--steady", default="8,33,200", help="comma-separated n of the steady rows")
    ap.add_argument(
        "--lengths",
        type=int,
        default=None,
        help="instead of --steady: the first K of SIZES from n = 8 on (issue 48: 12)",
    )
    ap.add_argument(
        "--no-inductor",
        action="store_true",
        help="leave Inductor out of the steady rows (its dynamic compile after each reset "
        "is most of their time; the symbolic/static ratio does not need it)",
    )
    a = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    plugin = a.plugin or ("cuda_triton" if dev == "cuda" else "cpu_cpp")
    scale = 4 if dev == "cuda" else 1
    reps = 50 if dev == "cuda" else 10
    torch.manual_seed(0)
    rows = []
    for name, (fn, make) in workloads(dev, scale).items():
        if a.only and name not in a.only.split(","):
            continue
        tp.reset_dynamo()
        built: list[str] = []
        real = program.build_program

        def counting(session, ctx, gm, specs, real=real, built=built):
            built.append(ctx.graph_name)
            return real(session, ctx, gm, specs)

        program.build_program = counting
        reports: list = []
        token = pipeline.collect_reports(reports)
        try:
            dyn = torch.compile(fn, backend=sdk.backend(plugin), dynamic=True)
            t0 = time.perf_counter()
            worst = 0.0
            for n in SIZES:
                args = make(n)
                got = dyn(*args)
                want = fn(*args)
                worst = max(
                    worst, float((got.detach().float() - want.detach().float()).abs().max())
                )
                sync(dev)
            total_s = time.perf_counter() - t0
        finally:
            program.build_program = real
            pipeline.stop_collecting(token)
        sizes = sorted({g.sizes for g in reports})
        row = {
            "workload": name,
            "plugin": plugin,
            "sizes_seen": len(SIZES),
            "programs_built": len(built),
            "built": built,
            "first_calls_s": round(total_s, 2),
            "max_abs_diff_vs_eager": worst,
            "graph_sizes": sizes,
            "steady": [],
        }
        print(
            f"{name}: {row['programs_built']} programs for {len(SIZES)} sizes "
            f"({row['first_calls_s']} s of first calls), max |diff| {worst:.2e}; {sizes}",
            flush=True,
        )
        # no Dynamo reset between lengths: the symbolic program (and Inductor's dynamic
        # one) are compiled once, as a user's are; each static one adds a cache entry
        ind = None if a.no_inductor else torch.compile(fn, dynamic=True)
        limits = {"recompile_limit": 256, "accumulated_recompile_limit": 4096}
        limits = {k: v for k, v in limits.items() if hasattr(torch._dynamo.config, k)}
        with torch._dynamo.config.patch(**limits):
            for n in steady_sizes(a.steady, a.lengths):
                row["steady"].append(
                    steady_row(n, make(n), fn, dyn, ind, plugin, dev, a.rounds, reps)
                )
        rows.append(row)
        ratios = [s["symbolic_over_static"] for s in row["steady"]]
        if ratios:
            row["geomean_symbolic_over_static"] = round(statistics.geometric_mean(ratios), 3)
            print(
                f"  over {len(ratios)} lengths: symbolic/static geomean "
                f"{row['geomean_symbolic_over_static']}, worst {max(ratios)}"
            )
    if a.json:
        with open(a.json, "w") as f:
            json.dump(
                {
                    "device": torch.cuda.get_device_name() if dev == "cuda" else "cpu",
                    "torch": torch.__version__,
                    "rows": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()

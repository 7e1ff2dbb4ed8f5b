"""The IREE plugin beside eager, Inductor and cpu_cpp on the CPU, in one process (issue 26).

Rows: an MLP, a small convnet and HF GPT-2 (2 layers), each a training step (forward, loss,
backward) and an inference forward, fp32. Backends: eager, Inductor (``torch.compile``'s
default), ``sdk:cpu_cpp``, ``sdk:iree_cpu`` alone, ``sdk:iree_cpu`` chained with cpu_cpp for what
IREE refuses, and iree-turbine's own ``turbine_cpu`` backend where it is installed.

Each backend's first call (the cold compile: fresh caches, a new Dynamo frame) is timed and its
results (output or loss, and every gradient) are checked against eager with Dynamo's accuracy
rule for models (RMSE against an fp64 eager reference at most 2x eager fp32's, plus 1e-4);
then the median of ``--repeat`` steps after ``--warmup``. A backend that fails or mismatches is
reported, never timed.

    python benchmarks/iree_cpu.py --repeat 30 --json benchmarks/iree_cpu_2core.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback

# cold compiles: caches of this run only (set before torch and the sdk read them)
_CACHE = tempfile.mkdtemp(prefix="iree-bench-")
os.environ.setdefault("SDK_CACHE_DIR", os.path.join(_CACHE, "sdk"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_CACHE, "inductor"))

import torch  # noqa: E402

import sdk  # noqa: E402
from sdk.core.adapters import torch_private as tp  # noqa: E402


def mlp():
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 512),
        torch.nn.GELU(),
        torch.nn.LayerNorm(512),
        torch.nn.Linear(512, 512),
        torch.nn.GELU(),
        torch.nn.Linear(512, 10),
    )
    return model, (torch.randn(256, 128), torch.randint(0, 10, (256,)))


def convnet():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1),
        torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(32, 10),
    )
    return model, (torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,)))


def gpt2():
    import transformers

    cfg = transformers.GPT2Config(
        n_layer=2,
        n_embd=128,
        n_head=4,
        vocab_size=1024,
        n_positions=128,
        bos_token_id=0,
        eos_token_id=0,
        attn_pdrop=0.0,
        embd_pdrop=0.0,
        resid_pdrop=0.0,
    )
    model = transformers.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 1024, (4, 64))
    return model, (ids, ids)


MODELS = {"mlp": mlp, "convnet": convnet, "gpt2": gpt2}


def loss_of(model, x, y):
    out = model(x)
    logits = out if isinstance(out, torch.Tensor) else out.logits
    if logits.dim() == 3:  # a language model: predict the next token
        logits, y = logits[:, :-1].flatten(0, 1), y[:, 1:].flatten()
    return torch.nn.functional.cross_entropy(logits, y)


def infer(model, x, y):
    out = model(x)
    return out if isinstance(out, torch.Tensor) else out.logits


def backends(turbine: bool) -> dict:
    out = {
        "eager": None,
        "inductor": "inductor",
        "sdk:cpu_cpp": sdk.backend("cpu_cpp"),
        "sdk:iree_cpu": sdk.backend("iree_cpu"),
        "sdk:iree_cpu+cpu_cpp": sdk.backend("iree_cpu", chain=["cpu_cpp"]),
    }
    if turbine:
        out["turbine_cpu"] = "turbine_cpu"
    return out


def results(model, call, train: bool) -> list[torch.Tensor]:
    """``call()``'s output (or loss) and, training, every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    if not train:
        with torch.no_grad():
            return [call().detach()]
    loss = call()
    loss.backward()
    return [loss.detach()] + [p.grad.detach().clone() for p in model.parameters()]


def rmse(a, b) -> float:
    return float((a.double() - b.double()).pow(2).mean().sqrt())


def check(got, eager, ref64) -> str:
    for i, (g, e, r) in enumerate(zip(got, eager, ref64, strict=True)):
        if not torch.isfinite(g).all():
            return f"MISMATCH result {i}: non-finite"
        if rmse(g, r) > 2 * rmse(e, r) + 1e-4:
            return f"MISMATCH result {i}: rmse {rmse(g, r):.3g} vs eager {rmse(e, r):.3g}"
    return "ok"


def median_ms(step, warmup: int, repeat: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def run_row(name: str, train: bool, args_ns, names: dict) -> list[dict]:
    torch.manual_seed(0)
    base, inputs = MODELS[name]()
    fn = loss_of if train else infer
    if not train:
        base.eval()
    ref64_model = copy.deepcopy(base).double()
    inputs64 = tuple(a.double() if a.is_floating_point() else a for a in inputs)
    ref64 = results(ref64_model, lambda: fn(ref64_model, *inputs64), train)
    eager = results(base, lambda: fn(base, *inputs), train)
    rows = []
    for label, backend in names.items():
        model = copy.deepcopy(base)
        row = {"model": name, "kind": "train" if train else "infer", "backend": label}
        tp.reset_dynamo()
        target = model if backend is None else torch.compile(model, backend=backend)

        def call(m=target):
            return fn(m, *inputs)

        def step(model=model, call=call):
            return results(model, call, train)

        try:
            t = time.perf_counter()
            got = results(model, call, train)
            row["first_call_s"] = round(time.perf_counter() - t, 3)
            row["check"] = check(got, eager, ref64)
            if row["check"] == "ok":
                row["median_ms"] = round(
                    median_ms(step, args_ns.warmup, args_ns.repeat),
                    3,
                )
        except Exception as exc:  # noqa: BLE001 - a failing backend is a row, not the end
            row["check"] = f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            if args_ns.verbose:
                traceback.print_exc()
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def _line(row: dict) -> str:
    ms = f"{row['median_ms']:9.2f}" if "median_ms" in row else " " * 9
    first = f"{row['first_call_s']:8.2f}" if "first_call_s" in row else " " * 8
    return f"{row['model']:8} {row['kind']:5} {row['backend']:22} {first} {ms}  {row['check']}"


def _ratios(rows: list[dict]) -> None:
    by = {(r["model"], r["kind"], r["backend"]): r for r in rows}
    for r in rows:
        for ref in ("eager", "inductor"):
            other = by.get((r["model"], r["kind"], ref))
            if other and "median_ms" in r and "median_ms" in other:
                r[f"vs_{ref}"] = round(other["median_ms"] / r["median_ms"], 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated models (mlp,convnet,gpt2)")
    parser.add_argument("--kinds", default="train,infer")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--json", default=None)
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    try:
        import iree.turbine  # noqa: F401

        turbine = True
    except ImportError:
        turbine = False
    names = backends(turbine)
    models = [m for m in (args.only.split(",") if args.only else MODELS) if m]
    print(
        f"torch {torch.__version__}, sdk {sdk.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads; iree-turbine {'installed' if turbine else 'not installed'}"
    )
    print(f"{'model':8} {'kind':5} {'backend':22} {'first s':>8} {'median ms':>9}  check")
    rows = []
    for name in models:
        for kind in args.kinds.split(","):
            rows += run_row(name, kind == "train", args, names)
    _ratios(rows)
    print("\nsteady state, speed-up over eager / over Inductor (>1: faster):")
    for r in rows:
        if "vs_eager" in r:
            print(
                f"  {r['model']:8} {r['kind']:5} {r['backend']:22} "
                f"{r['vs_eager']:6.2f}x  {r.get('vs_inductor', float('nan')):6.2f}x"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)
    return 1 if any(r["check"].startswith("MISMATCH") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

"""Compiled optimizer steps (issue 47): ``torch.compile(opt.step)`` through the SDK beside
Inductor and eager, in one process, on one model's parameters and gradients.

Each row: an optimizer (and its foreach setting), the median time of one ``opt.step()`` over
``--steps`` timed calls after ``--warmup`` untimed ones, for eager, Inductor and the SDK's
default plugin (cuda_triton on a GPU, else cpu_cpp), and the ratios. The three optimizers of
a row start from the same parameters and gradients; after the timed calls their parameters
are compared (a wrong result is a failed row, not a fast one).

    python benchmarks/optimizer_step.py [--params 4000000] [--steps 30] [--json FILE]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch

import sdk

O = torch.optim
ROWS = {
    "sgd_momentum": (O.SGD, {"lr": 0.01, "momentum": 0.9}),
    "adam": (O.Adam, {"lr": 1e-3}),
    "adamw": (O.AdamW, {"lr": 1e-3, "weight_decay": 0.01}),
    "rmsprop": (O.RMSprop, {"lr": 1e-3}),
}


def _model(n_params: int, device: str) -> torch.nn.Module:
    width = 1024
    layers = max(1, n_params // (width * width))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    model.to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-2
    return model


def _time(step, steps: int, warmup: int, sync) -> float:
    for _ in range(warmup):
        step()
    sync()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def row(name: str, foreach: bool, args: argparse.Namespace, device: str) -> dict:
    cls, kw = ROWS[name]
    base = _model(args.params, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out: dict = {"optimizer": name, "foreach": foreach}
    params = {}
    for who, backend in (
        ("eager", None),
        ("inductor", "inductor"),
        ("sdk", sdk.backend("cuda_triton" if device == "cuda" else "cpu_cpp")),
    ):
        model = copy.deepcopy(base)
        for p, q in zip(model.parameters(), base.parameters()):
            p.grad = q.grad.clone()
        opt = cls(model.parameters(), foreach=foreach, **kw)
        step = opt.step if backend is None else torch.compile(opt.step, backend=backend)
        torch.compiler.reset()
        out[f"{who}_ms"] = round(_time(step, args.steps, args.warmup, sync), 3)
        params[who] = [p.detach() for p in model.parameters()]
    out["correct"] = all(
        torch.allclose(a, b, rtol=1e-4, atol=1e-5)
        for who in ("inductor", "sdk")
        for a, b in zip(params["eager"], params[who])
    )
    out["sdk/inductor"] = round(out["sdk_ms"] / out["inductor_ms"], 3)
    out["sdk/eager"] = round(out["sdk_ms"] / out["eager_ms"], 3)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=4_000_000)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = [row(n, fe, args, device) for n in ROWS for fe in (False, True)]
    cols = ["optimizer", "foreach", "eager_ms", "inductor_ms", "sdk_ms", "sdk/inductor"]
    print(f"{device}, torch {torch.__version__}, {args.params:,} parameters (approx.)")
    print("  ".join(f"{c:>12}" for c in [*cols, "sdk/eager", "correct"]))
    for r in rows:
        print("  ".join(f"{r[c]!s:>12}" for c in [*cols, "sdk/eager", "correct"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""One Adam step (``foreach=True``, torch's multi-tensor path) over the parameters of an MLP of
about 10M parameters (fp32, CPU): time per step of eager, Inductor and the sdk (sdk:cpu_cpp),
``opt.step`` compiled alone, in one process.

Each backend has its own copy of the model and its own optimizer; the gradients are set
once (random) and every step reads them. After ``--warmup`` steps each (the compiles), the
backends take turns: ``--rounds`` rounds, each timing ``--steps`` steps of every backend in
turn; then every model's parameters are checked against eager's. Printed: the median and the fastest round per backend in milliseconds per step, with
every round's (on a shared machine the fastest is the least disturbed).
``--single`` adds the sdk on single-tensor Adam (``foreach=False``) for reference.

    python benchmarks/foreach_adam.py [--width 1024] [--layers 10] [--rounds 9] [--steps 5]
        [--threads N] [--single]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from torch import nn


def mlp(width: int, layers: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Linear(width, width) for _ in range(layers)))


def optimizer_step(model: nn.Module, backend: str, foreach: bool):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=foreach)
    torch.manual_seed(1)  # the same gradients for every backend
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    if backend == "eager":
        return opt.step
    return torch.compile(opt.step, backend="inductor" if backend == "inductor" else "sdk:cpu_cpp")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--single", action="store_true")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    base = mlp(args.width, args.layers)
    n = sum(p.numel() for p in base.parameters())
    cases = {b: (b, True) for b in ("eager", "inductor", "sdk")}
    if args.single:
        cases["sdk single-tensor"] = ("sdk", False)
    models = {name: copy.deepcopy(base) for name in cases}
    steps = {name: optimizer_step(models[name], *cases[name]) for name in cases}
    for step in steps.values():
        for _ in range(args.warmup):
            step()
    rounds: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            rounds[name].append((time.perf_counter() - t0) / args.steps * 1e3)
    print(
        f"Adam step, {n / 1e6:.1f}M parameters in {2 * args.layers} tensors, "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}"
    )
    result = {}
    for name, times in rounds.items():
        med, best = statistics.median(times), min(times)
        result[name] = {"median": round(med, 3), "min": round(best, 3)}
        print(
            f"  {name:18} median {med:8.2f}  min {best:8.2f} ms/step   "
            f"rounds: {' '.join(f'{t:.1f}' for t in times)}"
        )
    # every model took the same steps from the same start: the same parameters
    for name, model in models.items():
        for p, q in zip(model.parameters(), models["eager"].parameters(), strict=True):
            torch.testing.assert_close(p, q, msg=lambda m, name=name: f"{name} vs eager: {m}")
    print("parameters of every backend match eager's after the same steps")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

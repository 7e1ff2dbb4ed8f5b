"""Per-call time of small graphs, where the host decides: the native runner against the
Python program it replaces, beside Inductor and eager, in one process.

Rows: an 8-layer, 32-wide MLP at batch 1 (inference), the same MLP's training step, and a
small convnet's inference. Each backend is warmed up, then timed in 5 interleaved rounds of
``--calls`` calls (synchronized on a GPU); medians in microseconds per call.

    python benchmarks/runner_host.py [--device cpu|cuda] [--calls 500]
"""

from __future__ import annotations

import argparse
import copy as _copy
import statistics
import time

import torch

import sdk


def _mlp(device: torch.device) -> tuple[torch.nn.Module, tuple, bool]:
    torch.manual_seed(0)
    layers = [torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU()) for _ in range(8)]
    return torch.nn.Sequential(*layers).to(device), (torch.randn(1, 32, device=device),), False


def _mlp_train(device: torch.device) -> tuple[torch.nn.Module, tuple, bool]:
    model, args, _ = _mlp(device)
    return model, args, True


def _convnet(device: torch.device) -> tuple[torch.nn.Module, tuple, bool]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, padding=1),
        torch.nn.GELU(),
        torch.nn.AdaptiveAvgPool2d(1),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 4),
    ).to(device)
    return model, (torch.randn(1, 3, 16, 16, device=device),), False


def copy_module(model: torch.nn.Module) -> torch.nn.Module:
    return _copy.deepcopy(model)


ROWS = {"mlp_bs1": _mlp, "mlp_bs1_train": _mlp_train, "convnet_bs1": _convnet}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=500)
    args = ap.parse_args()
    device = torch.device(args.device)
    plugin = "cuda_triton" if device.type == "cuda" else "cpu_cpp"
    backends = {
        "eager": None,
        "inductor": "inductor",
        "sdk python": sdk.backend(plugin, runner="python"),
        "sdk native": sdk.backend(plugin, runner="native"),
    }
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    print(f"{device}, torch {torch.__version__}; microseconds per call, median of 5 rounds")
    print(f"{'row':16s}" + "".join(f"{b:>13s}" for b in backends) + "   native/python  native/ind")
    for name, build in ROWS.items():
        model, inputs, train = build(device)

        def step(f, inputs=inputs, train=train):
            if train:
                f.zero_grad(set_to_none=True)
                f(*inputs).sum().backward()
            else:
                with torch.no_grad():
                    f(*inputs)

        # one copy of the model per backend: Dynamo's guards tell the copies apart, so each
        # call runs its own backend's graphs (the entries share forward's code object)
        torch._dynamo.reset()
        fns = {}
        for label, backend in backends.items():
            copy = copy_module(model)
            fns[label] = copy if backend is None else torch.compile(copy, backend=backend)
            for _ in range(20):
                step(fns[label])
            sync()
        times: dict[str, list[float]] = {label: [] for label in fns}
        for _ in range(5):
            for label, f in fns.items():
                sync()
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    step(f)
                sync()
                times[label].append((time.perf_counter() - t0) / args.calls * 1e6)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(
            f"{name:16s}"
            + "".join(f"{med[b]:13.1f}" for b in backends)
            + f"   {med['sdk native'] / med['sdk python']:13.2f}"
            + f"  {med['sdk native'] / med['inductor']:10.2f}"
        )


if __name__ == "__main__":
    main()

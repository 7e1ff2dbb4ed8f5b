"""One process of the reproducibility tests: train a small model for a few steps, compiled
with an sdk plugin, and save every result (losses, logits, gradients, parameters, buffers)
for another process to compare bit for bit.

    python -m tests.repro_worker --plugin cpu_cpp --model gpt2 --device cpu \
        --dtype float32 --out results.pt [--deterministic] [--steps 2]

The caches are whatever the environment says (``SDK_CACHE_DIR``, ``SDK_GRAPH_CACHE``,
``TORCHINDUCTOR_CACHE_DIR``): the tests run one process cold, one warm, one with the cache off.
Each step also runs twice from the same state in this process (``--twice``) where asked.
"""

from __future__ import annotations

import argparse

import torch

from tests import models


def _gpt2(dev: str, dtype: torch.dtype) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    model = models.gpt2(use_cache=False).to(device=dev, dtype=dtype).train()
    # repeated tokens: several rows of the embedding's gradient sum many contributions
    ids = torch.randint(0, 32, (2, 48)).to(dev)
    return model, {"input_ids": ids, "labels": ids}


class ConvNet(torch.nn.Module):
    """Convolutions, BatchNorm in training (running statistics written) and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(3, 16, 3, padding=1),
            torch.nn.BatchNorm2d(16),
            torch.nn.ReLU(),
            torch.nn.Conv2d(16, 32, 3, stride=2, padding=1),
            torch.nn.BatchNorm2d(32),
            torch.nn.ReLU(),
        )
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        h = self.body(x).mean(dim=(2, 3))
        return torch.nn.functional.cross_entropy(self.head(h), labels)


def _convnet(dev: str, dtype: torch.dtype) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    model = ConvNet().to(device=dev, dtype=dtype).train()
    x = torch.randn(4, 3, 16, 16).to(device=dev, dtype=dtype)
    return model, {"x": x, "labels": torch.randint(0, 10, (4,)).to(dev)}


MODELS = {"gpt2": _gpt2, "convnet": _convnet}


def _loss(out: object) -> torch.Tensor:
    return out.loss if hasattr(out, "loss") else out  # type: ignore[attr-defined]


def run(
    plugin: str, model_name: str, dev: str, dtype: torch.dtype, steps: int, twice: bool
) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model, inputs = MODELS[model_name](dev, dtype)
    compiled = torch.compile(model, backend=f"sdk:{plugin}", options={"fallback": False})
    results: dict[str, torch.Tensor] = {}
    for step in range(steps):
        state = {k: v.clone() for k, v in model.state_dict().items()}
        grads = None
        for attempt in range(2 if twice else 1):
            if attempt:  # the same step again from the same state: the same bits
                model.load_state_dict(state)
            model.zero_grad(set_to_none=True)
            loss = _loss(compiled(**inputs))
            loss.backward()
            now = [p.grad.clone() for p in model.parameters()]
            for i, (a, b) in enumerate(zip(grads or [], now)):
                if not torch.equal(a, b):
                    diff = (a.float() - b.float()).abs().max().item()
                    raise SystemExit(
                        f"step {step}: gradient {i} differs between two runs in one "
                        f"process (max abs difference {diff:g})"
                    )
            grads = now
        results[f"loss{step}"] = loss.detach().clone()
        for name, p in model.named_parameters():
            results[f"grad{step}.{name}"] = p.grad.detach().clone()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    for name, t in model.state_dict().items():
        results[f"state.{name}"] = t.detach().clone()
    return {k: v.cpu() for k, v in results.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--model", choices=sorted(MODELS), required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--twice", action="store_true", help="run each step twice in-process")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--cudnn-deterministic", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.deterministic:
        torch.use_deterministic_algorithms(True)
    if args.cudnn_deterministic:
        torch.backends.cudnn.deterministic = True
    results = run(
        args.plugin, args.model, args.device, getattr(torch, args.dtype), args.steps, args.twice
    )
    torch.save(results, args.out)


if __name__ == "__main__":
    main()
    # done (the results are saved): exit without the interpreter's last collections over all
    # that torch and transformers made (1-1.5 s of each process); exit handlers still run
    import gc

    gc.freeze()

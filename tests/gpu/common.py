"""Helpers of the GPU suite: models from configs (no downloads) and the accuracy rule.

The rule is Dynamo's benchmark rule for low precision: compare both the compiled
result and eager in the model's dtype against an fp64 eager reference, and pass
when the compiled error (RMSE) is at most ``multiplier`` times eager's, plus a small
floor. fp32 results are also compared directly with Inductor's training tolerances.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch


def rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).pow(2).mean().sqrt())


def rmse_ok(
    actual: torch.Tensor,
    eager: torch.Tensor,
    ref64: torch.Tensor,
    *,
    multiplier: float = 2.0,
    floor: float = 1e-4,
) -> tuple[bool, str]:
    if not torch.isfinite(actual).all():
        return False, "non-finite values"
    got, base = rmse(actual, ref64), rmse(eager, ref64)
    return got <= multiplier * base + floor, f"rmse {got:.3g} vs eager {base:.3g}"


def train_results(
    model: torch.nn.Module, step: Callable[[torch.nn.Module], torch.Tensor]
) -> list[torch.Tensor]:
    """Loss and every parameter's gradient of one step (grads cleared first)."""
    model.zero_grad(set_to_none=True)
    loss = step(model)
    loss.backward()
    return [loss.detach()] + [
        p.grad.detach() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()
    ]


def check_training(
    model: torch.nn.Module,
    step: Callable[[torch.nn.Module], torch.Tensor],
    backend: Any = "sdk:cuda_triton",
    **compile_kw: Any,
) -> list[str]:
    """Compiled training step vs eager (same dtype) and an fp64 eager reference.

    Returns the failures (empty when every result passes the rule).
    """
    ref_model = copy.deepcopy(model).double()
    eager = train_results(model, step)
    ref = train_results(ref_model, step)
    compiled = torch.compile(model, backend=backend, **compile_kw)
    got = train_results(compiled, step)
    got = train_results(compiled, step)  # the second call runs the cached graphs
    names = ["loss"] + [n for n, _ in model.named_parameters()]
    bad = []
    for name, a, e, r in zip(names, got, eager, ref):
        ok, why = rmse_ok(a, e, r)
        if not ok:
            bad.append(f"{name}: {why}")
    return bad


def check_inference(
    model: torch.nn.Module,
    backend: Any,
    make_input: Callable[[], torch.Tensor],
    calls: int = 2,
) -> None:
    """``model`` (in eval mode) compiled with ``backend``: on ``calls`` fresh inputs its
    output passes the rule against eager and an fp64 copy, else AssertionError."""
    ref = copy.deepcopy(model).double()
    step = torch.compile(model, backend=backend)
    with torch.no_grad():
        for _ in range(calls):
            x = make_input()
            ok, why = rmse_ok(step(x).float(), model(x).float(), ref(x.double()))
            assert ok, why

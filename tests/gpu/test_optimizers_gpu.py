"""Every torch.optim optimizer compiled with sdk:cuda_triton on CUDA tensors matches eager
(issue 47): the CPU file's cases (``tests/e2e/test_optimizers.py``) over the whole cross
product: single-tensor and foreach, alone and in a compiled training step, plain,
``capturable=True`` (where the optimizer has it) and ``lr`` as a tensor stepped by a
scheduler; ``fused=True`` where torch has it on CUDA; and the compiles a scheduler causes,
counted beside Inductor's.
"""

from __future__ import annotations

import pytest
import torch

import sdk
from tests.optimizers import CAPTURABLE, OPTIMIZERS, WHERE, counting, lambda_lr, run_both, step_lr

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

BACKEND = "sdk:cuda_triton"
VARIANTS = ("plain", "capturable", "tensor_lr")
#: torch's fused CUDA implementations
FUSED = ("sgd", "sgd_momentum", "adam", "adam_amsgrad", "adamw")


def _cases():
    for name in OPTIMIZERS:
        for variant in VARIANTS:
            if variant == "capturable" and name not in CAPTURABLE:
                continue
            for foreach in (False, True):
                for where in WHERE:
                    yield pytest.param(
                        name, variant, foreach, where, id=f"{name}-{variant}-{foreach}-{where}"
                    )


def _variant(variant: str, name: str) -> dict:
    if variant == "capturable":
        return {"capturable": True}
    if variant == "tensor_lr":
        # a tensor lr with foreach needs capturable where the optimizer has it (Adam's rule)
        cap = {"capturable": True} if name in CAPTURABLE else {}
        return {"tensor_lr": True, "scheduler": lambda_lr, "steps": 4, **cap}
    return {}


@pytest.mark.parametrize(("name", "variant", "foreach", "where"), list(_cases()))
def test_optimizer_matches_eager(name, variant, foreach, where):
    out = run_both(name, BACKEND, "cuda", where=where, foreach=foreach, **_variant(variant, name))
    assert out.counts[0] > 0, "nothing compiled at the first step"
    assert not any(out.counts[2:]), out.counts  # a tensor lr: no compile after step 2 either


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", FUSED)
def test_fused_optimizer_matches_eager(name, where):
    out = run_both(name, BACKEND, "cuda", where=where, fused=True)
    assert any("fused" in b.reason for b in out.breaks), [str(b) for b in out.breaks]


@pytest.mark.parametrize("tensor_lr", [False, True], ids=["float_lr", "tensor_lr"])
@pytest.mark.parametrize("name", ["sgd_momentum", "adam"])
def test_scheduler_compiles_no_more_than_inductor(name, tensor_lr):
    """With ``lr`` stepped by a scheduler, the SDK is never asked to compile more often than
    Inductor: at most once per value of a float lr (fewer where Dynamo passes the float in
    and the program reads it: Inductor guards on its value), never after the second step
    with a tensor lr. ``run_both`` compares every step with eager, so a stale lr fails."""
    from torch._inductor.compile_fx import compile_fx

    asked = {"sdk": 0, "inductor": 0}

    kw = {"scheduler": step_lr, "steps": 4, "tensor_lr": tensor_lr, "foreach": True}
    if tensor_lr and name == "adam":
        kw["capturable"] = True
    out = run_both(name, counting(asked, "sdk", sdk.backend("cuda_triton")), "cuda", **kw)
    if tensor_lr:
        assert out.counts[2:] == [0, 0], out.counts
    sdk.reset()
    run_both(name, counting(asked, "inductor", compile_fx), "cuda", **kw)
    assert 0 < asked["sdk"] <= asked["inductor"], asked

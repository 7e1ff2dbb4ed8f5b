"""Every mode on the GPU (issue 24): each model of the matrix, trained and run for inference,
in default, reduce-overhead and dynamic modes, fp32 and bf16, compared with eager.

The rule is Dynamo's for models (``tests.gpu.common.rmse_ok``): the compiled result's RMSE
against an fp64 eager reference at most twice eager's own, plus a small floor. Each case runs
several steps on fresh inputs (reduce-overhead records at the second or third call of a graph and
replays after; dynamic mode sees a second batch size and sequence length), and every step is
checked, not just the last.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch

from tests import models
from tests.gpu.common import rmse_ok

MODES = {
    "default": {},
    "reduce-overhead": {"mode": "reduce-overhead"},
    "dynamic": {"dynamic": True},
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
STEPS = 5


class ConvNet(torch.nn.Module):
    """Convolutions with batch norm (training statistics in training mode), a residual,
    pooling and a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(32),
            torch.nn.ReLU(),
        )
        self.block = torch.nn.Sequential(
            torch.nn.Conv2d(32, 32, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(32),
            torch.nn.ReLU(),
            torch.nn.Conv2d(32, 32, 3, padding=1, bias=False),
            torch.nn.BatchNorm2d(32),
        )
        self.head = torch.nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        x = torch.relu(x + self.block(x))
        return self.head(x.mean((2, 3)))


def _mlp() -> tuple[torch.nn.Module, Callable[[int], tuple]]:
    model = models.mlp(64, 256, 64, layernorm=True)
    return model, lambda n: (torch.randn(8 * n, 64, device="cuda"),)


def _convnet() -> tuple[torch.nn.Module, Callable[[int], tuple]]:
    return ConvNet(), lambda n: (torch.randn(2 * n, 3, 16, 16, device="cuda"),)


def _gpt2() -> tuple[torch.nn.Module, Callable[[int], tuple]]:
    pytest.importorskip("transformers")
    model = models.gpt2(
        n_embd=128, n_positions=128, vocab_size=1024, bos_token_id=0, eos_token_id=0
    )
    return model, lambda n: (torch.randint(0, 1024, (2, 32 * n), device="cuda"),)


def _vit() -> tuple[torch.nn.Module, Callable[[int], tuple]]:
    timm = pytest.importorskip("timm")
    model = timm.create_model("vit_tiny_patch16_224", img_size=64, num_classes=10)
    return model, lambda n: (torch.randn(2 * n, 3, 64, 64, device="cuda"),)


MODELS = {"mlp": _mlp, "convnet": _convnet, "gpt2": _gpt2, "vit": _vit}


def _results(
    model: torch.nn.Module, fn: Callable, inputs: tuple, train: bool
) -> list[torch.Tensor]:
    if not train:
        with torch.no_grad():
            out = fn(*inputs)
        out = out.logits if hasattr(out, "logits") else out
        return [out.detach().clone()]
    model.zero_grad(set_to_none=True)
    loss = _loss_of(fn, inputs)
    loss.backward()
    return [loss.detach().clone()] + [
        p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p)
        for p in model.parameters()
    ]


def _loss_of(fn: Callable, inputs: tuple) -> torch.Tensor:
    out = fn(*inputs)
    out = out.logits if hasattr(out, "logits") else out
    return out.float().square().mean()


@pytest.fixture(params=["nondeterministic-ok", "deterministic"])
def determinism(request):
    """Each case without and with ``torch.use_deterministic_algorithms(True)`` (inference in
    the default mode only: its library calls are the training graphs' forward ones)."""
    on = request.param == "deterministic"
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(on)
    try:
        yield on
    finally:
        torch.use_deterministic_algorithms(was)


@pytest.mark.parametrize("train", [True, False], ids=["train", "infer"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", MODELS)
def test_mode_matrix(name: str, mode: str, dtype: str, train: bool, determinism: bool) -> None:
    if determinism and not train and mode != "default":
        pytest.skip("inference with the flag runs in the default mode")
    torch.manual_seed(0)
    model, make_inputs = MODELS[name]()
    model = model.cuda().to(DTYPES[dtype]).train(train)
    ref = copy.deepcopy(model).double()
    compiled = torch.compile(model, backend="sdk:cuda_triton", **MODES[mode])
    failures = []
    for step in range(STEPS):
        size = 2 if mode == "dynamic" and step >= 2 else 1
        inputs = make_inputs(size)
        if inputs[0].is_floating_point():
            inputs = (inputs[0].to(DTYPES[dtype]),)
        ref_inputs = tuple(x.double() if x.is_floating_point() else x for x in inputs)
        # eager and compiled start from the same running statistics (batch norm's move)
        state = copy.deepcopy(model.state_dict())
        eager = _results(model, model, inputs, train)
        eager_buffers = [b.detach().clone() for b in model.buffers()]
        model.load_state_dict(state)
        got = _results(model, compiled, inputs, train)
        want = _results(ref, ref, ref_inputs, train)
        ref.load_state_dict(model.state_dict())  # the fp64 model's own stats moved too
        # running statistics, written by the compiled step's kernels: as eager's step moved
        # them (once per step in every mode: no warm-up or recording may write them again)
        for k, (b, e) in enumerate(zip(model.buffers(), eager_buffers)):
            if not b.is_floating_point():
                if not torch.equal(b, e):
                    failures.append(f"step {step} buffer {k}: {b.tolist()} != {e.tolist()}")
                continue
            tol = 1e-4 if b.dtype == torch.float32 else 2e-2
            if not torch.allclose(b.float(), e.float(), rtol=tol, atol=tol):
                err = (b.float() - e.float()).abs().max().item()
                failures.append(f"step {step} buffer {k}: max error {err:.3g}")
        for k, (a, e, r) in enumerate(zip(got, eager, want)):
            ok, why = rmse_ok(a.float(), e.float(), r)
            if not ok:
                failures.append(f"step {step} result {k}: {why}")
    assert not failures, "\n".join(failures[:20])

"""Cross-entropy over a vocabulary, the way language-model heads run it: log-softmax rows
reduced in one pass (online softmax in cuda_triton's looped kernels), the target's
log-probability recomputed from the logits and the row statistics instead of storing the
(rows, vocab) log-probabilities, and the backward's zeros never stored.

Compared with eager on fresh random inputs, forward and gradients, fp32 and bf16; what the
compiler did is read from ``sdk.explain``.
"""

from __future__ import annotations

import re

import pytest
import torch

import sdk
from tests.plugins_under_test import PLUGINS, device_of

VOCAB = 5000  # long enough for cuda_triton's looped (not persistent) reductions


def _head(dev: str, dtype: torch.dtype) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(32, VOCAB).to(device=dev, dtype=dtype)


def _loss(head: torch.nn.Linear):
    def f(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(head(x).float(), t)

    return f


def _inputs(dev: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(6, 32, device=dev, dtype=dtype, requires_grad=True)
    t = torch.randint(0, VOCAB, (6,), device=dev)
    t[2] = -100  # ignore_index
    return x, t


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cross_entropy_training_matches_eager(plugin, dtype):
    dev = device_of(plugin)
    head = _head(dev, dtype)
    f = _loss(head)
    compiled = torch.compile(f, backend=sdk.backend(plugin, fallback=False))
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    params = [head.weight, head.bias]
    for _ in range(2):  # fresh inputs on each call
        x, t = _inputs(dev, dtype)
        want = f(x, t)
        got = compiled(x, t)
        torch.testing.assert_close(got, want, **tol)
        for g, w in zip(
            torch.autograd.grad(got, [x, *params]), torch.autograd.grad(want, [x, *params])
        ):
            torch.testing.assert_close(g, w, **tol)


def _row_stores(source: str) -> list[str]:
    """The kernel's stages that store inside a loop over a whole vocabulary row (both
    renderers head their kernels with one comment line per stage)."""
    return [
        ln
        for ln in source.splitlines()
        if re.match(r"\s*(#|//) stage \d+:", ln) and f"< {VOCAB}" in ln and "store" in ln
    ]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_log_probabilities_and_zeros_are_not_stored(plugin):
    dev = device_of(plugin)
    x, t = _inputs(dev, torch.float32)
    report = sdk.explain(
        _loss(_head(dev, torch.float32)), x, t, backend=f"sdk:{plugin}", fallback=False
    )
    (fw,) = [g for g in report.graphs if g.kind == "forward"]
    (bw,) = [g for g in report.graphs if g.kind == "backward"]
    # forward: the row statistics (max, log-sum-exp) and the loss; the target's
    # log-probability is recomputed from the logits, no (rows, vocab) buffer is stored
    assert not [ln for k in fw.kernels for ln in _row_stores(k.source)], [
        k.source for k in fw.kernels
    ]
    # backward: nll's zeros are recomputed where the scatter writes into them
    assert not [k for k in bw.kernels if k.ops == ("aten.full_like.default",)], [
        k.ops for k in bw.kernels
    ]
    assert any("aten.full_like.default" in k.ops for k in bw.kernels)
    # and so is the scatter into them (one value per row): two kernels, the rows' sums of
    # the recomputed scatter, then the logits' gradient with the bias gradient
    assert len(bw.kernels) == 2, [k.ops for k in bw.kernels]
    if plugin == "cuda_triton":
        (stats,) = [k for k in fw.kernels if "aten.amax.default" in k.ops]
        assert stats.source.count("for roffset") == 1, stats.source  # one pass

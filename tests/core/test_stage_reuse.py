"""Capability.STORE_THEN_LOAD: an expensive value is stored once and read back."""

from __future__ import annotations

import torch

import sdk
from sdk import ir


def test_cpu_softmax_computes_exp_once_per_element():
    x = torch.randn(32, 300)
    report = sdk.explain(lambda x: torch.softmax(x, -1), x, backend="sdk:cpu_cpp")
    (kernel,) = report.kernels
    assert kernel.source.count("expf(") == 1, kernel.source
    torch.testing.assert_close(
        torch.compile(lambda x: torch.softmax(x, -1), backend="sdk:cpu_cpp")(x),
        torch.softmax(x, -1),
    )


def test_low_precision_outputs_are_not_read_back():
    """A bf16 output would round the stored value: the kernel recomputes it instead."""
    x = torch.randn(32, 300, dtype=torch.bfloat16)
    report = sdk.explain(lambda x: torch.softmax(x, -1), x, backend="sdk:cpu_cpp")
    assert report.kernels[0].source.count("expf(") == 2, report.kernels[0].source


def _normalized(x: torch.Tensor) -> torch.Tensor:
    root = torch.sqrt(x.abs())
    return root / root.sum(-1, keepdim=True)


def test_sqrt_is_recomputed_not_stored_and_read_back():
    """sqrt is a hardware instruction (sdk.ir.TRANSCENDENTAL leaves it out): the second stage
    recomputes it from x rather than the first stage storing it into the output to be
    loaded back, as softmax's exp is (the scheduler's store-then-load and its inlining read
    that one table)."""
    assert "sqrt" not in ir.TRANSCENDENTAL and "rsqrt" not in ir.TRANSCENDENTAL
    assert "exp" in ir.TRANSCENDENTAL
    x = torch.randn(32, 300)
    report = sdk.explain(_normalized, x, backend="sdk:cpu_cpp")
    (kernel,) = report.kernels
    assert kernel.source.count("sqrtf(") == 2, kernel.source
    torch.testing.assert_close(torch.compile(_normalized, backend="sdk:cpu_cpp")(x), _normalized(x))

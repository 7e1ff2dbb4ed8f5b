"""Capability.STORE_THEN_LOAD: an expensive value is stored once and read back."""

from __future__ import annotations

import torch

import sdk


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

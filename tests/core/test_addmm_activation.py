"""ReLU after a matrix product runs in the product's library call (``aten._addmm_activation``:
cuBLASLt applies it in the epilogue), not as a kernel that reads the product back."""

from __future__ import annotations

import copy

import pytest
import torch

import sdk
from tests import models
from tests.gpu.common import check_inference, rmse_ok
from tests.plugins_under_test import PLUGINS, device_of

pytestmark = pytest.mark.parametrize("plugin", PLUGINS)


def _ops(reports: list) -> tuple[list[str], list[str]]:
    externs = [e.op for r in reports for e in r.externs]
    in_kernels = [op for r in reports for k in r.kernels for op in k.ops]
    return externs, in_kernels


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch", [1, 24])
def test_relu_runs_in_the_product(plugin, dtype, batch, graph_reports):
    """Inference: outputs within Dynamo's rule of eager, both ReLUs inside library calls."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    model = models.mlp(32, 64, 64, 8, act=torch.nn.ReLU).to(dev, dtype).eval()
    check_inference(
        model, sdk.backend(plugin), lambda: torch.randn(batch, 32, device=dev, dtype=dtype)
    )
    externs, in_kernels = _ops(graph_reports)
    assert externs.count("aten._addmm_activation.default") == 2, externs
    assert "aten.relu.default" not in in_kernels


def test_training_step_matches_eager(plugin, graph_reports):
    """Forward and every gradient: the backward reads the fused call's output (ReLU's
    result) for ReLU's derivative, as it read the ReLU kernel's."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    model = models.mlp(32, 64, 64, 8, act=torch.nn.ReLU).to(dev)
    eager, ref = copy.deepcopy(model), copy.deepcopy(model).double()
    step = torch.compile(model, backend=sdk.backend(plugin))
    x = torch.randn(24, 32, device=dev)
    for fn, inp in ((step, x), (eager, x), (ref, x.double())):
        fn(inp).square().mean().backward()
    for (name, p), q, r in zip(model.named_parameters(), eager.parameters(), ref.parameters()):
        ok, why = rmse_ok(p.grad, q.grad, r.grad)
        assert ok, f"{name}: {why}"
    externs, _ = _ops(graph_reports)
    assert externs.count("aten._addmm_activation.default") == 2, externs


def test_a_product_read_elsewhere_keeps_its_relu_in_a_kernel(plugin, graph_reports):
    """The product is read by the ReLU and by another op: ReLU stays a kernel, and the
    product stays as it was for the other reader."""
    dev = device_of(plugin)
    lin = torch.nn.Linear(16, 16).to(dev)

    def fn(x):
        h = lin(x)
        return torch.relu(h) + h * 2

    x = torch.randn(5, 16, device=dev)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fn, backend=sdk.backend(plugin))(x), fn(x))
    externs, in_kernels = _ops(graph_reports)
    assert "aten._addmm_activation.default" not in externs
    assert "aten.relu.default" in in_kernels

"""cuda_triton computes a convolution's bias gradient as a generated sum (Inductor's GPU
decomposition): gradients as eager's, the library call computing only the input and weight
gradients."""

from __future__ import annotations

import copy

import pytest
import torch

import sdk
from sdk.plugins.cuda_triton import conv_backward
from tests.gpu.common import rmse_ok
from tests.plugins_under_test import _triton_available, device_of

pytestmark = pytest.mark.skipif(not _triton_available(), reason="Triton missing")


@pytest.mark.parametrize(
    "conv",
    [
        lambda: torch.nn.Conv2d(8, 8, 7, padding=3, groups=8),  # depthwise (ConvNeXt)
        lambda: torch.nn.Conv2d(8, 6, 3, stride=2),
        lambda: torch.nn.ConvTranspose2d(8, 4, 3, stride=2),
        lambda: torch.nn.Conv1d(8, 4, 3, padding=1),
    ],
    ids=["depthwise", "strided", "transposed", "1d"],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_bias_gradient_is_a_generated_sum(conv, dtype, graph_reports):
    dev = device_of("cuda_triton")
    torch.manual_seed(0)
    layer = conv()
    shape = (2, 8, 9) if isinstance(layer, torch.nn.Conv1d) else (2, 8, 9, 9)
    model = torch.nn.Sequential(layer, torch.nn.GELU()).to(dev, dtype)
    eager, ref = copy.deepcopy(model), copy.deepcopy(model).double()
    x = torch.randn(*shape, device=dev, dtype=dtype)
    step = torch.compile(model, backend=sdk.backend("cuda_triton"))
    for fn, inp in ((step, x), (eager, x), (ref, x.double())):
        fn(inp).float().square().sum().backward()
    for (name, p), q, r in zip(model.named_parameters(), eager.parameters(), ref.parameters()):
        if dtype == torch.float32:
            ok, why = rmse_ok(p.grad, q.grad, r.grad)
            assert ok, f"{name}: {why}"
        else:  # a few bf16 sums of ~16: eager's and ours land a rounding step (0.125) apart
            err = (p.grad.double() - r.grad).abs().max()
            assert err <= 2e-2 * r.grad.abs().max(), f"{name}: max error {err:.3g}"
    backward = [r for r in graph_reports if r.kind == "backward"]
    assert any("aten.sum.dim_IntList" in k.ops for r in backward for k in r.kernels)
    assert [e.op for r in backward for e in r.externs] == ["aten.convolution_backward.default"]


def test_no_bias_gradient_asked_leaves_the_call_alone():
    g, x, w = torch.randn(2, 4, 5, 5), torch.randn(2, 3, 7, 7), torch.randn(4, 3, 3, 3)
    args = (g, x, w, [4], [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    assert conv_backward.convolution_backward(*args, [True, True, False]) is NotImplemented
    got = conv_backward.convolution_backward(*args, [True, True, True])
    want = torch.ops.aten.convolution_backward(*args, [True, True, True])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)

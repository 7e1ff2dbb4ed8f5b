"""A product with a bias read only by pointwise ops: with ``Preferences.mm_bias_in_kernel``
(cuda_triton) the library call is ``mm`` and the bias is added in the generated kernel of
those ops (Inductor's rule on GPUs); otherwise, and where something else reads the product,
it stays one ``addmm``."""

from __future__ import annotations

import copy

import pytest
import torch

import sdk
from tests.gpu.common import check_inference, rmse_ok
from tests.plugins_under_test import PLUGINS, device_of

pytestmark = pytest.mark.parametrize("plugin", PLUGINS)


class _Block(torch.nn.Module):
    """Linear -> GELU -> Linear -> + residual -> LayerNorm -> Linear (the last product's
    result leaves the graph, the second's is read by the residual add, the first's by GELU)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)
        self.norm, self.head = torch.nn.LayerNorm(32), torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.down(torch.nn.functional.gelu(self.up(x)))
        return self.head(self.norm(h))


def _externs(reports: list) -> list[str]:
    return [e.op for r in reports if r.kind != "backward" for e in r.externs]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_inference_splits_the_products_pointwise_ops_read(plugin, dtype, graph_reports):
    """Within Dynamo's rule of an fp64 copy; the two products that pointwise ops read are
    ``mm`` calls on cuda_triton, the one that leaves the graph stays ``addmm``."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    model = _Block().to(dev, dtype).eval()
    check_inference(
        model, sdk.backend(plugin), lambda: torch.randn(4, 6, 32, device=dev, dtype=dtype)
    )
    externs = _externs(graph_reports)
    if plugin == "cuda_triton":
        assert sorted(externs) == ["aten.addmm.default"] + ["aten.mm.default"] * 2, externs
    else:
        assert externs == ["aten.addmm.default"] * 3, externs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_training_step_matches_eager(plugin, dtype):
    """Forward and every gradient within Dynamo's rule of an fp64 copy. (A product the
    backward saves is a forward output: it keeps its bias, as in Inductor.)"""
    dev = device_of(plugin)
    torch.manual_seed(0)
    model = _Block().to(dev, dtype)
    eager, ref = copy.deepcopy(model), copy.deepcopy(model).double()
    step = torch.compile(model, backend=sdk.backend(plugin))
    x = torch.randn(4, 6, 32, device=dev, dtype=dtype)
    got, want, exact = step(x), eager(x), ref(x.double())
    ok, why = rmse_ok(got.detach().float(), want.detach().float(), exact.detach())
    assert ok, why
    floor = 1e-3 if dtype is torch.bfloat16 else 1e-4  # Dynamo's rule's floor per dtype
    got.sum().backward()
    want.sum().backward()
    exact.sum().backward()
    for (name, p), q, r in zip(model.named_parameters(), eager.parameters(), ref.parameters()):
        ok, why = rmse_ok(p.grad.float(), q.grad.float(), r.grad, floor=floor)
        assert ok, f"{name}: {why}"


def test_a_product_something_else_reads_keeps_its_bias(plugin, graph_reports):
    """A LayerNorm reads the product (not pointwise): one ``addmm`` with its bias."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    lin, norm = torch.nn.Linear(16, 16).to(dev), torch.nn.LayerNorm(16).to(dev)

    def f(x: torch.Tensor) -> torch.Tensor:
        return norm(lin(x)) * 2

    x = torch.randn(8, 16, device=dev)
    with torch.no_grad():
        got = torch.compile(f, backend=sdk.backend(plugin))(x)
        torch.testing.assert_close(got, f(x), rtol=1e-4, atol=1e-4)
    assert _externs(graph_reports) == ["aten.addmm.default"]

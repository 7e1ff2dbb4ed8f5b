"""The option ``round_intermediates``: inside a fused kernel, bf16/fp16 values between ops
are rounded to their dtype as eager rounds them (the default), or kept in float32 with only
what the kernel stores rounded (``False``: Inductor's default)."""

from __future__ import annotations

import math

import pytest
import torch

import sdk
from tests.plugins_under_test import PLUGINS, device_of


def _gelu(h: torch.Tensor) -> torch.Tensor:
    """GPT-2's tanh GELU, as HF writes it: eight ops, each rounded to bf16 by eager."""
    return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h.pow(3.0))))


def _rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref).norm() / ref.norm()).item()


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_a_fused_chain_keeps_float32_between_its_ops_when_asked(plugin, dtype):
    """One fused kernel either way. With the option off, its source converts to the low
    dtype only for the store (the default converts after every op), and its result is nearer
    float64's than eager's is, on fresh inputs; compiled after the default in one process, it
    is a compile of its own, not the default's program from a cache."""
    dev = device_of(plugin)
    reports, outs = {}, {}
    for rounding in (True, False):
        torch._dynamo.reset()
        h = torch.randn(48, 1000, device=dev, dtype=dtype)
        rep = sdk.explain(_gelu, h, backend=f"sdk:{plugin}", round_intermediates=rounding)
        (graph,) = rep.graphs
        assert len(graph.kernels) == 1 and not graph.fallbacks, rep
        reports[rounding] = graph.kernels[0].source
        x = torch.randn(48, 1000, device=dev, dtype=dtype)
        compiled = torch.compile(_gelu, backend=sdk.backend(plugin, round_intermediates=rounding))
        outs[rounding] = (compiled(x), _gelu(x), _gelu(x.double()))
    assert reports[True] != reports[False]
    if plugin == "cuda_triton":
        low = "tl.bfloat16" if dtype == torch.bfloat16 else "tl.float16"
        assert reports[True].count(low) >= 7, reports[True]
        assert reports[False].count(low) == 1, reports[False]
    for rounding, (out, eager, ref) in outs.items():
        assert out.dtype == dtype
        torch.testing.assert_close(out, eager, atol=2e-2, rtol=2e-2)
        if not rounding:
            assert _rel_err(out, ref) < _rel_err(eager, ref), (rounding, _rel_err(out, ref))


@pytest.mark.parametrize("plugin", PLUGINS)
def test_training_without_rounding_between_ops_matches_eager(plugin):
    """A bf16 MLP with the tanh GELU trained one step with the option off: the loss and
    every gradient as eager's, at bf16's tolerance (Inductor's tests use 1e-2 for bf16)."""
    dev = device_of(plugin)
    torch.manual_seed(0)

    class MLP(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = torch.nn.Linear(32, 256)
            self.b = torch.nn.Linear(256, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(_gelu(self.a(x))).float().pow(2).mean()

    model = MLP().to(dev, torch.bfloat16)
    ref = MLP().to(dev, torch.bfloat16)
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend=sdk.backend(plugin, round_intermediates=False))
    x = torch.randn(64, 32, device=dev, dtype=torch.bfloat16)
    loss, want = compiled(x), ref(x)
    loss.backward()
    want.backward()
    torch.testing.assert_close(loss, want, atol=1e-2, rtol=1e-2)
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-2, rtol=1e-2, msg=name)


def test_the_default_rounds_as_eager_and_the_option_is_a_bool():
    assert sdk.CoreOptions().round_intermediates is True
    with pytest.raises(sdk.OptionError, match="round_intermediates"):
        sdk.backend("cpu_cpp", round_intermediates="no")

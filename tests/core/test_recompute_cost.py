"""What the scheduler recomputes depends on what the plugin says math costs.

A rotary embedding computes cos/sin over (tokens, dims) and reads them over every head.
Where transcendentals are cheap (``Preferences.cheap_transcendentals``: cuda_triton), the
cos/sin are recomputed in the kernel that rotates, as a broadcast read; where they are not
(cpu_cpp), they are computed once and stored. Results match eager either way; what was
fused is read from ``sdk.explain``.
"""

from __future__ import annotations

import copy
import importlib
import itertools
import re

import pytest
import torch

import sdk
from sdk.tools.bench_check import dynamo_rmse_rule
from tests.plugins_under_test import PLUGINS, device_of


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary(q: torch.Tensor, k: torch.Tensor, freqs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """HF's apply_rotary_pos_emb: q, k (batch, heads, tokens, dims); freqs (tokens, dims/2)."""
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)
    return (q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin)


def _inputs(dev: str, dtype: torch.dtype):
    q = torch.randn(2, 4, 16, 32, device=dev, dtype=dtype, requires_grad=True)
    k = torch.randn(2, 4, 16, 32, device=dev, dtype=dtype, requires_grad=True)
    freqs = torch.outer(torch.arange(16.0, device=dev), torch.rand(16, device=dev))
    return q, k, freqs


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_matches_eager(plugin, dtype):
    dev = device_of(plugin)
    compiled = torch.compile(rotary, backend=sdk.backend(plugin, fallback=False))
    tol = {} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}
    for _ in range(2):  # fresh inputs on each call
        q, k, freqs = _inputs(dev, dtype)
        got, want = compiled(q, k, freqs), rotary(q, k, freqs)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, **tol)
        grads = [torch.autograd.grad(sum(t.float().sum() for t in r), (q, k)) for r in (got, want)]
        for g, w in zip(*grads):
            torch.testing.assert_close(g, w, **tol)


def _kernels_reading_cos(plugin: str) -> list:
    dev = device_of(plugin)
    q, k, freqs = (t.detach() for t in _inputs(dev, torch.float32))
    report = sdk.explain(rotary, q, k, freqs, backend=f"sdk:{plugin}", fallback=False)
    [graph] = report.graphs
    return [kern for kern in graph.kernels if "aten.cos.default" in kern.ops]


@pytest.mark.parametrize("plugin", PLUGINS)
def test_cos_is_recomputed_only_where_transcendentals_are_cheap(plugin):
    module = importlib.import_module(f"sdk.plugins.{plugin}")
    cheap = getattr(module, "sdk_preferences", sdk.Preferences)().cheap_transcendentals
    with_cos = _kernels_reading_cos(plugin)
    rotating = [kern for kern in with_cos if "aten.mul.Tensor" in kern.ops]
    if cheap:
        # computed where q and k are rotated: in the rotating kernel(s), never stored alone
        assert rotating and len(rotating) == len(with_cos), [kern.ops for kern in with_cos]
    else:
        # computed once over (tokens, dims), in a kernel that does not rotate
        assert len(with_cos) == 1 and not rotating, [kern.ops for kern in with_cos]


@pytest.mark.parametrize(("op", "kernels"), [(torch.rsqrt, 1), (torch.cos, 2)])
def test_a_broadcast_rsqrt_is_recomputed_even_where_transcendentals_are_not_cheap(op, kernels):
    """BatchNorm's per-channel ``rsqrt(var + eps) * weight`` over (N, C, H, W) on cpu_cpp
    (no ``cheap_transcendentals``): rsqrt is a hardware instruction, not in
    ``sdk.ir.TRANSCENDENTAL``, so it is recomputed in the one kernel that scales; a cos there
    is computed once per channel, in a kernel of its own."""

    def scale(x: torch.Tensor, var: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * (op(var + 1e-5) * w).view(1, -1, 1, 1)

    x, var, w = torch.randn(2, 8, 5, 5), torch.rand(8), torch.randn(8)
    report = sdk.explain(scale, x, var, w, backend="sdk:cpu_cpp", fallback=False)
    [graph] = report.graphs
    assert len(graph.kernels) == kernels, [kern.ops for kern in graph.kernels]
    compiled = torch.compile(scale, backend="sdk:cpu_cpp")
    torch.testing.assert_close(compiled(x, var, w), scale(x, var, w))


@pytest.mark.parametrize("plugin", PLUGINS)
def test_layer_norm_backward_in_bf16_reads_its_inputs_not_fp32_copies(plugin):
    """bf16 LayerNorm's backward: the gradient's fp32 cast and the normalized input (no
        narrower than the bf16 values they are computed from) are recomputed where read, not
        stored. So the gamma and beta column sums read the bf16 gradient and input, as the row
        kernel does, in one kernel of their own (siblings over the same reads): no buffer passes
        from one of the backward's kernels to another. Gradients as near an fp64 copy's as eager's
    (Dynamo's accuracy rule)."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(96).to(dev, torch.bfloat16)
    x = torch.randn(4, 24, 96, device=dev, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(4, 24, 96, device=dev, dtype=torch.bfloat16)

    def loss(x, w):
        return (ln(x) * w).float().sum()

    ln64 = copy.deepcopy(ln).double()
    x64 = x.detach().double().requires_grad_()
    compiled = torch.compile(loss, backend=sdk.backend(plugin, fallback=False))
    got = torch.autograd.grad(compiled(x, w), [x, *ln.parameters()])
    want = torch.autograd.grad(loss(x, w), [x, *ln.parameters()])
    fp64 = torch.autograd.grad((ln64(x64) * w.double()).sum(), [x64, *ln64.parameters()])
    for g, e, r in zip(got, want, fp64):
        ok, why = dynamo_rmse_rule(e, g, r, 1e-2)
        assert ok, why
    report = sdk.explain(compiled, x, w)
    (backward,) = [g for g in report.graphs if g.kind == "backward"]
    written = {b for k in backward.kernels for b in k.outputs}
    passed = {b for k in backward.kernels for b in k.inputs} & written
    assert len(backward.kernels) == 2 and not passed, [
        (k.name, k.inputs, k.outputs) for k in backward.kernels
    ]


class _PostNorm(torch.nn.Module):
    """Two post-LayerNorm residual blocks (BERT's): the first LayerNorm's incoming gradient
    is computed by a kernel (the second block's backward), so its gamma and beta column
    sums read a buffer another kernel wrote."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln1(x + self.fc1(x))
        return self.ln2(y + self.fc2(y))


@pytest.mark.parametrize("plugin", PLUGINS)
def test_column_sums_over_one_written_buffer_are_one_kernel(plugin):
    """Column sums of one iteration space that read the same buffer run as one kernel, also
    where a kernel of another space wrote it (a LayerNorm row kernel's gradient, read by the
    gamma and beta sums): no two column-reduction kernels of the backward read a buffer in
    common. Gradients as near an fp64 copy's as eager's."""
    dev = device_of(plugin)
    torch.manual_seed(0)
    model = _PostNorm().to(dev, torch.bfloat16)
    model64 = copy.deepcopy(model).double()
    x = torch.randn(64, 32, device=dev, dtype=torch.bfloat16, requires_grad=True)
    x64 = x.detach().double().requires_grad_()
    compiled = torch.compile(model, backend=sdk.backend(plugin, fallback=False))
    got = torch.autograd.grad(compiled(x).float().sum(), [x, *model.parameters()])
    want = torch.autograd.grad(model(x).float().sum(), [x, *model.parameters()])
    fp64 = torch.autograd.grad(model64(x64).sum(), [x64, *model64.parameters()])
    for g, e, r in zip(got, want, fp64):
        ok, why = dynamo_rmse_rule(e, g, r, 1e-2)
        assert ok, why
    report = sdk.explain(compiled, x)
    (backward,) = [g for g in report.graphs if g.kind == "backward"]
    columns = [k for k in backward.kernels if re.search(r"outer: x0 < 32\b(?!,)", k.source)]
    assert len(columns) >= 2, [k.source[:200] for k in backward.kernels]
    for a, b in itertools.combinations(columns, 2):
        assert not set(a.inputs) & set(b.inputs), (a.name, a.inputs, b.name, b.inputs)

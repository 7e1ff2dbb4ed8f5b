"""A reduction that would gather along what it reduces is not made by fusion on cuda_triton
(``sdk_can_fuse``, ``FusionGroup.gathers_along_reduction``).

The case that found it: ResNet's stem after its convolution (BatchNorm, ReLU, a 3x3
stride-2 max pool) trained in NCHW. Fused into BatchNorm's backward, the pool's gradient
(each element gathered from its windows) gave wrong sums and input gradients on an H200
with Triton 3.6 (bf16 at 2x8x7x6, fp32 at 4x16x14x14 with 2 warps), exact under the
interpreter. Here the gradient is stored by its own kernel, and the graphs compute what
eager computes, on both plugins and in both dtypes, at shapes that take one and several
warps on a GPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sdk
from tests.opcheck import check
from tests.plugins_under_test import PLUGINS, device_of

REFUSAL = "gather along what it reduces"


def _stem(x, w, b):
    return F.max_pool2d(F.relu(F.batch_norm(x, None, None, w, b, training=True)), 3, 2, 1)


def _inputs(shape, dtype, dev):
    n, c, h, w = shape
    # each channel's values distinct integers: after BatchNorm no window holds two maxima
    # within a bf16 rounding of each other (eager and the graph could each pick one)
    x = torch.argsort(torch.rand(c, n * h * w), dim=1).reshape(c, n, h, w).transpose(0, 1)
    x = x.to(device=dev, dtype=dtype).contiguous()
    weight = torch.rand(c, device=dev, dtype=dtype) + 1
    bias = torch.randn(c, device=dev, dtype=dtype)
    return [t.requires_grad_() for t in (x, weight, bias)]


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(2, 8, 7, 6), (4, 16, 14, 14)], ids=["small", "larger"])
def test_the_stem_trains_like_eager(plugin, dtype, shape):
    """Values and the gradients of the input, weight and bias against eager (Inductor's
    tolerances); on cuda_triton the backward stores the pool's gradient and says why."""
    with sdk.collect_reports() as reports:
        check(_stem, _inputs(shape, dtype, device_of(plugin)), plugin=plugin)
    (backward,) = [g for g in reports.graphs if g.kind == "backward"]
    refusals = [r for r in backward.fusion_refusals if REFUSAL in str(r)]
    if plugin == "cuda_triton":
        assert refusals, backward.fusion_refusals
        assert len(backward.kernels) >= 2, [k.name for k in backward.kernels]
    else:
        assert not refusals, refusals  # cpu_cpp has no such veto


@pytest.mark.parametrize("plugin", PLUGINS)
def test_an_embedding_summed_over_its_features_still_fuses(plugin):
    """An embedding's rows are gathered at the same index along the LayerNorm that sums
    them: one kernel, no refusal."""
    dev = device_of(plugin)
    emb = torch.nn.Embedding(50, 32).to(dev)
    ln = torch.nn.LayerNorm(32).to(dev)

    def f(idx):
        return ln(emb(idx))

    idx = torch.randint(0, 50, (8, 4), device=dev)
    with sdk.collect_reports() as reports:
        got = torch.compile(f, backend=sdk.backend(plugin, fallback=False))(idx)
    torch.testing.assert_close(got, f(idx))
    (graph,) = reports.graphs
    assert len(graph.kernels) == 1, [k.name for k in graph.kernels]
    assert not [r for r in graph.fusion_refusals if REFUSAL in str(r)], graph.fusion_refusals

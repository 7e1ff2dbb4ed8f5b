"""Loops of equal sizes: a batch of as many images as channels.

BatchNorm's statistics reduce [N, C, H, W] over N, H and W, so a kernel that also normalizes
runs over the loops [C] x [N, H, W]. Where N == C (16 images of mobilenet_v3's 16 channels,
64 images of ResNet-50's 64), a member over [N, C, H, W] fits those loops by size in two
ways; the scheduler maps it as the members read each other. A mapping asked for while
another member's was still being found fell back to the position (the batch on the channel
loop), and the normalization was refused its statistics' kernel ("reads the reduction at
another outer point"): 4 kernels a step instead of 2, and on an H200 a 34 us unsplit column
sum at 16x16x112x112 where the split one takes 5. Compared with eager on fresh random
inputs, forward and gradients; the kernels per graph are those of a batch of another size.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sdk
from tests.opcheck import check
from tests.plugins_under_test import PLUGINS, device_of


def _bn_relu(x, w, b):
    return F.batch_norm(x, None, None, w, b, training=True).relu()


def _centered(x, w, b):
    """The same reductions written out (a user's own normalization, no ATen batch_norm)."""
    mean = x.mean((0, 2, 3), keepdim=True)
    var = ((x - mean) ** 2).mean((0, 2, 3), keepdim=True)
    return (x - mean) * torch.rsqrt(var + 1e-5) * w[:, None, None] + b[:, None, None]


def _run(plugin, fn, shape, dtype, channels_last, seed):
    """``fn`` compiled against eager (forward and gradients, tests/opcheck.py), and the
    report of the graphs it compiled."""
    dev = device_of(plugin)
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=g) * 2 + 1).to(dev, dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w = torch.randn(shape[1], generator=g).to(dev, dtype)
    b = torch.randn(shape[1], generator=g).to(dev, dtype)
    with sdk.collect_reports() as report:
        check(fn, [t.requires_grad_() for t in (x, w, b)], plugin=plugin)
    return report


def _kernels(report) -> dict[str, int]:
    return {g.kind: len(g.kernels) for g in report.graphs}


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("fn", [_bn_relu, _centered], ids=["batch_norm", "written_out"])
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_batch_of_as_many_images_as_channels_fuses_as_another_batch(
    plugin, fn, channels_last, dtype
):
    torch._dynamo.reset()
    same = _run(plugin, fn, (8, 8, 6, 6), dtype, channels_last, seed=0)
    torch._dynamo.reset()
    other = _run(plugin, fn, (4, 8, 6, 6), dtype, channels_last, seed=1)
    assert _kernels(same) == _kernels(other), (str(same), str(other))
    for g in same.graphs:
        refused = [r for r in g.core_fusion_refusals if "another outer point" in r.reason]
        assert not refused, refused

"""Max pooling in training saves int8 offsets in the window, not int64 indices
(core/passes/max_pool.py, core/lowering/pool_offsets.py): what autograd saves, the values
and gradients against eager, the indices a user asks for left alone, and the two operators
on their own (torch.library.opcheck) where a graph runs them through ATen."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sdk
from sdk.core.lowering import pool_offsets
from tests.opcheck import check
from tests.plugins_under_test import PLUGINS, device_of


def _saved_dtypes(fn, *args) -> list[torch.dtype]:
    """The dtypes of the tensors autograd saves for ``fn(*args)``'s backward."""
    saved: list[torch.dtype] = []

    def pack(t):
        saved.append(t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return saved


def _stem(x, w, b):
    """A ResNet stem after its convolution: BatchNorm, ReLU, a 3x3 stride-2 max pool."""
    return F.max_pool2d(F.relu(F.batch_norm(x, None, None, w, b, training=True)), 3, 2, 1)


@pytest.mark.parametrize("plugin", PLUGINS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
def test_training_saves_offsets_not_indices(plugin, dtype, channels_last):
    """The stem's forward saves one int8 offset per pooled element and no int64 indices; the
    pass reports one rewrite in each graph; output and gradients as eager's (Inductor's
    tolerances)."""
    dev = device_of(plugin)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    # each channel's values distinct integers: after BatchNorm no window holds two maxima
    # within a bf16 rounding of each other (one would take the gradient in eager, the other
    # here, and both are right)
    x = torch.argsort(torch.rand(8, 2 * 7 * 6), dim=1).reshape(8, 2, 7, 6).transpose(0, 1)
    x = x.to(device=dev, dtype=dtype).contiguous(memory_format=fmt)
    w = torch.rand(8, device=dev, dtype=dtype) + 1
    b = torch.randn(8, device=dev, dtype=dtype)
    with sdk.collect_reports() as reports:
        check(_stem, [t.requires_grad_() for t in (x, w, b)], plugin=plugin)
    compiled = torch.compile(_stem, backend=sdk.backend(plugin, fallback=False))
    args = [t.detach().requires_grad_() for t in (x, w, b)]
    dtypes = _saved_dtypes(compiled, *args)
    assert torch.int8 in dtypes and torch.int64 not in dtypes, dtypes
    for g in reports.graphs:
        (rewrites,) = [p.rewrites for p in g.passes if p.name == "max_pool_offsets"]
        assert rewrites == 1, (g.kind, g.passes)
    (backward,) = [g for g in reports.graphs if g.kind == "backward"]
    assert not backward.externs and not backward.fallbacks, (backward.externs, backward.fallbacks)


@pytest.mark.parametrize("plugin", PLUGINS)
def test_indices_a_user_reads_stay_indices(plugin):
    """``return_indices=True``, the indices returned and also differentiated through: ATen's
    int64 indices, eager's values, no rewrite."""
    dev = device_of(plugin)
    x = torch.randn(2, 3, 9, 9, device=dev, requires_grad=True)

    def f(t):
        v, i = F.max_pool2d(t * 2, 3, 2, 1, return_indices=True)
        return v.sum(), i

    with sdk.collect_reports() as reports:
        loss, idx = torch.compile(f, backend=sdk.backend(plugin, fallback=False))(x)
        (grad,) = torch.autograd.grad(loss, x)
    want_loss, want_idx = f(x)
    (want_grad,) = torch.autograd.grad(want_loss, x)
    assert idx.dtype == torch.int64 and torch.equal(idx, want_idx)
    torch.testing.assert_close(grad, want_grad)
    for g in reports.graphs:
        assert all(p.rewrites == 0 for p in g.passes if p.name == "max_pool_offsets"), g.passes


@pytest.mark.parametrize(
    "case",
    [
        ((3, 3), (2, 2), (1, 1), False),
        ((2, 3), (2, 1), (0, 1), True),
        ((2, 2), (2, 2), (0, 0), False),
    ],
    ids=["stem", "oblong-ceil", "tiles"],
)
def test_the_operators_through_aten(case):
    """Each operator on its own, as a graph that falls back runs it: the offsets name the
    window element ATen's indices name, and the gradient from offsets is ATen's from
    indices; torch.library.opcheck checks the schemas and fake kernels."""
    k, s, p, ceil = (list(v) if isinstance(v, tuple) else v for v in case)
    x = torch.randn(2, 3, 10, 9)
    values, offsets = torch.ops.sdk.max_pool2d_offsets(x, k, s, p, ceil)
    want_values, want_indices = torch.ops.aten.max_pool2d_with_indices(x, k, s, p, [1, 1], ceil)
    assert torch.equal(values, want_values)
    assert offsets.dtype == torch.int8 and int(offsets.min()) >= 0
    assert int(offsets.max()) < k[0] * k[1]
    back = pool_offsets.offsets_to_indices(offsets, x.shape[-1], k, s, p)
    assert torch.equal(back, want_indices)
    g = torch.randn_like(values)
    got = torch.ops.sdk.max_pool2d_offsets_backward(g, x, k, s, p, ceil, offsets)
    want = torch.ops.aten.max_pool2d_with_indices_backward(
        g, x, k, s, p, [1, 1], ceil, want_indices
    )
    assert torch.equal(got, want)
    torch.library.opcheck(torch.ops.sdk.max_pool2d_offsets.default, (x, k, s, p, ceil))
    torch.library.opcheck(
        torch.ops.sdk.max_pool2d_offsets_backward.default, (g, x, k, s, p, ceil, offsets)
    )

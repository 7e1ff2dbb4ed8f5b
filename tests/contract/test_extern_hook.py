"""``sdk_extern`` (hook API 4): a plugin runs the graph's library calls (mm, bmm, addmm) through
its own library. The plugin here is written as a vendor would write one: cpu_cpp's kernels,
and numpy's matmul (a real BLAS) for matrix products. Every result is compared with eager on
random inputs, forward and gradients, and ``sdk.explain`` must say which calls went through
the plugin's function."""

from __future__ import annotations

import pytest
import torch

import sdk

pytest.importorskip("numpy")

ATTENTION_NAME = "aten._scaled_dot_product_flash_attention_for_cpu.default"

#: The vendor plugin. ``NPBLAS_CALLS`` counts the calls its functions served (so a test can
#: tell they ran); ``NPBLAS_MODE`` is a switch outside its cache key (see the cache test).
VENDOR = """
import numpy as np
import torch

import sdk
import sdk.cache
from sdk.plugins import cpu_cpp
from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

aten = torch.ops.aten
CALLS = {}
MODE = {"answer": "right"}


@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(
        name="npblas", version="0.1", hook_api=4, device_types=("cpu",),
        capabilities=frozenset({
            sdk.Capability.REDUCTIONS, sdk.Capability.MULTI_STAGE, sdk.Capability.STORE_THEN_LOAD,
            sdk.Capability.SYMBOLIC_SIZES,
        }),
        description="cpu_cpp's kernels, numpy's BLAS for matrix products",
    )


@sdk.hookimpl
def sdk_cache_key(ctx):
    return cpu_cpp.sdk_cache_key(ctx) + sdk.cache.source_digest(__name__)


def _np(t):
    return t.detach().numpy()


def _count(name):
    CALLS[name] = CALLS.get(name, 0) + 1


def mm(a, b):
    _count("mm")
    return torch.from_numpy(np.matmul(_np(a), _np(b)))


def bmm(a, b):
    _count("bmm")
    return torch.from_numpy(np.matmul(_np(a), _np(b)))


def addmm(bias, a, b, *, beta=1, alpha=1):
    _count("addmm")
    return torch.from_numpy(beta * _np(bias) + alpha * np.matmul(_np(a), _np(b)))


def convolution(x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    # 2-d, one group, not transposed: im2col and one BLAS product; else None was answered
    _count("convolution")
    x, w = _np(x), _np(w)
    n, c, h, wd = x.shape
    k, _, r, s = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
    ow = (wd + 2 * pw - dw * (s - 1) - 1) // sw + 1
    cols = np.empty((n, c, r, s, oh, ow), dtype=x.dtype)
    for i in range(r):
        for j in range(s):
            cols[:, :, i, j] = xp[:, :, i * dh : i * dh + sh * oh : sh, j * dw : j * dw + sw * ow : sw]
    out = np.matmul(w.reshape(k, -1), cols.reshape(n, c * r * s, oh * ow)).reshape(n, k, oh, ow)
    if bias is not None:
        out = out + _np(bias)[None, :, None, None]
    return torch.from_numpy(np.ascontiguousarray(out))


def attention(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    # (output, logsumexp), as the op returns them; no mask, no dropout (else None answered)
    _count("attention")
    q, k, v = _np(q), _np(k), _np(v)
    s = np.matmul(q, k.swapaxes(-1, -2)) * (scale or 1.0 / np.sqrt(q.shape[-1]))
    if is_causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    top = s.max(-1, keepdims=True)
    e = np.exp(s - top)
    total = e.sum(-1, keepdims=True)
    lse = (np.log(total) + top)[..., 0]
    out = np.matmul(e / total, v)
    return torch.from_numpy(out.astype(q.dtype)), torch.from_numpy(lse.astype(q.dtype))


def mm_transposed(a, b):
    return torch.from_numpy(np.matmul(_np(a), _np(b)).T.copy())


FUNCTIONS = {aten.mm.default: mm, aten.bmm.default: bmm, aten.addmm.default: addmm}
ATTENTION = aten._scaled_dot_product_flash_attention_for_cpu.default


@sdk.hookimpl
def sdk_extern(ctx, op, node):
    out = node.meta["val"]
    if MODE["answer"] == "none":
        return None
    if op == ATTENTION:
        dropout = node.args[3] if len(node.args) > 3 else node.kwargs.get("dropout_p", 0.0)
        plain = node.kwargs.get("attn_mask") is None and dropout == 0.0
        return attention if plain and out[0].dtype == torch.float32 else None
    if not isinstance(out, torch.Tensor):
        return None  # (the backward ops return several tensors: ATen's)
    if out.dtype != torch.float32:
        return None
    if op == aten.convolution.default:
        x, w, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
        plain = x.meta["val"].ndim == 4 and not transposed and groups == 1
        return convolution if plain else None
    if MODE["answer"] == "wrong" and op == aten.mm.default:
        return mm_transposed
    return FUNCTIONS.get(op)
"""


@pytest.fixture
def npblas(make_plugin, fake_dist, use_registry):
    module = make_plugin(VENDOR, head=False)
    use_registry(fake_dist("npblas-sdk-plugin", {"npblas": module}))
    mod = __import__(module)
    yield mod
    mod.MODE["answer"] = "right"


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(12, 10)

    def forward(self, x, y):
        h = torch.tanh(self.lin(x))  # addmm forward; mm in the backward
        return torch.bmm(h.unsqueeze(0).expand(2, -1, -1), y).relu()  # bmm both ways


def _grads(net, out, *inputs):
    return torch.autograd.grad(out.square().sum(), [*net.parameters(), *inputs])


def test_library_calls_run_through_the_plugin_forward_and_backward(npblas):
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(7, 12, requires_grad=True)
    y = torch.randn(2, 10, 5, requires_grad=True)
    report = sdk.explain(net, x, y, backend="sdk:npblas")
    by_kind = {g.kind: {(e.op, e.plugin) for e in g.externs} for g in report.graphs}
    assert ("aten.addmm.default", "npblas") in by_kind["forward"], str(report)
    assert ("aten.bmm.default", "npblas") in by_kind["forward"], str(report)
    assert ("aten.mm.default", "npblas") in by_kind["backward"], str(report)
    assert ("aten.bmm.default", "npblas") in by_kind["backward"], str(report)
    assert all(e.plugin == "npblas" for e in report.externs), str(report)
    assert "extern aten.mm.default" in str(report) and "by sdk:npblas" in str(report)
    assert report.kernels, "the rest of the graph runs in generated kernels"

    torch._dynamo.reset()
    compiled = torch.compile(net, backend=sdk.backend("npblas"))
    npblas.CALLS.clear()
    for _ in range(2):
        x = torch.randn(7, 12, requires_grad=True)
        y = torch.randn(2, 10, 5, requires_grad=True)
        out = compiled(x, y)
        torch.testing.assert_close(out, net(x, y))
        for got, want in zip(_grads(net, out, x, y), _grads(net, net(x, y), x, y)):
            torch.testing.assert_close(got, want)
    assert npblas.CALLS.get("addmm") == 2 and npblas.CALLS.get("bmm", 0) >= 2 * 3, npblas.CALLS
    assert npblas.CALLS.get("mm", 0) >= 2, npblas.CALLS


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)

    def forward(self, x):
        h = torch.relu(self.conv(x))  # (2, 8, 5, 5)
        return h.flatten(1) @ h.flatten(1).T  # and an mm


def test_convolution_through_the_plugin(npblas):
    """A strided, padded convolution (im2col on the plugin's BLAS) in a training step; its
    backward (convolution_backward, three outputs) is left to ATen and reads the plugin's
    result."""
    torch.manual_seed(0)
    net = ConvNet()
    x = torch.randn(2, 3, 9, 9, requires_grad=True)
    report = sdk.explain(net, x, backend="sdk:npblas")
    ops = {(g.kind, e.op, e.plugin) for g in report.graphs for e in g.externs}
    assert ("forward", "aten.convolution.default", "npblas") in ops, str(report)
    assert ("backward", "aten.convolution_backward.default", "") in ops, str(report)
    torch._dynamo.reset()
    compiled = torch.compile(net, backend=sdk.backend("npblas"))
    npblas.CALLS.clear()
    for _ in range(2):
        x = torch.randn(2, 3, 9, 9, requires_grad=True)
        out = compiled(x)
        torch.testing.assert_close(out, net(x))
        # (the weight's gradient sums products of values near 100 in another order than
        # oneDNN's convolution: fp32 rounding, 2e-5 relative)
        for got, want in zip(_grads(net, out, x), _grads(net, net(x), x)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert npblas.CALLS["convolution"] == 2 and npblas.CALLS["mm"] >= 2, npblas.CALLS


def attend(q, k, v):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) * 2.0


def test_attention_through_the_plugin(npblas):
    """Attention returns two tensors, the result and the log-sum-exp its backward reads
    (which ATen gives in strides (48, 1, 3): the plugin's contiguous one is copied into
    them): both from the plugin in the forward graph; the backward op stays ATen's and reads
    them; outputs and gradients against eager."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(3))
    report = sdk.explain(attend, q, k, v, backend="sdk:npblas")
    forward = {(e.op, e.plugin) for e in report.graphs[0].externs}
    assert (ATTENTION_NAME, "npblas") in forward, str(report)
    torch._dynamo.reset()
    compiled = torch.compile(attend, backend=sdk.backend("npblas"))
    npblas.CALLS.clear()
    for _ in range(2):
        q, k, v = (torch.randn(2, 3, 16, 8, requires_grad=True) for _ in range(3))
        out = compiled(q, k, v)
        torch.testing.assert_close(out, attend(q, k, v))
        got = torch.autograd.grad(out.square().sum(), [q, k, v])
        want = torch.autograd.grad(attend(q, k, v).square().sum(), [q, k, v])
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
    assert npblas.CALLS == {"attention": 2}, npblas.CALLS


def test_symbolic_sizes_one_program_through_the_plugin(npblas):
    torch.manual_seed(0)
    w = torch.randn(16, 8)

    def f(x):
        return torch.relu(x @ w) * 2.0

    report = sdk.explain(f, torch.randn(5, 16), backend=sdk.backend("npblas"), dynamic=True)
    (g,) = report.graphs
    assert g.sizes.startswith("symbolic"), str(report)
    assert [(e.op, e.plugin) for e in g.externs] == [("aten.mm.default", "npblas")], str(report)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=sdk.backend("npblas"), dynamic=True)
    npblas.CALLS.clear()
    for n in (3, 11, 6):
        x = torch.randn(n, 16)
        torch.testing.assert_close(compiled(x), f(x))
    assert npblas.CALLS == {"mm": 3}, npblas.CALLS


def square(a, b):
    return (a @ b).sin()


def test_a_result_of_the_wrong_shape_is_an_error_naming_plugin_op_and_node(npblas):
    npblas.MODE["answer"] = "wrong"
    a, b = torch.randn(4, 6), torch.randn(6, 3)
    torch._dynamo.reset()
    with pytest.raises(sdk.SDKError) as exc:
        torch.compile(square, backend=sdk.backend("npblas", fallback=False))(a, b)
    msg = str(exc.value)
    assert "sdk:npblas's sdk_extern function for aten.mm.default (node mm)" in msg, msg
    assert "shape (3, 4)" in msg and "shape (4, 3)" in msg, msg
    # with the fallback on: ATen runs the graph, and the report says why
    report = sdk.explain(square, a, b, backend="sdk:npblas")
    assert any("sdk_extern function for aten.mm.default" in n for n in report.graphs[0].notes)
    torch._dynamo.reset()
    torch.testing.assert_close(
        torch.compile(square, backend=sdk.backend("npblas"))(a, b), square(a, b)
    )


def test_the_graph_cache_asks_again_and_never_serves_another_extern(npblas, tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    a, b = torch.randn(4, 6), torch.randn(6, 3)

    def explain():
        torch._dynamo.reset()
        return sdk.explain(square, a, b, backend="sdk:npblas")

    first = explain()
    assert [g.cache for g in first.graphs] == ["stored"], str(first)
    npblas.CALLS.clear()
    second = explain()
    assert [g.cache for g in second.graphs] == ["hit"], str(second)
    assert npblas.CALLS == {"mm": 1}, "a hit calls the plugin's function, asked again"
    assert [e.plugin for e in second.externs] == ["npblas"], str(second)
    # the plugin answers otherwise (a switch its cache key does not cover): not that program
    npblas.MODE["answer"] = "none"
    npblas.CALLS.clear()
    third = explain()
    assert [g.cache for g in third.graphs] == ["stored"], str(third)
    assert [e.plugin for e in third.externs] == [""] and not npblas.CALLS, str(third)
    torch._dynamo.reset()
    torch.testing.assert_close(
        torch.compile(square, backend=sdk.backend("npblas"))(a, b), square(a, b)
    )

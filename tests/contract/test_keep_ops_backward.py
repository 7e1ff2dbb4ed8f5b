"""Keeping an op whole (``sdk_keep_ops``) keeps the ops of its derivative whole too: a
plugin that keeps ``aten.gelu`` gets ``aten.gelu_backward`` in the backward graph, and
lowers it or the report says why it runs in ATen."""

from __future__ import annotations

import pytest
import torch

import sdk

# a vendor with its own GELU (forward and backward) in its C code generator's IR
VENDOR = """
import math
import torch
import sdk
import sdk.ir as ir
from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

aten = torch.ops.aten
F32 = torch.float32
LOWER = {lower}


@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(name="geluvendor", version="1.0", hook_api=4, device_types=("cpu",),
                          capabilities=frozenset({{sdk.Capability.REDUCTIONS}}))


@sdk.hookimpl
def sdk_keep_ops(ctx):
    return [aten.gelu]


def c(v):
    return ir.Const(v, F32)


def f(name, *args):
    return ir.Op(name, args, F32)


def cdf(v):  # 0.5 * (1 + erf(v / sqrt(2)))
    return f("mul", c(0.5), f("add", c(1.0), f("erf", f("mul", v, c(math.sqrt(0.5))))))


@sdk.hookimpl
def sdk_lower_op(ctx, op, args, kwargs, builder):
    if not LOWER or kwargs.get("approximate", "none") != "none":
        return None
    out = builder.out
    if op is aten.gelu.default:
        (x,) = args

        def body(i):
            v = builder.cast(x.load(i), F32)
            return builder.cast(f("mul", v, cdf(v)), out.dtype)

    elif op is aten.gelu_backward.default:
        grad, x = args

        def body(i):
            v, g = builder.cast(x.load(i), F32), builder.cast(grad.load(i), F32)
            pdf = f("mul", c(1 / math.sqrt(2 * math.pi)), f("exp", f("mul", c(-0.5), f("mul", v, v))))
            # d/dv (v * cdf(v)) = cdf(v) + v * pdf(v)
            return builder.cast(f("mul", g, f("add", cdf(v), f("mul", v, pdf))), out.dtype)

    else:
        return None
    return builder.pointwise(tuple(out.shape), out.dtype, body)
"""


@pytest.fixture
def keeper(make_plugin, fake_dist, use_registry):
    def make(lower: bool) -> None:
        mod = make_plugin(VENDOR.format(lower=lower), name="geluvendor", head=False)
        use_registry(fake_dist("geluvendor-sdk-plugin", {"geluvendor": mod}))

    return make


def _fn(x, w):
    return (torch.nn.functional.gelu(x * w) * 3).sum(-1)


def _inputs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 32, generator=g, requires_grad=True)
    w = torch.randn(32, generator=g, requires_grad=True)
    return x, w


def _ops(graph: sdk.GraphReport) -> set[str]:
    return {op for k in graph.kernels for op in k.ops} | {f.op for f in graph.fallbacks}


def test_backward_of_a_kept_op_stays_whole_and_is_lowered(keeper):
    keeper(lower=True)
    x, w = _inputs()
    report = sdk.explain(_fn, x, w, backend="sdk:geluvendor")
    backward = [g for g in report.graphs if g.kind == "backward"]
    assert backward, str(report)
    assert "aten.gelu_backward.default" in _ops(backward[0]), str(report)
    assert "aten.gelu.default" in _ops(report.graphs[0]), str(report)
    assert not report.fallbacks, str(report)

    compiled = torch.compile(_fn, backend=sdk.backend("geluvendor"))
    got = torch.autograd.grad(compiled(x, w).sum(), (x, w))
    want = torch.autograd.grad(_fn(x, w).sum(), (x, w))
    torch.testing.assert_close(got, want)

    # without the keep, the backward is decomposed (nothing for the keep to do otherwise)
    plain = sdk.explain(_fn, x, w, backend="sdk:cpu_cpp")
    assert not any("gelu" in op for g in plain.graphs for op in _ops(g)), str(plain)


def test_a_kept_backward_op_the_plugin_cannot_lower_says_why(keeper):
    keeper(lower=False)
    x, w = _inputs()
    report = sdk.explain(_fn, x, w, backend="sdk:geluvendor")
    (backward,) = [g for g in report.graphs if g.kind == "backward"]
    (fb,) = [f for f in backward.fallbacks if f.op == "aten.gelu_backward.default"]
    assert "no IR lowering" in fb.reason, fb
    compiled = torch.compile(_fn, backend=sdk.backend("geluvendor"))
    got = torch.autograd.grad(compiled(x, w).sum(), (x, w))
    torch.testing.assert_close(got, torch.autograd.grad(_fn(x, w).sum(), (x, w)))


def test_a_library_call_between_fused_groups_forms_no_cycle(keeper):
    """gelu_backward in ATen reads one pointwise node and feeds another; fusing the first
    with a group that holds the second (a horizontal sibling over the same inputs) would
    make the kernel wait on itself through the library call. The scheduler's cycle check
    looks both ways: the graph compiles (it failed with "scheduler produced a dependency
    cycle" and ran whole in ATen)."""
    keeper(lower=False)
    x, w = _inputs()

    def fn(x, w):
        return (torch.nn.functional.gelu(x * w) + torch.nn.functional.silu(x)).sum(-1)

    report = sdk.explain(fn, x, w, backend="sdk:geluvendor")
    for graph in report.graphs:
        assert graph.kernels, str(report)
        assert [f.op for f in graph.fallbacks] in (
            ["aten.gelu.default"],
            ["aten.gelu_backward.default"],
        ), str(report)
    compiled = torch.compile(fn, backend=sdk.backend("geluvendor"))
    got = torch.autograd.grad(compiled(x, w).sum(), (x, w))
    torch.testing.assert_close(got, torch.autograd.grad(fn(x, w).sum(), (x, w)))


def test_the_backward_ops_are_found_whatever_the_grad_mode():
    """An inference compile under no_grad may be the first to ask (the answer is cached
    for the process): it must not find "no derivative"."""
    from sdk.core.adapters import torch_private as tp

    tp.derivative_ops.cache_clear()
    with torch.inference_mode():
        ops = tp.derivative_ops(torch.ops.aten.gelu.default)
    assert torch.ops.aten.gelu_backward.default in ops, ops

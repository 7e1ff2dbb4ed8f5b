"""A vendor's lowering override and fusion veto take effect and show in explain."""

from __future__ import annotations

import torch

import sdk

VENDOR = """
import torch
import sdk
import sdk.ir as ir
# this vendor renders with the C++ plugin's code generator
from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

CALLS = []

@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(name="vendor", version="1.0", hook_api=1, device_types=("cpu",),
                          capabilities=frozenset({sdk.Capability.REDUCTIONS}))

@sdk.hookimpl
def sdk_lower_op(ctx, op, args, kwargs, builder):
    if op is not torch.ops.aten.relu.default:
        return None
    CALLS.append(str(op))
    (x,) = args
    out = builder.out

    def body(idx):
        v = builder.cast(x.load(idx), torch.float32)
        zero = ir.Const(0.0, torch.float32)
        # leaky, so the override is visible in the values
        return builder.cast(ir.Op("where", (ir.Op("gt", (v, zero), torch.bool), v,
                                            ir.Op("mul", (v, ir.Const(0.25, torch.float32)),
                                                  torch.float32)), torch.float32), out.dtype)

    return builder.pointwise(tuple(out.shape), out.dtype, body)

@sdk.hookimpl
def sdk_can_fuse(ctx, first, second):
    if first.is_reduction or second.is_reduction:
        return sdk.Support.no("the vendor's reduction unit runs alone")
    return None
"""


def test_lowering_override_and_fusion_veto(make_plugin, fake_dist, use_registry):
    mod = make_plugin(VENDOR, name="vendor", head=False)
    use_registry(fake_dist("vendor-sdk-plugin", {"vendor": mod}))
    x = torch.randn(16, 32)

    def fn(x):
        return torch.relu(x * 2).sum(-1) + 1

    expected = torch.nn.functional.leaky_relu(x * 2, 0.25).sum(-1) + 1
    out = torch.compile(fn, backend=sdk.backend("vendor"))(x)
    torch.testing.assert_close(out, expected)

    report = sdk.explain(fn, x, backend="sdk:vendor")
    assert not report.fallbacks, str(report)
    refusals = [r for g in report.graphs for r in g.fusion_refusals]
    assert any("reduction unit runs alone" in r.reason for r in refusals), str(report)
    # the veto kept the reduction out of the pointwise kernel: two kernels at least
    assert len(report.kernels) >= 2, str(report)
    assert "not fused" in str(report)


def test_capabilities_gate_fusion_before_the_plugin_is_asked(make_plugin, fake_dist, use_registry):
    """A plugin without REDUCTIONS never gets a reduction fused into another kernel."""
    src = VENDOR.replace("frozenset({sdk.Capability.REDUCTIONS})", "frozenset()")
    mod = make_plugin(src, name="vendor", head=False)
    use_registry(fake_dist("vendor-sdk-plugin", {"vendor": mod}))
    x = torch.randn(8, 16)
    report = sdk.explain(lambda x: (x.exp() * 2).sum(-1), x, backend="sdk:vendor")
    reasons = [r.reason for g in report.graphs for r in g.core_fusion_refusals]
    assert any("REDUCTIONS capability" in r for r in reasons), reasons


def test_plugin_vetoes_and_core_refusals_are_listed_apart(make_plugin, fake_dist, use_registry):
    """``fusion_refusals`` holds the plugin's vetoes only, ``core_fusion_refusals`` the
    core's own reasons only; explain prints the plugin's."""
    mod = make_plugin(VENDOR, name="vendor", head=False)
    use_registry(fake_dist("vendor-sdk-plugin", {"vendor": mod}))
    x = torch.randn(8, 16)
    # softmax: each reduction with its pointwise neighbours is legal, and the plugin
    # vetoes it; what those vetoes leave apart the core then refuses on its own grounds
    report = sdk.explain(lambda x: torch.softmax(x, -1), x, backend="sdk:vendor")
    (graph,) = report.graphs
    core = [r.reason for r in graph.core_fusion_refusals]
    plugin = [r.reason for r in graph.fusion_refusals]
    assert core and not any("refused by" in r for r in core), core
    assert plugin and all(
        r == "refused by sdk:vendor: the vendor's reduction unit runs alone" for r in plugin
    ), plugin
    assert "reduction unit runs alone" in str(report)
    assert not any(r in str(report) for r in core), str(report)

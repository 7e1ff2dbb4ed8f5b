"""A per-kernel limit (``sdk_kernel_limits``) the scheduler keeps by not fusing past it, and
what the fusion hook sees of a merged kernel (``FusionGroup.inputs``/``outputs``)."""

from __future__ import annotations

import pytest
import torch

import sdk

# a vendor whose device has three pointer registers per kernel; it renders with the C++
# plugin's code generator
VENDOR = """
import sdk
from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

SEEN = []

@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(
        name="narrow", version="1.0", hook_api=4, device_types=("cpu",),
        capabilities=frozenset({sdk.Capability.REDUCTIONS, sdk.Capability.MULTI_STAGE}),
        options={"pointers": sdk.OptionSpec(3, "pointer registers per kernel", (int, type(None)))},
    )

@sdk.hookimpl
def sdk_kernel_limits(ctx):
    n = ctx.options["pointers"]
    return None if n is None else sdk.KernelLimits(max_buffers=n)

@sdk.hookimpl
def sdk_can_fuse(ctx, first, second, merged):
    SEEN.append((first, second, merged))
"""


@pytest.fixture
def narrow(make_plugin, fake_dist, use_registry):
    mod = make_plugin(VENDOR, name="narrow", head=False)
    use_registry(fake_dist("narrow-sdk-plugin", {"narrow": mod}))
    return __import__(mod)


def _fn(a, b, c, d, cond):
    x = (a + b) * (c - d) + a.exp()
    return torch.where(cond, x, c) * 2, (x * b).sum(-1)


def _inputs():
    g = torch.Generator().manual_seed(0)
    a, b, c, d = (torch.randn(8, 16, generator=g) for _ in range(4))
    return a, b, c, d, a > 0.3


def test_kernels_stay_within_the_limit_by_splitting(narrow):
    args = _inputs()
    out = torch.compile(_fn, backend=sdk.backend("narrow"))(*args)
    torch.testing.assert_close(out, _fn(*args))

    limited = sdk.explain(_fn, *args, backend="sdk:narrow")
    free = sdk.explain(_fn, *args, backend="sdk:narrow", pointers=None)
    assert limited.kernels and all(k.buffers <= 3 for k in limited.kernels), str(limited)
    assert any(k.buffers > 3 for k in free.kernels), str(free)  # the limit had work to do
    assert len(limited.kernels) > len(free.kernels), (str(limited), str(free))
    refusals = [r.reason for g in limited.graphs for r in g.fusion_refusals]
    assert any("sdk_kernel_limits" in r for r in refusals), str(limited)
    assert "sdk_kernel_limits" in str(limited)


def test_an_op_over_the_limit_alone_runs_in_aten_with_the_reason(narrow):
    """torch.where(cond, x, y) reads three tensors and writes one: four buffers, which
    no split can lower under a limit of three."""
    args = _inputs()
    report = sdk.explain(_fn, *args, backend="sdk:narrow")
    where = [f for f in report.fallbacks if f.op.startswith("aten.where")]
    assert where, str(report)
    assert "4 buffer arguments, over the limit of 3" in where[0].reason, where[0].reason
    # with four registers it is a kernel again
    wide = sdk.explain(_fn, *args, backend="sdk:narrow", pointers=4)
    assert not wide.fallbacks, str(wide)
    assert all(k.buffers <= 4 for k in wide.kernels), str(wide)


def test_merged_group_counts_the_fused_kernels_buffers(narrow):
    """A buffer ``first`` writes only for ``second`` is neither an input nor an output of
    the merged kernel; the counts equal those of the kernel the fusion makes."""
    a, b, c = (torch.randn(4, 8) for _ in range(3))

    def fn(a, b, c):
        return (a * b).exp() + c

    report = sdk.explain(fn, a, b, c, backend="sdk:narrow", pointers=None)
    (kernel,) = report.kernels
    merged = [m for _, _, m in narrow.SEEN if len(m.origins) == len(kernel.nodes)]
    assert merged, narrow.SEEN
    m = merged[-1]
    assert sorted(m.inputs) == sorted(kernel.inputs) and len(m.inputs) == 3, (m, kernel)
    assert m.outputs == kernel.outputs and len(m.outputs) == 1, (m, kernel)
    for first, second, m in narrow.SEEN:
        inner = set(first.outputs) & set(second.inputs)
        assert not inner & set(m.inputs), (first, second, m)


def test_bad_limits_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="must be a positive int"):
        sdk.KernelLimits(max_buffers=0)
    assert sdk.KernelLimits(max_inputs=2).exceeded(3, 1, 4) == (
        "3 input buffers, over the limit of 2"
    )

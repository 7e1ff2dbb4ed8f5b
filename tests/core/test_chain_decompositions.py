"""A chain's plugins each see the graph decomposed by their own tables: the first plugin's
kept ops and decompositions do not reach the next one, and the report says why the first
one failed."""

from __future__ import annotations

import pytest
import torch

import sdk

# a vendor that keeps GELU whole (its own lowering, say), approximates SiLU its own way,
# and whose compiler then fails on every kernel
FIRST = """
import torch
import sdk
from sdk.plugins.cpu_cpp import sdk_compile_kernels  # noqa: F401

aten = torch.ops.aten
REFUSE = {refuse!r}


@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(name="first", version="1.0", hook_api=4, device_types=("cpu",),
                          capabilities=frozenset({{sdk.Capability.REDUCTIONS}}))


@sdk.hookimpl
def sdk_keep_ops(ctx):
    return [aten.gelu]


def fast_silu(x):  # x * hardsigmoid(x): the vendor's cheap SiLU, far from the exact one
    return x * aten.hardsigmoid.default(x)


@sdk.hookimpl
def sdk_decompositions(ctx):
    return {{aten.silu.default: fast_silu}}


@sdk.hookimpl
def sdk_op_support(ctx, op, node):
    if str(op) in REFUSE:
        return sdk.Support.no("the acme unit has no adder tree")
    return None


@sdk.hookimpl
def sdk_render_kernel(ctx, kernel):
    raise RuntimeError("acme-cc: no target for kernel " + kernel.name)
"""


@pytest.fixture
def first(make_plugin, fake_dist, use_registry):
    def make(refuse: tuple[str, ...] = ()) -> None:
        mod = make_plugin(FIRST.format(refuse=refuse), name="first", head=False)
        use_registry(fake_dist("first-sdk-plugin", {"first": mod}))

    return make


def _fn(x, w):
    return (torch.nn.functional.gelu(x * w) + torch.nn.functional.silu(x)).sum(-1)


def _inputs():
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(8, 32, generator=g, requires_grad=True),
        torch.randn(32, generator=g, requires_grad=True),
    )


#: The PluginFallbackWarning of a graph (a partition) the first plugin fails (once per
#: reason: one per kernel it names)
_TOLD = "'first'.*sdk:cpu_cpp instead.*acme-cc: no target for kernel"


def _check_values(x, w):
    compiled = torch.compile(_fn, backend=sdk.backend("first", chain=["cpu_cpp"]))
    out = compiled(x, w)
    torch.testing.assert_close(out, _fn(x, w))  # the fast SiLU did not leak
    got = torch.autograd.grad(out.sum(), (x, w))
    torch.testing.assert_close(got, torch.autograd.grad(_fn(x, w).sum(), (x, w)))


def _ops(report: sdk.ExplainReport) -> set[str]:
    return {op for k in report.kernels for op in k.ops} | {f.op for f in report.fallbacks}


def test_the_next_plugin_gets_its_own_decompositions_and_the_reason(first):
    first()
    x, w = _inputs()
    with pytest.warns(sdk.PluginFallbackWarning, match=_TOLD):
        _check_values(x, w)
        report = sdk.explain(_fn, x, w, backend="sdk:first", chain=["cpu_cpp"])
    assert [g.plugin for g in report.graphs] == ["cpu_cpp", "cpu_cpp"], str(report)
    # cpu_cpp decomposed GELU (and its backward) itself: nothing runs in ATen
    assert not report.fallbacks, str(report)
    assert not any("gelu" in op or "silu" in op for op in _ops(report)), str(report)
    for g in report.graphs:
        (why,) = g.chain_failures
        assert why.startswith("sdk:first failed:") and "acme-cc: no target" in why, why
    assert "compiled by sdk:cpu_cpp after: sdk:first failed" in str(report)
    assert "acme-cc: no target for kernel" in str(report)


def test_a_failed_partition_goes_on_with_the_next_plugins_decompositions(first):
    """The first plugin refuses the sum, so cpu_cpp claims it and the graph is split; the
    first plugin's partition then fails and cpu_cpp compiles it, decomposed its own way."""
    first(refuse=("aten.sum.dim_IntList",))
    x, w = _inputs()
    with pytest.warns(sdk.PluginFallbackWarning, match=_TOLD):
        _check_values(x, w)
        report = sdk.explain(_fn, x, w, backend="sdk:first", chain=["cpu_cpp"])
    forward = next(g for g in report.graphs if g.kind == "forward" and g.partitions)
    assert forward.partitions, str(report)
    failed = [p for p in forward.partitions if p.plugin == "first"]
    assert failed and all(p.compiled_by == "cpu_cpp" for p in failed), str(report)
    assert all("acme-cc: no target" in p.note for p in failed), str(report)
    assert "first -> cpu_cpp" in str(report) and "acme-cc: no target" in str(report)
    assert not report.fallbacks, str(report)
    assert not any("gelu" in op or "silu" in op for op in _ops(report)), str(report)


def test_a_plugin_decomposes_what_a_later_one_keeps_under_symbolic_sizes(first):
    """cpu_cpp first, the GELU-keeping plugin after it: AOTAutograd leaves gelu whole for
    the chain, and cpu_cpp decomposes it in its own symbolic graph."""
    first()
    backend = sdk.backend("cpu_cpp", chain=["first"])
    x = torch.randn(6, 10)
    report = sdk.explain(_fn, x, torch.randn(10), backend=backend, dynamic=True)
    (graph,) = report.graphs
    assert graph.sizes.startswith("symbolic"), str(report)
    assert graph.plugin == "cpu_cpp" and not report.fallbacks, str(report)
    assert not any("gelu" in op for op in _ops(report)), str(report)
    compiled = torch.compile(_fn, backend=backend, dynamic=True)
    for n in (6, 9):
        x, w = torch.randn(n, 10), torch.randn(10)
        torch.testing.assert_close(compiled(x, w), _fn(x, w))

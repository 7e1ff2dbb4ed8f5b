"""A plugin that runs here but cannot compile (``sdk_plugin_status`` answers
``sdk.CompileUnavailable``): any vendor's, kernel-level or graph-level. What the caches hold
runs compiled; a graph or partition that needs a compile runs in ATen without the plugin's
compile hook being called, with one warning per process and the reason in ``sdk.explain``."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch

import sdk

#: A kernel-level plugin that renders and builds through cpu_cpp, and counts its compiles;
#: ``CAN_COMPILE`` decides its status.
KERNELS = """
from sdk.plugins import cpu_cpp

CAN_COMPILE = True
COMPILED = []

@sdk.hookimpl
def sdk_plugin_status():
    return None if CAN_COMPILE else sdk.CompileUnavailable("no acme compiler here; install acmecc")

@sdk.hookimpl
def sdk_cache_key(ctx):
    return "acme 1"

sdk_render_kernel = cpu_cpp.sdk_render_kernel

@sdk.hookimpl
def sdk_compile_kernels(ctx, sources):
    COMPILED.append(ctx.graph_name)
    return cpu_cpp.sdk_compile_kernels(ctx=ctx, sources=sources)
"""

#: A graph-level plugin: it claims every op and keeps each compiled partition in memory, its
#: artifact naming it (a later compile in this process loads it back).
PARTITIONS = """
CAN_COMPILE = True
COMPILED = []
KEPT = {}

@sdk.hookimpl
def sdk_plugin_status():
    return None if CAN_COMPILE else sdk.CompileUnavailable("no acme compiler here; install acmecc")

@sdk.hookimpl
def sdk_cache_key(ctx):
    return "acme 1"

@sdk.hookimpl
def sdk_claim_nodes(ctx, gm):
    return {n: sdk.Support.yes() for n in gm.graph.nodes if n.op == "call_function"}

@sdk.hookimpl
def sdk_compile_subgraph(ctx, gm, example_inputs):
    COMPILED.append(ctx.graph_name)
    name = str(len(KEPT)).encode()
    KEPT[name] = gm
    return sdk.CompiledSubgraph(fn=gm, artifact=name)

@sdk.hookimpl
def sdk_load_subgraph(ctx, artifact):
    return KEPT.get(artifact)
"""


def cached(x):
    return (x.sin() * 2).sum(0)


def other(x):
    return (x.cos() + 1).relu()


def another(x):
    return x.exp() - x


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))


def _fallback_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [str(w.message) for w in caught if issubclass(w.category, sdk.PluginFallbackWarning)]


def _run(fn, backend):
    x = torch.randn(8, 16)
    torch.testing.assert_close(torch.compile(fn, backend=backend)(x), fn(x))


@pytest.mark.parametrize("source, kind", [(KERNELS, "CODEGEN"), (PARTITIONS, "GRAPH")])
def test_a_plugin_that_cannot_compile_runs_what_is_cached(
    source, kind, make_plugin, fake_dist, use_registry, cache_on
):
    module_name = make_plugin(source, name="acme", kind=kind)
    module = importlib.import_module(module_name)
    eps = fake_dist("acme-sdk", {"acme": module_name})
    use_registry(eps)
    _run(cached, sdk.backend("acme"))  # compiled, and kept in the caches
    assert module.COMPILED
    module.CAN_COMPILE = False
    use_registry(eps)  # (a new process: the status is asked again)
    torch._dynamo.reset()
    row = {r["name"]: r for r in sdk.list_plugins()}["acme"]
    assert row["status"] == "cached programs only: no acme compiler here; install acmecc", row
    module.COMPILED.clear()
    backend = sdk.backend("acme")
    assert _fallback_warnings(lambda: _run(cached, backend)) == []  # a hit
    hit = sdk.explain(cached, torch.randn(8, 16), backend=backend)
    assert not hit.fallbacks, str(hit)
    compiled_for_hits = list(module.COMPILED)  # (a kernel-level plugin loads its kernels)
    told = _fallback_warnings(lambda: _run(other, backend))  # not cached
    assert len(told) == 1, told
    assert "cannot compile on this machine: no acme compiler here; install acmecc" in told[0]
    assert "'acme'" in told[0] and "runs in ATen instead" in told[0], told[0]
    assert _fallback_warnings(lambda: _run(another, backend)) == []  # once per process
    assert compiled_for_hits == module.COMPILED, "a compile hook was called for a miss"
    report = sdk.explain(other, torch.randn(8, 16), backend=backend)
    why = "not in the cache, and sdk:acme cannot compile on this machine: no acme compiler"
    text = report.text(verbose=True)  # (lines of any length: the phrase on one)
    assert why in text, text  # (a graph's fallbacks, or its partition's note)
    assert report.graphs[0].generated_fraction == 0, str(report)
    with pytest.raises(Exception, match="cannot compile on this machine"):
        _run(another, sdk.backend("acme", fallback=False))

"""A graph-level plugin's partition compile in a worker process (``PluginInfo.isolate_compile``,
the ``isolate_compile`` option): a vendor compiler that aborts takes the worker, not the user's
process, and the partition runs in ATen with the signal in ``sdk.explain``'s reason; a compile
that works comes back as its artifact, which the plugin's ``sdk_load_subgraph`` loads here.

The plugin ``vendorg`` "compiles" a partition by pickling its GraphModule (the artifact, with
the process id that compiled it); its load unpickles it. Results are compared with eager.
"""

from __future__ import annotations

import importlib
import os
import re

import pytest
import torch

import sdk

VENDOR = """
    import os
    import pickle
    import sys

    import torch
    import sdk

    ISOLATE = {isolate!r}
    CRASH = {crash!r}      # the compile prints a check's failure and aborts
    HANG = {hang!r}        # the compile never returns
    ARTIFACT = {artifact!r}
    loaded = []            # per load: what the compile saw, sent back in its artifact

    @sdk.hookimpl
    def sdk_plugin_info():
        return sdk.PluginInfo(
            name="vendorg", version="0.1", hook_api=sdk.HOOK_API_VERSION,
            device_types=("cpu",), kind=sdk.PluginKind.GRAPH, isolate_compile=ISOLATE,
        )

    @sdk.hookimpl
    def sdk_claim_nodes(ctx, gm):
        return {{n: sdk.Support.yes() for n in gm.graph.nodes if n.op == "call_function"}}

    @sdk.hookimpl
    def sdk_compile_subgraph(ctx, gm, example_inputs):
        if HANG:
            print("waiting for a license server", file=sys.stderr, flush=True)
            import time
            time.sleep(3600)
        if CRASH:
            print("Check 'false' failed at src/vendor.cpp:151:", file=sys.stderr)
            print("  no kernel for this layout", file=sys.stderr, flush=True)
            os.abort()
        calls = [n for n in gm.graph.nodes if n.op == "call_function"]
        saw = {{
            "pid": os.getpid(),
            "shapes": [tuple(x.shape) for x in example_inputs],
            "vals": all(isinstance(n.meta.get("val"), torch.Tensor) for n in calls),
            "graph": ctx.graph_name,
        }}
        ctx.note(f"compiled by pid {{os.getpid()}}")
        blob = pickle.dumps((saw, gm)) if ARTIFACT else None
        return sdk.CompiledSubgraph(fn=gm, artifact=blob)

    @sdk.hookimpl
    def sdk_load_subgraph(ctx, artifact):
        saw, gm = pickle.loads(artifact)
        loaded.append(saw)
        return gm
"""


@pytest.fixture
def vendor(make_plugin, fake_dist, use_registry):
    """``vendor(isolate=..., crash=..., artifact=...) -> the plugin's module``, installed as
    ``sdk:vendorg``."""

    def make(isolate: bool = True, crash: bool = False, artifact: bool = True, hang: bool = False):
        source = VENDOR.format(isolate=isolate, crash=crash, artifact=artifact, hang=hang)
        name = make_plugin(source, name="vendorg", head=False)
        use_registry(fake_dist("acme-vendorg", {"vendorg": name}))
        return importlib.import_module(name)

    return make


def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * y + 1


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 8), torch.randn(4, 8)


def _partitions(report: sdk.report.ExplainReport) -> list:
    parts = [p for g in report.graphs for p in g.partitions]
    assert parts, str(report)
    return parts


def test_an_aborting_compiler_takes_its_worker_and_the_partition_runs_in_aten(vendor):
    """os.abort() in the vendor's compile: this process lives on, the partition runs in ATen
    with results equal to eager's, and explain's reason names the signal and quotes what the
    compiler printed last."""
    vendor(isolate=True, crash=True)
    backend = sdk.backend("vendorg")
    with pytest.warns(sdk.PluginFallbackWarning, match="SIGABRT"):
        report = sdk.explain(fn, *_inputs(), backend=backend)
        x, y = _inputs()
        torch.testing.assert_close(torch.compile(fn, backend=backend)(x, y), fn(x, y))
    for p in _partitions(report):
        assert p.plugin == "vendorg" and p.compiled_by == "aten", str(report)
        assert "crashed its worker process" in p.note, p.note
        assert "killed by SIGABRT (signal 6)" in p.note, p.note
        assert "no kernel for this layout" in p.note, p.note  # the compiler's last words
    assert "SIGABRT" in str(report)


def test_a_hanging_compiler_is_killed_after_the_timeout_and_the_partition_runs_in_aten(vendor):
    """A compile that never returns: its worker is killed after ``isolate_timeout_s``, the
    partition runs in ATen (results equal to eager's) and the reason says so, with the fix."""
    vendor(isolate=True, hang=True)
    backend = sdk.backend("vendorg", isolate_timeout_s=4)
    x, y = _inputs()
    with pytest.warns(sdk.PluginFallbackWarning, match="did not finish within 4 s"):
        got = torch.compile(fn, backend=backend)(x, y)
    torch.testing.assert_close(got, fn(x, y))
    with pytest.raises(sdk.OptionError, match="isolate_timeout_s"):
        torch.compile(fn, backend=sdk.backend("vendorg", isolate_timeout_s=0))(x, y)


def test_an_isolated_compile_comes_back_as_its_artifact(vendor):
    """The compile runs in another process on the partition's graph (fake values on every
    call node, the inputs' shapes); the artifact is loaded here, its notes kept; the results
    equal eager's."""
    plugin = vendor(isolate=True)
    backend = sdk.backend("vendorg")
    report = sdk.explain(fn, *_inputs(), backend=backend)
    x, y = _inputs()
    torch.testing.assert_close(torch.compile(fn, backend=backend)(x, y), fn(x, y))
    assert plugin.loaded, "sdk_load_subgraph was not called"
    for saw in plugin.loaded:
        assert saw["pid"] != os.getpid(), saw
        assert saw["vals"] and saw["shapes"] == [(4, 8), (4, 8)], saw
    for p in _partitions(report):
        assert p.compiled_by == "vendorg", str(report)
        assert "compiled by pid" in p.note and f"pid {os.getpid()}" not in p.note, p.note


@pytest.mark.parametrize("declared", [False, True])
def test_the_user_option_overrides_the_plugin_declaration(vendor, declared):
    """``isolate_compile=True`` isolates a plugin that did not ask for it; ``False`` compiles
    a plugin that did ask in this process."""
    plugin = vendor(isolate=declared)
    backend = sdk.backend("vendorg", isolate_compile=not declared)
    x, y = _inputs()
    torch.testing.assert_close(torch.compile(fn, backend=backend)(x, y), fn(x, y))
    if declared:  # in process: compiled and used as it is, nothing loaded
        assert not plugin.loaded
    else:
        assert plugin.loaded and all(s["pid"] != os.getpid() for s in plugin.loaded)


def test_an_isolated_compile_without_an_artifact_falls_back_naming_the_contract(vendor):
    vendor(isolate=True, artifact=False)
    backend = sdk.backend("vendorg")
    with pytest.warns(sdk.PluginFallbackWarning, match="returned no artifact"):
        report = sdk.explain(fn, *_inputs(), backend=backend)
    for p in _partitions(report):
        assert p.compiled_by == "aten" and "sdk_load_subgraph turns into fn" in p.note, p.note


@pytest.mark.parametrize("isolate", [False, True])
def test_explain_shows_each_partitions_compile_time(vendor, isolate):
    """Per partition: the seconds its compile took, and of those the plugin's
    sdk_compile_subgraph (in the worker, where isolated: less than the whole, which starts
    the worker)."""
    vendor(isolate=isolate)
    report = sdk.explain(fn, *_inputs(), backend=sdk.backend("vendorg"))
    for p in _partitions(report):
        assert 0 < p.plugin_seconds <= p.compile_seconds, p
        if isolate:
            assert p.plugin_seconds < p.compile_seconds, p
    assert re.search(r"compiled in \d+\.\d\ds \(sdk_compile_subgraph \d+\.\d\ds\)", str(report))

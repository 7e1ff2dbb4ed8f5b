"""Measured kernel choices (core/tune.py, ``sdk_kernel_choices``, hook API 6): the plugin
offers alternatives, the core times them on its own buffers and keeps the fastest; the choice
is stored with the program, so a cache hit and a warm start measure nothing; the budget bounds
the measuring (0: none); ``sdk.explain`` shows it; results are eager's.

The vendor below renders with the C++ plugin's code generator and offers, for each kernel,
variants of real and different cost: the same kernel followed by a wait of its own
length (the rendered one waits 30 ms, ``fast`` 2 ms: more than the noise of a loaded
machine).
"""

from __future__ import annotations

import time

import pytest
import torch

import sdk

VENDOR = """
import dataclasses
import time

import sdk
from sdk.plugins import cpu_cpp
from sdk.plugins.cpu_cpp import sdk_render_kernel  # noqa: F401

#: seconds a call of each variant waits after the kernel ("rendered": the kernel as rendered)
WAIT = {"rendered": 0.03, "slow": 0.06, "fast": 0.002, "slower": 0.09, "wrong": 0.0}
#: what this process did: kernels offered choices, variants compiled, calls per variant
LOG = {"asked": [], "compiled": [], "calls": {}}


@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(
        name="tuned", version="1.0", hook_api=6, device_types=("cpu",),
        capabilities=frozenset({sdk.Capability.REDUCTIONS, sdk.Capability.MULTI_STAGE}),
        options={
            "offer": sdk.OptionSpec(True, "offer kernel choices", bool),
            "raise_in_choices": sdk.OptionSpec(False, "sdk_kernel_choices raises", bool),
            "offer_wrong": sdk.OptionSpec(False, "offer a variant that computes garbage", bool),
            "tag": sdk.OptionSpec(0, "changes nothing but the cache key", int),
        },
    )


@sdk.hookimpl
def sdk_cache_key(ctx):
    return "tuned-1|" + cpu_cpp.sdk_cache_key(ctx=ctx)


def _waiting(fn, variant):
    wait = WAIT[variant]

    def call(*args):
        LOG["calls"][variant] = LOG["calls"].get(variant, 0) + 1
        fn(*args)
        if variant == "wrong":  # the outputs (and inputs) overwritten
            for a in args:
                a.fill_(7)
        if wait:
            time.sleep(wait)  # (a busy wait would compete with OpenMP's spinning threads)

    return call


@sdk.hookimpl
def sdk_compile_kernels(ctx, sources):
    # a kernel's variants share its source and entry: each is built once
    unique = {}
    for s in sources:
        unique.setdefault((s.entry, s.source), s)
    built = dict(zip(unique, cpu_cpp.sdk_compile_kernels(ctx=ctx, sources=list(unique.values()))))
    out = []
    for s in sources:
        variant = s.meta.get("variant", "rendered")
        if variant != "rendered":
            LOG["compiled"].append(variant)
        out.append(_waiting(built[(s.entry, s.source)], variant))
    return out


@sdk.hookimpl
def sdk_kernel_choices(ctx, kernel, source):
    LOG["asked"].append(kernel.name)
    if ctx.plugin_options.raise_in_choices:
        raise RuntimeError("no choices today")
    if not ctx.plugin_options.offer:
        return None
    alts = [
        sdk.KernelVariant(v, dataclasses.replace(source, meta={**source.meta, "variant": v}))
        for v in ("slow", "fast", "slower") + (("wrong",) if ctx.plugin_options.offer_wrong else ())
    ]
    return sdk.KernelChoices(alts, default="rendered")
"""


@pytest.fixture
def tuned(make_plugin, fake_dist, use_registry):
    mod = make_plugin(VENDOR, name="tuned", head=False)
    use_registry(fake_dist("tuned-sdk-plugin", {"tuned": mod}))
    vendor = __import__(mod)
    yield vendor.LOG
    # (the module is dropped from sys.modules by make_plugin)


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))


def f(x, y, z):
    a = (x * y).relu()  # a kernel moving 6 MiB
    b = a @ z  # a library call between the kernels
    return b.sin() + 1.0, (a - y).sum(-1)  # kernels of 2 MiB and more


def _inputs():
    g = torch.Generator().manual_seed(0)
    return (
        torch.randn(512, 1024, generator=g),
        torch.randn(512, 1024, generator=g),
        torch.randn(1024, 512, generator=g) / 32,
    )


def _explain(**options):
    torch._dynamo.reset()
    return sdk.explain(f, *_inputs(), backend="sdk:tuned", **options)


def _reset(log):
    log["asked"].clear()
    log["compiled"].clear()
    log["calls"].clear()


def _check_results(**options):
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=sdk.backend("tuned", **options))
    args = _inputs()
    for got, want in zip(compiled(*args), f(*args), strict=True):
        torch.testing.assert_close(got, want)


def test_the_measured_fastest_is_kept_and_runs(tuned):
    report = _explain(tune_budget_s=30.0)
    (graph,) = report.graphs
    assert graph.choices, str(report)
    assert len(graph.choices) == len(tuned["asked"]) >= 2, str(report)
    for c in graph.choices:
        assert c.chosen == "fast" and not c.reused, str(c)
        times = dict(c.times)
        assert set(times) == {"rendered", "slow", "fast", "slower"}, str(c)
        # the waits' order is the times' order
        assert times["fast"] < times["rendered"] < times["slower"], str(c)
        assert c.bytes >= 2**20
    # largest first
    assert [c.bytes for c in graph.choices] == sorted(
        (c.bytes for c in graph.choices), reverse=True
    )
    text = str(report)
    assert "kernel choices: 2 kernels measured" in text or "kernels measured" in text, text
    assert "fast*" in text and "-> fast" in text, text
    # the program runs the chosen variants only, and computes what eager does
    torch._dynamo.reset()
    # (runner pinned: the calls are counted, and runner='check' runs each kernel twice)
    backend = sdk.backend("tuned", tune_budget_s=30.0, runner="native")
    compiled = torch.compile(f, backend=backend)
    args = _inputs()
    compiled(*args)  # (compiles, measuring)
    _reset(tuned)
    for got, want in zip(compiled(*args), f(*args), strict=True):
        torch.testing.assert_close(got, want)
    assert tuned["calls"] == {"fast": 2}, tuned["calls"]


def test_results_equal_the_untuned_program_and_eager(tuned):
    args = _inputs()
    outs = []
    for budget in (0, 30.0):
        torch._dynamo.reset()
        outs.append(torch.compile(f, backend=sdk.backend("tuned", tune_budget_s=budget))(*args))
    for a, b, want in zip(*outs, f(*args), strict=True):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, want)


def test_an_alternative_that_computes_something_else_is_left_out(tuned):
    report = _explain(tune_budget_s=30.0, offer_wrong=True)
    (graph,) = report.graphs
    assert graph.choices, str(report)
    for c in graph.choices:
        assert c.chosen == "fast" and dict(c.times)["wrong"] is None, str(c)
        assert any(lab == "wrong" and "differs from the rendered" in why for lab, why in c.errors)
    assert "wrong: left out: its" in str(report), str(report)
    _check_results(tune_budget_s=30.0, offer_wrong=True)


def test_a_budget_of_zero_measures_nothing(tuned):
    report = _explain(tune_budget_s=0)
    assert not tuned["asked"] and not tuned["compiled"], tuned
    assert not report.graphs[0].choices and not report.graphs[0].tuning
    assert "kernel choices" not in str(report)


def test_the_budget_bounds_the_measuring(tuned):
    """Each kernel's measuring takes about 6 calls of each of its four candidates (over a
    second of waits). A budget under one kernel's predicted measuring (at least
    ``PRIOR_MEASURE_S``) starts none; a budget that covers the prediction measures at most
    one kernel, stops timing its candidates when the budget is spent, and says the rest
    were not measured."""
    from sdk.core import tune

    tiny = _explain(tune_budget_s=tune.PRIOR_MEASURE_S / 10)
    (graph,) = tiny.graphs
    assert not graph.choices and not tuned["compiled"], str(tiny)
    assert "not measured: the budget would not cover them" in graph.tuning, graph.tuning
    start = time.perf_counter()
    report = _explain(tune_budget_s=tune.PRIOR_MEASURE_S * 1.5)
    took = time.perf_counter() - start
    (graph,) = report.graphs
    assert len(graph.choices) <= 1 and len(tuned["asked"]) <= 3, str(report)
    assert "not measured: the budget would not cover them" in graph.tuning, graph.tuning
    for c in graph.choices:  # the budget ran out during that kernel: the rest are not timed
        assert any("budget" in why for _, why in c.errors), str(c)
        assert sum(s is not None for _, s in c.times) <= 2, str(c)
    full_start = time.perf_counter()
    full = _explain(tune_budget_s=30.0)
    assert len(full.graphs[0].choices) == 2, str(full)
    assert took < time.perf_counter() - full_start, "the small budget measured less"


def test_a_plugin_that_offers_nothing_is_not_measured(tuned):
    report = _explain(tune_budget_s=30.0, offer=False)
    assert tuned["asked"] and not tuned["compiled"], tuned
    assert not report.graphs[0].choices and "kernel choices" not in str(report)


def test_a_raising_hook_is_a_fault_and_the_kernels_stay_as_rendered(tuned):
    with pytest.warns(sdk.PluginHookWarning, match="sdk_kernel_choices"):
        report = _explain(tune_budget_s=30.0, raise_in_choices=True)
    (graph,) = report.graphs
    assert not graph.choices
    assert any(h.hook == "sdk_kernel_choices" for h in graph.hook_faults), str(report)
    with pytest.raises(Exception, match="sdk_kernel_choices"):
        _explain(tune_budget_s=30.0, raise_in_choices=True, fallback=False)


def test_a_cache_hit_and_a_warm_start_measure_nothing(tuned, cache_on):
    first = _explain(tune_budget_s=30.0)
    assert [g.cache for g in first.graphs] == ["stored"], str(first)
    assert tuned["asked"] and tuned["compiled"]
    measured = [(c.kernel, c.chosen) for c in first.graphs[0].choices]
    _reset(tuned)
    again = _explain(tune_budget_s=30.0)
    assert [(g.warm, g.cache) for g in again.graphs] == [("hit", "hit")], str(again)
    # the stored sources (the chosen variants) are compiled; nothing is offered nor timed
    assert not tuned["asked"] and set(tuned["compiled"]) == {"fast"}, tuned
    assert not {"slow", "slower", "rendered"} & set(tuned["calls"]), tuned["calls"]
    # explain shows what the cold compile measured
    assert [(c.kernel, c.chosen) for c in again.graphs[0].choices] == measured
    assert "(at the cold compile)" in again.graphs[0].tuning, str(again)
    _check_results(tune_budget_s=30.0)


def test_another_graph_with_the_same_kernels_reuses_the_choice(tuned, cache_on):
    first = _explain(tune_budget_s=30.0)
    _reset(tuned)
    # another whole-graph key (a plugin option that changes nothing), the same kernels
    other = _explain(tune_budget_s=30.0, tag=1)
    assert [g.cache for g in other.graphs] == ["stored"], str(other)
    choices = other.graphs[0].choices
    assert choices and all(c.reused and c.chosen == "fast" for c in choices), str(other)
    assert [c.times for c in choices] == [c.times for c in first.graphs[0].choices]
    # the chosen variant compiled once per kernel, nothing timed
    assert set(tuned["compiled"]) == {"fast"}, tuned
    assert not {"slow", "slower"} & set(tuned["calls"]), tuned["calls"]
    assert "reused" in str(other)


def test_the_budget_option_is_checked():
    with pytest.raises(sdk.OptionError, match="tune_budget_s"):
        sdk.backend("cpu_cpp", tune_budget_s=-1)
    with pytest.raises(sdk.OptionError, match="tune_budget_s"):
        sdk.backend("cpu_cpp", tune_budget_s="fast")

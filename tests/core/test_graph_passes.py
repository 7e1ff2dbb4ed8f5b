"""Graph passes (core/passes, hook API 5): the core's rewrites of the ATen graph before
lowering are named, listed in ``sdk.explain`` with what each changed, and a plugin turns
them off or adds its own through ``sdk_graph_passes``. The plugin here is written as a vendor
would write one: cpu_cpp's kernels, and a switch (``MODE``) choosing its answer."""

from __future__ import annotations

import pytest
import torch

import sdk
from sdk import HookFault, PassReport
from tests import models
from tests.plugins_under_test import _triton_available

VENDOR = """
import torch

import sdk
import sdk.cache
from sdk.plugins import cpu_cpp
from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

aten = torch.ops.aten
MODE = {"answer": "none"}


@sdk.hookimpl
def sdk_plugin_info():
    return sdk.PluginInfo(
        name="passy", version="0.1", hook_api=5, device_types=("cpu",),
        capabilities=frozenset({
            sdk.Capability.REDUCTIONS, sdk.Capability.MULTI_STAGE, sdk.Capability.STORE_THEN_LOAD,
        }),
        description="cpu_cpp's kernels, its own graph passes",
    )


@sdk.hookimpl
def sdk_cache_key(ctx):
    return cpu_cpp.sdk_cache_key(ctx) + sdk.cache.source_digest(__name__)


def double_to_add(gm, ctx):
    # x * 2 as x + x (the same bits) for floating x
    count = 0
    for n in gm.graph.nodes:
        if n.op != "call_function" or n.target is not aten.mul.Tensor or n.args[1] != 2:
            continue
        x = n.args[0]
        if x.meta["val"].dtype == n.meta["val"].dtype and x.meta["val"].is_floating_point():
            n.target, n.args = aten.add.Tensor, (x, x)
            count += 1
    return count


def sin_to_cos_then_raise(gm, ctx):
    # changes what the graph computes, then fails: the core must not keep the change
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is aten.sin.default:
            n.target = aten.cos.default
    raise RuntimeError("the vendor's pass broke")


def node_without_val(gm, ctx):
    out = next(n for n in gm.graph.nodes if n.op == "output")
    with gm.graph.inserting_before(out):
        gm.graph.call_function(aten.neg.default, (next(iter(gm.graph.nodes)),))
    return 1


def a_string(gm, ctx):
    return "one"


FAULTY = {"raises": sin_to_cos_then_raise, "no_val": node_without_val, "count": a_string}


@sdk.hookimpl
def sdk_graph_passes(ctx, passes):
    answer = MODE["answer"]
    if answer == "none":
        return None
    if answer == "relu_off":
        return [p for p in passes if p.name != "relu_into_addmm"]
    if answer == "permutations_off":
        return [p for p in passes if p.name != "accumulate_over_permutations"]
    mine = sdk.GraphPass("double_to_add", "x * 2 as x + x", double_to_add)
    if answer == "add":
        return [*passes, mine]
    if answer in FAULTY:
        bad = sdk.GraphPass("faulty", "fails", FAULTY[answer])
        return [*passes, bad, mine]
    if answer == "strings":
        return [p.name for p in passes]
    raise AssertionError(answer)
"""


@pytest.fixture
def passy(make_plugin, fake_dist, use_registry):
    module = make_plugin(VENDOR, head=False)
    use_registry(fake_dist("passy-sdk-plugin", {"passy": module}))
    mod = __import__(module)
    yield mod
    mod.MODE["answer"] = "none"


def _externs(report) -> list[str]:
    return [e.op for g in report.graphs for e in g.externs]


def _kernel_ops(report) -> list[str]:
    return [op for g in report.graphs for k in g.kernels for op in k.ops]


def test_explain_lists_the_core_passes_and_what_each_changed():
    """cpu_cpp (no bias preferences) runs relu_into_addmm, accumulate_over_permutations and
    max_pool_offsets: two ReLUs fused in the forward, none to fuse in the backward, no
    accumulation, no max pooling."""
    model, x = models.mlp(16, 32, 32, act=torch.nn.ReLU, act_last=True, seed=0), torch.randn(8, 16)
    report = sdk.explain(model, x, backend="sdk:cpu_cpp")
    passes = {g.kind: g.passes for g in report.graphs}
    idle = [PassReport("accumulate_over_permutations", 0), PassReport("max_pool_offsets", 0)]
    assert passes == {
        "forward": [PassReport("relu_into_addmm", 2), *idle],
        "backward": [PassReport("relu_into_addmm", 0), *idle],
    }, passes
    forward, backward = (str(g).splitlines() for g in report.graphs)
    assert "  passes: relu_into_addmm: 2 rewrites" in forward, str(report)
    # a pass that rewrote nothing is not listed (the backward has no ReLU after a product)
    assert not [ln for ln in backward if "passes:" in ln or "0 rewrites" in ln], str(report)
    assert _externs(report).count("aten._addmm_activation.default") == 2


class _LinearAndConv(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.up, self.down = torch.nn.Linear(4, 8), torch.nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv(x)).mean((2, 3))
        return self.down(torch.nn.functional.gelu(self.up(h)))


@pytest.mark.skipif(not _triton_available(), reason="Triton missing")
def test_preferences_add_the_bias_passes_to_the_list():
    """cuda_triton prefers mm_bias_in_kernel and conv_bias_in_kernel (sdk_preferences): its list has the two
    bias passes, each with its count (the last product is a graph output: kept whole)."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model, x = _LinearAndConv().to(dev).eval(), torch.randn(2, 3, 6, 6, device=dev)
    with torch.no_grad():
        report = sdk.explain(model, x, backend="sdk:cuda_triton")
        torch.testing.assert_close(
            torch.compile(model, backend=sdk.backend("cuda_triton"))(x),
            model(x),
            rtol=1e-4,
            atol=1e-4,
        )
    (graph,) = report.graphs
    assert graph.passes == [
        PassReport("relu_into_addmm", 0),
        PassReport("mm_bias_into_kernel", 1),
        PassReport("conv_bias_into_kernel", 1),
        PassReport("accumulate_over_permutations", 0),
        PassReport("max_pool_offsets", 0),
    ], graph.passes
    assert sorted(_externs(report)) == [
        "aten.addmm.default",
        "aten.convolution.default",
        "aten.mm.default",
    ], str(report)


def test_a_plugin_turning_off_relu_into_addmm_gets_an_unfused_relu(passy):
    model, x = models.mlp(16, 32, 32, act=torch.nn.ReLU, act_last=True, seed=0), torch.randn(8, 16)
    with torch.no_grad():
        passy.MODE["answer"] = "relu_off"
        off = sdk.explain(model, x, backend="sdk:passy")
        torch.testing.assert_close(torch.compile(model, backend=sdk.backend("passy"))(x), model(x))
        passy.MODE["answer"] = "none"
        torch._dynamo.reset()  # (explain reuses what was compiled: the plugin answers anew)
        on = sdk.explain(model, x, backend="sdk:passy")
    assert _externs(off) == ["aten.addmm.default"] * 2, str(off)
    assert _kernel_ops(off).count("aten.relu.default") == 2, str(off)
    assert off.graphs[0].passes == [
        PassReport("accumulate_over_permutations", 0),
        PassReport("max_pool_offsets", 0),
        PassReport("relu_into_addmm", 0, off=True),
    ]
    assert "passes: relu_into_addmm: off" in str(off)
    # the same plugin, the pass on: the ReLUs in the library calls
    assert _externs(on) == ["aten._addmm_activation.default"] * 2, str(on)
    assert "aten.relu.default" not in _kernel_ops(on)


def _routed(x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    # each row of x gathered twice, in the order of a sort: the backward accumulates
    # through the sort's indices over 2
    perm = torch.sort(keys).indices
    return (x[perm // 2] * keys.unsqueeze(1)).sum()


def test_a_plugin_turning_off_the_permutation_pass_keeps_the_accumulation(passy):
    """The pass runs on AOTAutograd's joint graph too: turned off, it is off there as well,
    and the backward accumulates through ATen's index_put (the same result)."""
    x, keys = torch.randn(100, 3), torch.randn(200)  # (over 64 rows: not the one-hot form)
    grads = {}
    for answer in ("permutations_off", "none"):
        passy.MODE["answer"] = answer
        torch._dynamo.reset()
        report = sdk.explain(_routed, x.clone().requires_grad_(), keys, backend="sdk:passy")
        xc = x.clone().requires_grad_()
        torch.compile(_routed, backend=sdk.backend("passy"))(xc, keys).backward()
        grads[answer] = (report.graphs[1], xc.grad)
    off, on = grads["permutations_off"][0], grads["none"][0]
    assert PassReport("accumulate_over_permutations", 0, off=True) in off.passes
    assert PassReport("accumulate_over_permutations", 1) in on.passes
    assert "index_put" in " ".join(e.op for e in off.externs), str(off)
    xe = x.clone().requires_grad_()
    _routed(xe, keys).backward()
    for _, grad in grads.values():
        torch.testing.assert_close(grad, xe.grad)


def _doubled(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2


def test_a_plugin_adds_its_own_pass(passy):
    """The plugin's pass runs after the core's: the kernel adds where the graph multiplied
    (the same bits), and explain names the pass and its plugin."""
    passy.MODE["answer"] = "add"
    x = torch.randn(5, 7)
    report = sdk.explain(_doubled, x, backend="sdk:passy")
    (graph,) = report.graphs
    assert graph.passes == [
        PassReport("relu_into_addmm", 0),
        PassReport("accumulate_over_permutations", 0),
        PassReport("max_pool_offsets", 0),
        PassReport("double_to_add", 1, "passy"),
    ], graph.passes
    assert "double_to_add (sdk:passy): 1 rewrite" in str(report)
    ops = _kernel_ops(report)
    assert "aten.add.Tensor" in ops and "aten.mul.Tensor" not in ops, ops
    got = torch.compile(_doubled, backend=sdk.backend("passy"))(x)
    torch.testing.assert_close(got, _doubled(x))
    passy.MODE["answer"] = "none"  # the kernel multiplies: the same bits
    torch._dynamo.reset()
    assert torch.equal(got, torch.compile(_doubled, backend=sdk.backend("passy"))(x))


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("raises", "RuntimeError: the vendor's pass broke"),
        ("no_val", "left call node neg"),
        ("count", "returned 'one'"),
    ],
)
def test_a_faulty_pass_is_the_plugins_fault_and_the_graph_compiles_without_it(passy, mode, error):
    """The pass is left out, the passes run again from the graph as it was (the sin its
    failed run had turned into cos is a sin again), the other passes still run, and the
    fault is the plugin's in the report."""
    passy.MODE["answer"] = mode
    x = torch.randn(5, 7)
    with pytest.warns(sdk.PluginHookWarning, match="faulty"):
        report = sdk.explain(_doubled, x, backend="sdk:passy")
    (graph,) = report.graphs
    (fault,) = graph.hook_faults
    assert (fault.plugin, fault.hook) == ("passy", "pass faulty (sdk_graph_passes)"), fault
    assert error in fault.error, fault
    assert isinstance(fault, HookFault)
    names = ["relu_into_addmm", "accumulate_over_permutations", "max_pool_offsets", "double_to_add"]
    assert [p.name for p in graph.passes] == names
    assert graph.kernels and not graph.fallbacks, str(report)
    assert "aten.sin.default" in _kernel_ops(report), str(report)
    torch._dynamo.reset()
    got = torch.compile(_doubled, backend=sdk.backend("passy"))(x)
    torch.testing.assert_close(got, _doubled(x))


def test_a_faulty_pass_raises_in_strict_mode(passy):
    passy.MODE["answer"] = "raises"
    with pytest.raises(Exception) as info:  # (inside torch's BackendCompilerFailed)
        sdk.explain(_doubled, torch.randn(5, 7), backend="sdk:passy", fallback=False)
    error = info.value
    while error is not None and not isinstance(error, sdk.PluginHookError):
        error = getattr(error, "inner_exception", None) or error.__cause__
    assert error is not None and "pass faulty" in str(error), repr(info.value)


def test_an_answer_that_is_not_passes_fails_the_graph_for_the_plugin(passy):
    """As any compile hook's bad answer: the graph runs in ATen, the reason (and the
    PluginFallbackWarning) naming the plugin and the hook."""
    passy.MODE["answer"] = "strings"
    x = torch.randn(5, 7)
    told = "'passy'.*in ATen instead.*sdk:passy sdk_graph_passes answered a str"
    with pytest.warns(sdk.PluginFallbackWarning, match=told):
        report = sdk.explain(_doubled, x, backend="sdk:passy")
    (graph,) = report.graphs
    assert not graph.kernels and graph.fallbacks, str(report)
    assert all("sdk:passy sdk_graph_passes answered a str" in f.reason for f in graph.fallbacks)
    assert graph.passes == []


def test_the_graph_cache_keys_a_program_on_its_passes(passy, tmp_path, monkeypatch):
    """A program compiled with the ReLU pass on is not served to a compile with it off; a
    hit reports the passes its program was compiled with."""
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    model = models.mlp(16, 32, 32, act=torch.nn.ReLU, act_last=True, seed=0).eval()
    x = torch.randn(8, 16)

    def explain():
        torch._dynamo.reset()
        # no warm start (torch's AOTAutograd cache, keyed on sdk_cache_key, which this
        # plugin's switch is outside): each compile looks the program up by its graph
        with torch.no_grad(), torch.compiler.config.patch(force_disable_caches=True):
            return sdk.explain(model, x, backend="sdk:passy").graphs[0]

    first = explain()
    assert (first.cache, first.passes) == (
        "stored",
        [
            PassReport("relu_into_addmm", 2),
            PassReport("accumulate_over_permutations", 0),
            PassReport("max_pool_offsets", 0),
        ],
    )
    passy.MODE["answer"] = "relu_off"
    off = explain()
    assert off.cache == "stored", off.cache
    assert [e.op for e in off.externs] == ["aten.addmm.default"] * 2
    passy.MODE["answer"] = "none"
    again = explain()
    assert again.cache == "hit", again.cache
    assert again.passes == first.passes
    assert [e.op for e in again.externs] == ["aten._addmm_activation.default"] * 2


def test_a_graph_pass_checks_its_fields():
    with pytest.raises(ValueError, match="Python identifier"):
        sdk.GraphPass("two words", "x", lambda gm, ctx: 0)
    with pytest.raises(ValueError, match="one line"):
        sdk.GraphPass("fold", "one\ntwo", lambda gm, ctx: 0)
    with pytest.raises(TypeError, match="callable"):
        sdk.GraphPass("fold", "x", None)


def test_a_warm_start_serves_no_program_of_other_passes(passy, tmp_path, monkeypatch):
    """torch's AOTAutograd cache hits (the plugin's switch is outside its sdk_cache_key), and
    the program its recipe names was compiled with the ReLU pass on: with the pass off, that
    program is not served, and the graph is compiled again."""
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    model = models.mlp(16, 32, 32, act=torch.nn.ReLU, act_last=True, seed=0).eval()
    x = torch.randn(8, 16)

    def explain():
        torch._dynamo.reset()
        with torch.no_grad():
            return sdk.explain(model, x, backend="sdk:passy").graphs[0]

    assert [e.op for e in explain().externs] == ["aten._addmm_activation.default"] * 2
    passy.MODE["answer"] = "relu_off"
    off = explain()
    assert off.warm == "hit", off.warm
    assert [e.op for e in off.externs] == ["aten.addmm.default"] * 2, str(off)
    assert off.passes == [
        PassReport("accumulate_over_permutations", 0),
        PassReport("max_pool_offsets", 0),
        PassReport("relu_into_addmm", 0, off=True),
    ]

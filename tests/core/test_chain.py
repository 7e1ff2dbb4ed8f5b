"""Per-op chains (core/chain.py): one ATen graph split between the plugins of a chain.

Each op goes to the first plugin of ``[backend, *options["chain"]]`` that claims it, what nobody
claims runs in ATen, a partition whose compile fails goes to the next plugin. Checked on
fresh random inputs against eager, forward and backward, and through ``sdk.explain``'s report
(placements, partitions), not logs. The kernel-level plugin ``picky`` is cpu_cpp's codegen with
an ``sdk_op_support`` that refuses tanh; the graph-level plugin ``graphy`` claims pointwise
ops and "compiles" a partition by running its GraphModule (the routing is what is under test;
examples/iree_vendor is the real graph-level compiler).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import sdk
from tests import fresh

PICKY = """
    import torch
    from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

    @sdk.hookimpl
    def sdk_op_support(ctx, op, node):
        if "tanh" in str(op):
            return sdk.Support.no("picky takes no tanh")
        return None
"""

GRAPHY = """
    import torch

    POINTWISE = {{"mul", "add", "sin", "cos", "neg", "sub"}}
    FAIL_ON = {fail_on!r}
    STATIC_ONLY = {static_only!r}
    compiled = []

    @sdk.hookimpl
    def sdk_claim_nodes(ctx, gm):
        claims = {{}}
        for n in gm.graph.nodes:
            if n.op == "call_function":
                name = getattr(n.target, "__name__", "").split(".")[0]
                claims[n] = (
                    sdk.Support.yes() if name in POINTWISE else sdk.Support.no(f"graphy: no {{name}}")
                )
        return claims

    @sdk.hookimpl
    def sdk_compile_subgraph(ctx, gm, example_inputs):
        ops = {{getattr(n.target, "__name__", "").split(".")[0] for n in gm.graph.nodes}}
        if ops & FAIL_ON:
            raise RuntimeError(f"fault injected in a partition with {{sorted(ops & FAIL_ON)}}")
        sizes = [d for x in example_inputs if isinstance(x, torch.Tensor) for d in x.shape]
        if STATIC_ONLY and any(isinstance(d, torch.SymInt) for d in sizes):
            raise NotImplementedError("graphy compiles static shapes only")
        compiled.append(ctx.graph_name)
        return sdk.CompiledSubgraph(fn=gm)
"""


SYMBOLIC_INFO = """
    @sdk.hookimpl
    def sdk_plugin_info():
        return sdk.PluginInfo(name="graphy", version="0.0.1", hook_api=sdk.HOOK_API_VERSION,
                              device_types=("cpu",), kind=sdk.PluginKind.GRAPH,
                              capabilities=frozenset({sdk.Capability.SYMBOLIC_SIZES}))
"""


@pytest.fixture
def chain_world(make_plugin, fake_dist, use_registry):
    """``chain_world(fail_on=()) -> module of graphy``: picky and graphy installed."""

    def make(fail_on: tuple[str, ...] = (), static_only: bool = False, symbolic: bool = False):
        import importlib

        picky = make_plugin(PICKY, name="picky")
        source = GRAPHY.format(fail_on=set(fail_on), static_only=static_only)
        if symbolic:  # it declares Capability.SYMBOLIC_SIZES (a later sdk_plugin_info wins)
            source += SYMBOLIC_INFO
        graphy = make_plugin(source, name="graphy", kind="GRAPH")
        use_registry(fake_dist("acme-chain", {"picky": picky, "graphy": graphy}))
        return importlib.import_module(graphy)

    return make


def mlp_tanh(x, w):
    y = torch.tanh(x @ w) * 2 + 1
    return (y.sin() * x).sum(dim=1)


def _compare(fn, backend, *shapes, dynamic=False):
    """Compile ``fn``, run it and its backward on fresh inputs, compare with eager; the
    ExplainReport of the compile."""
    args = [torch.randn(*s, requires_grad=True) for s in shapes]
    report = sdk.explain(fn, *args, backend=backend, dynamic=dynamic or None)
    compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
    fresh = [torch.randn(*s, requires_grad=True) for s in shapes]
    out = compiled(*fresh)
    out.sum().backward()
    grads = [a.grad for a in fresh]
    ref_args = [a.detach().clone().requires_grad_() for a in fresh]
    ref = fn(*ref_args)
    ref.sum().backward()
    torch.testing.assert_close(out, ref, rtol=1.3e-5, atol=1e-5)
    for g, a in zip(grads, ref_args, strict=True):
        torch.testing.assert_close(g, a.grad, rtol=1.3e-5, atol=1e-5)
    return report


def _split(report: sdk.ExplainReport) -> list[sdk.GraphReport]:
    return [g for g in report.graphs if g.partitions or g.placements]


def test_ops_the_first_plugin_refuses_go_to_the_next_not_aten(chain_world):
    chain_world()
    report = _compare(mlp_tanh, sdk.backend("picky", chain=["cpu_cpp"]), (8, 16), (16, 16))
    split = _split(report)
    assert {g.kind for g in split} == {"forward", "backward"}, str(report)
    assert not report.fallbacks, str(report)
    for graph in split:
        tanh = [p for p in graph.placements if p.op == "aten.tanh.default"]
        assert tanh and all(p.plugin == "cpu_cpp" for p in tanh), str(graph)
        assert all(p.refusals == (("picky", "picky takes no tanh"),) for p in tanh), str(graph)
        assert {p.compiled_by for p in graph.partitions} == {"picky", "cpu_cpp"}, str(graph)
        # the split is the partition stage's (each partition's build is in its own report)
        assert "partition" in graph.stage_seconds and "build" not in graph.stage_seconds
    parts = [g for g in report.graphs if "." in g.name]  # g0_forward.p0: a partition's
    assert parts and all("build" in g.stage_seconds for g in parts), str(report)
    assert all("wrap" not in g.stage_seconds for g in parts)  # (a partition is not wrapped)
    by = {k.plugin for k in report.kernels}
    assert by == {"picky", "cpu_cpp"}, str(report)
    assert all("tanh" not in op for k in report.kernels if k.plugin == "picky" for op in k.ops)


def test_without_a_taker_the_refused_op_stays_in_the_backends_program(chain_world):
    """A chain whose later plugins claim nothing the first refuses changes nothing: one
    program, tanh an ATen call inside it, the chain a whole-graph fallback."""
    chain_world()
    report = _compare(mlp_tanh, sdk.backend("picky", chain=["graphy"]), (8, 16), (16, 16))
    assert not _split(report), str(report)
    assert {f.op for f in report.fallbacks} == {"aten.tanh.default"}, str(report)


def test_a_graph_level_plugin_is_a_backend_and_what_it_refuses_runs_in_aten(chain_world):
    graphy = chain_world()
    report = _compare(mlp_tanh, sdk.backend("graphy"), (8, 16), (16, 16))
    split = _split(report)
    assert len(split) == 2 and graphy.compiled, str(report)
    for graph in split:
        assert {p.compiled_by for p in graph.partitions} == {"graphy"}, str(graph)
        left = {f.op for f in graph.fallbacks}
        assert "aten.mm.default" in left and "aten.tanh.default" in left, str(graph)
        assert all("no plugin of the chain claims it" in f.reason for f in graph.fallbacks)
        mm = next(p for p in graph.placements if p.op == "aten.mm.default")
        assert mm.plugin == "aten" and mm.refusals == (("graphy", "graphy: no mm"),)


def test_graph_level_first_then_kernel_level(chain_world):
    chain_world()
    report = _compare(
        mlp_tanh, sdk.backend("graphy", chain=["picky", "cpu_cpp"]), (8, 16), (16, 16)
    )
    assert not report.fallbacks, str(report)
    for graph in _split(report):
        owners = {p.op: p.plugin for p in graph.placements}
        assert owners["aten.mm.default"] == "picky", str(graph)
        assert owners["aten.tanh.default"] == "cpu_cpp", str(graph)
        assert owners.get("aten.sin.default", "graphy") == "graphy", str(graph)


def test_a_failing_partition_falls_back_alone(chain_world):
    """The partition with sin fails to compile in graphy: it goes to the next kernel-level
    plugin of the chain; graphy's other partitions stay graphy's."""
    graphy = chain_world(fail_on=("sin",))
    with pytest.warns(sdk.PluginFallbackWarning, match="sdk:cpu_cpp instead.*fault injected"):
        report = _compare(mlp_tanh, sdk.backend("graphy", chain=["cpu_cpp"]), (8, 16), (16, 16))
    assert graphy.compiled, "no partition stayed with graphy"
    failed = [p for g in _split(report) for p in g.partitions if p.compiled_by != p.plugin]
    kept = [p for g in _split(report) for p in g.partitions if p.compiled_by == "graphy"]
    assert failed and kept, str(report)
    for p in failed:
        assert p.plugin == "graphy" and p.compiled_by == "cpu_cpp", str(report)
        assert "fault injected" in p.note and any("sin" in n for n in p.nodes), str(report)
    assert all(not any("sin" in n for n in p.nodes) for p in kept), str(report)


def test_a_failing_partition_without_a_next_plugin_runs_in_aten(chain_world):
    chain_world(fail_on=("sin",))
    with pytest.warns(sdk.PluginFallbackWarning, match="aten.sin.default.*in ATen instead"):
        report = _compare(mlp_tanh, sdk.backend("graphy"), (8, 16), (16, 16))
    failed = [p for g in _split(report) for p in g.partitions if p.compiled_by == "aten"]
    assert failed and all("fault injected" in p.note for p in failed), str(report)


def test_strict_mode_raises_for_a_failing_partition(chain_world):
    chain_world(fail_on=("sin",))
    backend = sdk.backend("graphy", chain=["cpu_cpp"], fallback=False)
    compiled = torch.compile(mlp_tanh, backend=backend)
    with pytest.raises(Exception, match="fault injected") as info:
        compiled(torch.randn(8, 16), torch.randn(16, 16))
    assert "graphy" in str(info.value)


def test_min_partition_size_gives_small_islands_to_the_next_plugin(chain_world):
    """tanh alone between picky's ops: with min_partition_size=2 picky keeps its islands of
    one op out of partitions of their own; cpu_cpp gets them."""
    chain_world()

    def islands(x):
        return torch.tanh(x.exp()).neg().sum()

    backend = sdk.backend("picky", chain=["cpu_cpp"], min_partition_size=2)
    report = _compare(islands, backend, (8, 16))
    forward = next(g for g in _split(report) if g.kind == "forward")
    exp = next(p for p in forward.placements if p.op == "aten.exp.default")
    assert exp.plugin == "cpu_cpp", str(forward)
    assert ("picky", "partition smaller than min_partition_size=2") in exp.refusals


@pytest.mark.parametrize(
    ("body", "warning"),
    [
        ('raise ValueError("claims broken")', "claims broken"),
        ("return [1, 2]", "not a mapping"),
    ],
)
def test_a_claim_hook_that_raises_claims_nothing(
    make_plugin, fake_dist, use_registry, body, warning
):
    source = f"""
        @sdk.hookimpl
        def sdk_claim_nodes(ctx, gm):
            {body}

        @sdk.hookimpl
        def sdk_compile_subgraph(ctx, gm, example_inputs):
            return sdk.CompiledSubgraph(fn=gm)
    """
    module = make_plugin(source, name="broken_claims", kind="GRAPH")
    use_registry(fake_dist("acme-broken", {"broken_claims": module}))
    with pytest.warns(sdk.PluginHookWarning, match=warning):
        report = _compare(mlp_tanh, sdk.backend("broken_claims", chain=["cpu_cpp"]), (4, 8), (8, 8))
    assert not report.fallbacks and {k.plugin for k in report.kernels} == {"cpu_cpp"}
    assert any(h.hook == "sdk_claim_nodes" for h in report.hook_faults), str(report)


def test_a_chain_under_dynamic_shapes(chain_world):
    chain_world()
    report = _compare(
        mlp_tanh, sdk.backend("picky", chain=["cpu_cpp"]), (8, 16), (16, 16), dynamic=True
    )
    assert _split(report) and not report.fallbacks, str(report)
    compiled = torch.compile(
        mlp_tanh, backend=sdk.backend("picky", chain=["cpu_cpp"]), dynamic=True
    )
    for rows in (3, 11):
        x, w = torch.randn(rows, 16), torch.randn(16, 16)
        torch.testing.assert_close(compiled(x, w), mlp_tanh(x, w), rtol=1.3e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [0, -1])
def test_min_partition_size_below_one_is_an_option_error(bad):
    with pytest.raises(sdk.OptionError, match="min_partition_size"):
        torch.compile(mlp_tanh, backend=sdk.backend("cpu_cpp", min_partition_size=bad))(
            torch.randn(2, 2), torch.randn(2, 2)
        )


def test_a_kernel_level_plugin_of_another_device_claims_nothing(
    chain_world, make_plugin, fake_dist
):
    """A chained kernel-level plugin whose device_types lack the graph's device would get
    this graph's tensors in its kernels: it claims nothing, and the reason says so."""
    source = """
        import sdk
        from sdk.plugins.cpu_cpp import sdk_compile_kernels, sdk_render_kernel  # noqa: F401

        @sdk.hookimpl
        def sdk_plugin_info():
            return sdk.PluginInfo(name="elsewhere", version="0.0.1", hook_api=3,
                                  device_types=("cuda",), kind=sdk.PluginKind.CODEGEN)
    """
    picky = make_plugin(PICKY, name="picky")
    elsewhere = make_plugin(source, name="elsewhere", head=False)
    from sdk.core.registry import set_registry
    from tests.conftest import builtin_entry_points

    reg_eps = builtin_entry_points() + fake_dist(
        "acme-dev", {"picky": picky, "elsewhere": elsewhere}
    )
    from sdk.core.registry import Registry

    previous = set_registry(Registry(reg_eps))
    try:
        report = _compare(mlp_tanh, sdk.backend("picky", chain=["elsewhere"]), (4, 8), (8, 8))
    finally:
        set_registry(previous)
    assert {f.op for f in report.fallbacks} == {"aten.tanh.default"}, str(report)
    assert not _split(report), str(report)
    assert all(k.plugin == "picky" for k in report.kernels), str(report)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return fresh.run(
        [sys.executable, "-m", "sdk", "explain", *args], env=fresh.one_thread(), timeout=600
    )


def test_cli_explain_prints_the_report():
    run = _cli("--plugin", "cpu_cpp", "--inference")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "graph g0_inference [inference] by sdk:cpu_cpp" in run.stdout, run.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("nomodule_xyz:fn",), "No module named 'nomodule_xyz'"),
        (("os",), "is not MODULE:FUNCTION"),
        (("--plugin", "nope"), "no SDK plugin named 'nope'"),
        (("--chain", "nope"), "no SDK plugin named 'nope'"),
        (("os:sep",), "os:sep is not a function (its type is str): TARGET must be MODULE:FUNC"),
        (("json:dumps",), "json:dumps cannot be called without arguments"),
        (("os:no_such_attr",), "has no attribute 'no_such_attr'"),
        (("tests.core.test_chain:_target_raises",), "_target_raises() raised RuntimeError: boom"),
        (("tests.core.test_chain:_target_wrong_return",), "got tuple(int, int)"),
        (("broken_target_module_xyz:f",), "importing 'broken_target_module_xyz' raised Runtime"),
    ],
)
def test_cli_explain_bad_input_is_one_line(args, message, capsys, tmp_path, monkeypatch):
    (tmp_path / "broken_target_module_xyz.py").write_text("raise RuntimeError('at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # in this process (a child per case cost ~7 s of CI's two cores): an exception escaping
    # main() fails the test, as a traceback would have
    from sdk import cli

    rc = cli.main(["explain", *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err[-2000:]
    assert len(err.strip().splitlines()) == 1, err[-2000:]


def _target_raises():
    raise RuntimeError("boom\non two lines")


def _target_wrong_return():
    return 1, 2


def _target_without_loss():
    return (lambda x: {"y": x * 2}), (torch.randn(3, requires_grad=True),)


def _target_bad_inputs():
    return torch.nn.Linear(3, 3), (torch.randn(4, 5),)


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("_target_without_loss", "cannot find a loss in a dict: pass --inference"),
        ("_target_bad_inputs", "mat1 and mat2 shapes cannot be multiplied"),
    ],
)
def test_cli_explain_of_a_model_failing_without_the_compile_is_one_line(target, message, capsys):
    """A model that fails in eager mode too is bad input: one line, not the compile's
    traceback."""
    from sdk import cli

    rc = cli.main(["explain", f"tests.core.test_chain:{target}"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith(f"error: tests.core.test_chain:{target} fails")
    assert message in err.strip().splitlines()[-1], err[-2000:]


def test_a_graph_level_plugin_that_refuses_symbolic_sizes_is_compiled_per_shape(chain_world):
    """It declares ``Capability.SYMBOLIC_SIZES`` but raises for a symbolic partition: the
    core compiles that partition per shape, noting why. (One that does not declare it never
    sees symbolic sizes: tests/contract/test_torchscript_vendor.py.)"""
    graphy = chain_world(static_only=True, symbolic=True)
    backend = sdk.backend("graphy", chain=["cpu_cpp"])
    report = _compare(mlp_tanh, backend, (8, 16), (16, 16), dynamic=True)
    parts = [p for g in _split(report) for p in g.partitions if p.plugin == "graphy"]
    assert parts and all(p.cache == "per shape" for p in parts), str(report)
    assert all("refused symbolic sizes" in p.note for p in parts), str(report)
    before = len(graphy.compiled)
    compiled = torch.compile(mlp_tanh, backend=backend, dynamic=True)
    with torch.no_grad():
        for rows in (3, 11, 3):
            x, w = torch.randn(rows, 16), torch.randn(16, 16)
            torch.testing.assert_close(compiled(x, w), mlp_tanh(x, w), rtol=1.3e-5, atol=1e-5)
    assert len(graphy.compiled) - before == 2, graphy.compiled  # one per shape, reused


def test_a_whole_graph_chain_says_why_the_first_plugin_did_not_compile(
    make_plugin, fake_dist, use_registry
):
    """The chain's whole-graph fallback: the report of the graph cpu_cpp compiled names the
    first plugin's failure, and a PluginFallbackWarning says who took over and why."""
    source = """
        from sdk.plugins.cpu_cpp import sdk_compile_kernels  # noqa: F401

        @sdk.hookimpl
        def sdk_render_kernel(ctx, kernel):
            raise RuntimeError("renderer broken on purpose")
    """
    module = make_plugin(source, name="brokenr")
    use_registry(fake_dist("acme-brokenr", {"brokenr": module}))
    told = "'brokenr'.*graph g.*sdk:cpu_cpp instead.*renderer broken on purpose"
    with pytest.warns(sdk.PluginFallbackWarning, match=told):
        report = _compare(mlp_tanh, sdk.backend("brokenr", chain=["cpu_cpp"]), (4, 8), (8, 8))
    assert {g.plugin for g in report.graphs} == {"cpu_cpp"}, str(report)
    for graph in report.graphs:
        assert any(
            n.startswith("compiled by sdk:cpu_cpp after: sdk:brokenr failed")
            and "renderer broken on purpose" in n
            for n in graph.notes
        ), str(graph)


def test_strict_options_run_a_split_graph(chain_world):
    """fallback=False and debug=True call the partitioned program as AOTAutograd does (one
    boxed list), without the run-time fallback in between."""
    chain_world()
    for strict in ({"fallback": False}, {"debug": True}):
        backend = sdk.backend("picky", chain=["cpu_cpp"], **strict)
        _compare(mlp_tanh, backend, (4, 8), (8, 8))


def test_fallback_false_refuses_ops_no_plugin_of_the_chain_claims(chain_world):
    chain_world()
    compiled = torch.compile(mlp_tanh, backend=sdk.backend("graphy", fallback=False))
    with pytest.raises(Exception, match="no plugin of the chain claims") as info:
        compiled(torch.randn(4, 8), torch.randn(8, 8))
    assert "options['fallback'] is False" in str(info.value)

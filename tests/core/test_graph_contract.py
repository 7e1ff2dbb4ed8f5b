"""Hook API 7's graph-level contract, through a graph-level plugin written as a vendor would:
claims as groups (``sdk.ClaimGroups``), frozen parameters for inference
(``PluginInfo.frozen_parameters``) and output buffers (``CompiledSubgraph.preallocated_outputs``,
``aliases``).

The plugin ``folder`` "compiles" a partition by folding its constants (every call whose inputs
are all constants is computed once, at compile time: a Linear's weight transposed) and running
the rest with ``torch.fx.Interpreter``; its behaviour is set per test through module globals.
Results are compared with eager on fresh inputs, and what the plugin received is recorded by the
plugin itself (what a vendor would see), not read from the core.
"""

from __future__ import annotations

import importlib

import pytest
import torch

import sdk

FOLDER = """
    import pickle

    import torch
    import sdk

    FROZEN = {frozen!r}
    CACHE = {cache!r}  # answers sdk_cache_key, returns its folded graph pickled as the artifact
    loads = []         # per sdk_load_subgraph: the artifact's size
    GROUPS = None      # None: per-node claims; else fn(gm) -> sdk.ClaimGroups
    PREALLOCATED = False
    ALIASES = {{}}
    BREAK = ""         # "strides": outputs contiguous; "write": writes into its first input
    calls = []         # per call of a preallocated fn: [(strides as meta, [inputs it is])]
    compiles = []      # per compile: (graph_kind, #inputs, {{constant name: real?}}, #folded)
    partitions = []    # per compile: the ops of the partition, sorted

    @sdk.hookimpl
    def sdk_plugin_info():
        return sdk.PluginInfo(
            name="folder", version="0.0.1", hook_api={api!r}, device_types=("cpu",),
            kind=sdk.PluginKind.GRAPH, **({{"frozen_parameters": True}} if FROZEN else {{}}),
        )

    @sdk.hookimpl
    def sdk_claim_nodes(ctx, gm):
        if GROUPS is not None:
            return GROUPS(gm)
        return {{n: sdk.Support.yes() for n in gm.graph.nodes if n.op == "call_function"}}

    def fold(gm):
        # constant folding: a call whose inputs are all constants is computed now
        folded = 0
        for node in list(gm.graph.nodes):
            if node.op != "call_function" or not node.all_input_nodes:
                continue
            if not all(a.op == "get_attr" for a in node.all_input_nodes):
                continue
            args = torch.fx.node.map_arg(node.args, lambda a: getattr(gm, a.target))
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: getattr(gm, a.target))
            value = node.target(*args, **kwargs)
            if not isinstance(value, torch.Tensor):
                continue
            name = f"folded_{{node.name}}"
            gm.register_buffer(name, value.contiguous())
            with gm.graph.inserting_before(node):
                const = gm.graph.get_attr(name)
            node.replace_all_uses_with(const)
            gm.graph.erase_node(node)
            folded += 1
        gm.graph.eliminate_dead_code()
        gm.recompile()
        return folded

    @sdk.hookimpl
    def sdk_compile_subgraph(ctx, gm, example_inputs):
        consts = {{
            n.target: type(getattr(gm, n.target)) is torch.Tensor
            for n in gm.graph.nodes if n.op == "get_attr"
        }}
        partitions.append(sorted(
            n.target.__name__.split(".")[0] for n in gm.graph.nodes if n.op == "call_function"
        ))
        folded = fold(gm)
        compiles.append((ctx.graph_kind, len(example_inputs), consts, folded))
        outs = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
        vals = [o.meta["val"] for o in outs]

        def run(*args):
            outs = tuple(torch.fx.Interpreter(gm).run(*args))
            if BREAK == "strides":
                return tuple(o.contiguous() for o in outs)
            if BREAK == "write":
                args[0].mul_(1.5)
            return outs

        if not PREALLOCATED:
            return sdk.CompiledSubgraph(fn=run, artifact=pickle.dumps(gm) if CACHE else None)

        n_in = len(example_inputs)

        def into(*args):
            ins, bufs = args[:n_in], args[n_in:]
            calls.append([
                (tuple(b.stride()) == tuple(v.stride()),
                 [j for j, x in enumerate(ins)
                  if isinstance(x, torch.Tensor) and x.data_ptr() == b.data_ptr()])
                for b, v in zip(bufs, vals)
            ])
            for buf, out in zip(bufs, run(*ins)):
                buf.copy_(out)

        return sdk.CompiledSubgraph(fn=into, preallocated_outputs=True, aliases=ALIASES)

    @sdk.hookimpl
    def sdk_cache_key(ctx):
        return "folder under test" if CACHE else None

    @sdk.hookimpl
    def sdk_load_subgraph(ctx, artifact):
        loads.append(len(artifact))
        gm = pickle.loads(artifact)
        return lambda *args: tuple(gm(*args))
"""


@pytest.fixture
def folder(make_plugin, fake_dist, use_registry):
    """``folder(frozen=True) -> the plugin's module``, installed as ``sdk:folder``."""

    def make(frozen: bool = True, api: int = 7, cache: bool = False):
        source = FOLDER.format(frozen=frozen, api=api, cache=cache)
        name = make_plugin(source, name="folder", head=False)
        use_registry(fake_dist("acme-folder", {"folder": name}))
        return importlib.import_module(name)

    return make


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _check(compiled, model, x):
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def _compiles_after_a_call(plugin, compiled, model, x) -> int:
    """A call checked against eager, then how many partition compiles the plugin has made."""
    _check(compiled, model, x)
    return len(plugin.compiles)


def _partition_notes(model, x) -> str:
    with torch.no_grad():
        report = sdk.explain(model, x, backend=sdk.backend("folder", fallback=False))
    return " ".join(p.note for g in report.graphs for p in g.partitions)


# -- frozen parameters ---------------------------------------------------------------


def test_frozen_parameters_are_folded_and_recompiled_when_a_weight_changes(folder):
    plugin = folder(frozen=True)
    model = mlp()
    compiled = torch.compile(model, backend=sdk.backend("folder", fallback=False))
    x = torch.randn(5, 8)
    _check(compiled, model, x)
    assert len(plugin.compiles) == 1
    kind, n_inputs, consts, folded = plugin.compiles[0]
    # the four parameters arrive as real constants, only x as an input; the weights'
    # transposes were computed at compile time
    assert kind == "inference" and n_inputs == 1
    assert len(consts) == 4 and all(consts.values()), consts
    assert folded >= 2

    compiles = _compiles_after_a_call(plugin, compiled, model, torch.randn(5, 8))
    assert compiles == 1  # nothing changed: no new compile

    model[0].weight = torch.nn.Parameter(torch.randn(16, 8))  # replaced
    assert _compiles_after_a_call(plugin, compiled, model, x) == 2

    with torch.no_grad():  # written in place
        model[2].weight.add_(1)
    assert _compiles_after_a_call(plugin, compiled, model, x) == 3
    assert _compiles_after_a_call(plugin, compiled, model, x) == 3

    # given other data: the same Parameter object, its version unchanged (``p.data = ...``
    # bumps neither), its storage another; the values it held before were folded
    model[2].weight.data = torch.randn(4, 16)
    assert _compiles_after_a_call(plugin, compiled, model, x) == 4

    notes = _partition_notes(model, x)
    assert "frozen as constants" in notes, notes


def test_frozen_partitions_are_cached_keyed_by_their_weights(folder, monkeypatch, tmp_path):
    """A frozen partition is stored in the whole-graph cache: the same weights (another model
    of the same values, compiled afresh) are a hit, loaded, not compiled; a weight changed
    is a miss, compiled and stored; each result equals eager's."""
    monkeypatch.setenv("SDK_GRAPH_CACHE", "1")
    monkeypatch.setenv("SDK_CACHE_DIR", str(tmp_path / "cache"))
    plugin = folder(frozen=True, cache=True)
    x = torch.randn(5, 8)

    def compiled(model: torch.nn.Module) -> list[str]:
        """The cache state of each partition of a fresh compile of ``model`` (explain's), and
        torch.compile's result (compiled again) against eager."""
        torch._dynamo.reset()  # (else explain reports the compile before)
        with torch.no_grad():
            report = sdk.explain(model, x, backend=sdk.backend("folder", fallback=False))
        _check(torch.compile(model, backend=sdk.backend("folder", fallback=False)), model, x)
        assert "frozen as constants" in " ".join(str(report).split()), str(report)
        return [p.cache for g in report.graphs for p in g.partitions]

    assert compiled(mlp()) == ["stored"]  # (torch.compile's compile after it: a hit)
    assert len(plugin.compiles) == 1
    loads = len(plugin.loads)
    assert compiled(mlp()) == ["hit"]  # the same values: loaded, not compiled
    assert len(plugin.compiles) == 1 and len(plugin.loads) > loads
    other = mlp()
    with torch.no_grad():
        other[2].bias.add_(0.5)
    assert compiled(other) == ["stored"]  # one weight changed: a miss
    assert len(plugin.compiles) == 2


def test_a_frozen_value_is_digested_once_per_version(monkeypatch):
    """The key's digest of a frozen weight is computed once per tensor (a large model's
    weights are hashed at their first compile, not at every partition or shape) and again
    after the weight is written in place."""
    from sdk.core import graph_cache

    hashed = []
    real = graph_cache._tensor_digest
    monkeypatch.setattr(graph_cache, "_tensor_digest", lambda t: hashed.append(1) or real(t))
    w = torch.nn.Parameter(torch.randn(16, 8))
    first = graph_cache.constant_digest(w)
    assert graph_cache.constant_digest(w) == first and len(hashed) == 1
    with torch.no_grad():
        w.add_(1)
    assert graph_cache.constant_digest(w) != first and len(hashed) == 2


def bn_net() -> torch.nn.Module:
    """Linear, BatchNorm (running statistics away from their initial 0 and 1) and ReLU."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU())
    with torch.no_grad():
        model[1].running_mean.copy_(torch.randn(16))
        model[1].running_var.copy_(torch.rand(16) + 0.5)
    return model


def test_frozen_buffers_are_folded_and_recompiled_when_a_buffer_changes(folder):
    """BatchNorm in eval: its running statistics arrive as constants beside the parameters
    (the plugin folds the normalization's scale), and a statistic replaced or updated in
    place compiles the partition again; the results equal eager's each time."""
    plugin = folder(frozen=True)
    model = bn_net().eval()
    compiled = torch.compile(model, backend=sdk.backend("folder", fallback=False))
    x = torch.randn(5, 8)
    _check(compiled, model, x)
    assert len(plugin.compiles) == 1, plugin.compiles
    kind, n_inputs, consts, folded = plugin.compiles[0]
    # Linear's weight and bias, BatchNorm's weight, bias, running mean and variance
    assert kind == "inference" and n_inputs == 1, plugin.compiles
    assert len(consts) == 6 and all(consts.values()), consts
    assert folded >= 3, plugin.compiles  # the weight's transpose and the BatchNorm's scale

    compiles = _compiles_after_a_call(plugin, compiled, model, torch.randn(5, 8))
    assert compiles == 1  # nothing changed: no new compile

    model[1].running_mean = torch.randn(16)  # replaced
    assert _compiles_after_a_call(plugin, compiled, model, x) == 2

    model[1].running_mean.add_(1)  # written in place
    assert _compiles_after_a_call(plugin, compiled, model, x) == 3
    with torch.no_grad():
        model[1].running_var.mul_(2)
    assert _compiles_after_a_call(plugin, compiled, model, x) == 4
    assert _compiles_after_a_call(plugin, compiled, model, x) == 4

    notes = _partition_notes(model, x)
    assert "4 parameter(s) and 2 buffer(s) frozen as constants" in notes, notes


def test_buffers_the_graph_writes_stay_inputs(folder):
    """BatchNorm in training mode under no_grad: an inference graph that updates the running
    statistics. They are no constants (frozen, every call would compile again): they stay
    inputs, are updated as eager updates them, and the partition compiles once."""
    plugin = folder(frozen=True)
    model, ref = bn_net().train(), bn_net().train()
    compiled = torch.compile(model, backend=sdk.backend("folder", fallback=False))
    for _ in range(3):
        x = torch.randn(5, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), ref(x))
        for a, b in zip(model.buffers(), ref.buffers(), strict=True):
            torch.testing.assert_close(a, b)
    assert len(plugin.compiles) == 1, plugin.compiles
    _, n_inputs, consts, _ = plugin.compiles[0]
    # the four parameters are constants; the running mean and variance are inputs
    assert len(consts) == 4 and n_inputs >= 3, plugin.compiles


def test_frozen_parameters_under_dynamic_shapes(folder):
    plugin = folder(frozen=True)
    model = mlp()
    compiled = torch.compile(model, backend=sdk.backend("folder", fallback=False), dynamic=True)
    for n in (3, 7, 11):
        _check(compiled, model, torch.randn(n, 8))
    with torch.no_grad():
        model[0].bias.sub_(0.5)
    _check(compiled, model, torch.randn(5, 8))
    assert all(len(consts) == 4 for _, _, consts, _ in plugin.compiles), plugin.compiles


def test_training_graphs_keep_parameters_as_inputs(folder):
    plugin = folder(frozen=True)
    model = mlp()
    ref = mlp()
    compiled = torch.compile(model, backend=sdk.backend("folder", fallback=False))
    x = torch.randn(5, 8)
    compiled(x).sum().backward()
    ref(x).sum().backward()
    for p, q in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    assert plugin.compiles and all(not consts for _, _, consts, _ in plugin.compiles)
    assert {k for k, *_ in plugin.compiles} == {"forward", "backward"}


@pytest.mark.parametrize("api", [3, 7])
def test_without_frozen_parameters_weights_stay_inputs(folder, api):
    """Also a plugin of hook API 3 (per-node claims, returned outputs): as before."""
    plugin = folder(frozen=False, api=api)
    model = mlp()
    compiled = torch.compile(model, backend=sdk.backend("folder", fallback=False))
    _check(compiled, model, torch.randn(5, 8))
    assert [(k, n, c) for k, n, c, _ in plugin.compiles] == [("inference", 5, {})]


# -- claims as groups ----------------------------------------------------------------


def _op(node) -> str:
    return getattr(node.target, "__name__", "").split(".")[0]


def _groups(*spec, min_size=1, refuse=()):
    """A ClaimGroups answer from op names: each group the call nodes of those ops."""

    def answer(gm):
        calls = [n for n in gm.graph.nodes if n.op == "call_function"]
        return sdk.ClaimGroups(
            groups=[[n for n in calls if _op(n) in ops] for ops in spec],
            min_size=min_size,
            refused={n: sdk.Support.no(f"folder: no {_op(n)}") for n in calls if _op(n) in refuse},
        )

    return answer


def _run(fn, *args, **options):
    with torch.no_grad():
        backend = sdk.backend("folder", **options)
        report = sdk.explain(fn, *args, backend=backend)
        fresh = [torch.randn_like(a) for a in args]
        torch.testing.assert_close(torch.compile(fn, backend=backend)(*fresh), fn(*fresh))
    (graph,) = report.graphs
    return graph


def _compiled(plugin) -> list[tuple[str, ...]]:
    """The partitions the plugin compiled (explain's compile and torch.compile's), by ops."""
    return sorted({tuple(p) for p in plugin.partitions})


def _two_chains(x):
    return (x.sin() * x.cos()) + 1


def test_a_plugins_own_groups_are_its_partitions(folder):
    plugin = folder(frozen=False)
    # per node, the four ops are one partition; as groups, two
    plugin.GROUPS = _groups(("sin", "cos"), ("mul", "add"))
    graph = _run(_two_chains, torch.randn(4, 4), fallback=False)
    assert _compiled(plugin) == [("add", "mul"), ("cos", "sin")], plugin.partitions
    assert {p.compiled_by for p in graph.partitions} == {"folder"} and not graph.fallbacks


def _around(x):
    a = x.sin()
    return a * a.exp()  # sin -> exp -> mul: {sin, mul} without exp is cyclic


def test_a_group_that_would_form_a_cycle_is_cut_with_the_reason(folder):
    plugin = folder(frozen=False)
    plugin.GROUPS = _groups(("sin", "mul"), refuse=("exp",))
    graph = _run(_around, torch.randn(4, 4))
    assert _compiled(plugin) == [("mul",), ("sin",)], plugin.partitions
    assert any("would form a cycle through exp" in n and "cut into 2" in n for n in graph.notes), (
        graph.notes
    )
    (exp,) = [p for p in graph.placements if p.op.startswith("aten.exp")]
    assert exp.plugin == "aten" and exp.refusals == (("folder", "folder: no exp"),)


def test_groups_below_their_minimum_size_run_elsewhere_with_the_reason(folder):
    plugin = folder(frozen=False)
    plugin.GROUPS = _groups(("sin", "cos", "mul"), ("add",), min_size=2)
    graph = _run(_two_chains, torch.randn(4, 4))
    assert _compiled(plugin) == [("cos", "mul", "sin")], plugin.partitions
    (add,) = [p for p in graph.placements if p.op.startswith("aten.add")]
    assert add.plugin == "aten" and "smaller than the minimum size 2" in add.refusals[0][1]


def test_a_group_naming_a_node_of_another_graph_is_a_fault_that_claims_nothing(folder):
    plugin = folder(frozen=False)
    stranger = torch.fx.Graph().placeholder("x")
    plugin.GROUPS = lambda gm: sdk.ClaimGroups(groups=[[stranger]])
    with pytest.warns(sdk.PluginHookWarning, match="not a call_function node"):
        graph = _run(_two_chains, torch.randn(4, 4))
    assert not plugin.partitions
    assert any("not a call_function node" in f.error for f in graph.hook_faults), graph.hook_faults


@pytest.mark.parametrize("bad", [0, -1])
def test_claim_groups_min_size_must_be_positive(bad):
    with pytest.raises(ValueError, match="at least 1"):
        sdk.ClaimGroups(groups=[], min_size=bad)


# -- output buffers ------------------------------------------------------------------


def _exp_then_sin(x):
    # exp is refused: ATen makes it, only the plugin's partition reads it; sin of its
    # transpose keeps the transposed layout (strides (1, 5))
    return x.exp().t().sin() * 2


def test_preallocated_outputs_have_the_graphs_layout(folder):
    plugin = folder(frozen=False)
    plugin.GROUPS = _groups(("sin", "mul"), refuse=("exp", "permute", "t"))
    plugin.PREALLOCATED, plugin.ALIASES = True, {0: 0}
    x = torch.randn(4, 5)
    graph = _run(_exp_then_sin, x)
    with torch.no_grad():
        out = torch.compile(_exp_then_sin, backend=sdk.backend("folder"))(x)
    assert out.stride() == _exp_then_sin(x).stride() == (1, 5)
    # the buffers had meta["val"]'s strides; the input is a view (of exp's result, which
    # ATen's transpose made), so the output got a buffer of its own
    assert plugin.calls and all(c == [(True, [])] for c in plugin.calls), plugin.calls
    (part,) = graph.partitions
    assert "not written into input 0 (it may be read after the partition" in part.note, part.note


def _exp_then_sin_flat(x):
    return x.exp().sin() * 2


def test_an_output_is_written_into_an_input_nothing_reads_after(folder):
    plugin = folder(frozen=False)
    plugin.GROUPS = _groups(("sin", "mul"), refuse=("exp",))
    plugin.PREALLOCATED, plugin.ALIASES = True, {0: 0}
    graph = _run(_exp_then_sin_flat, torch.randn(4, 5))
    assert plugin.calls and all(c == [(True, [0])] for c in plugin.calls), plugin.calls
    (part,) = graph.partitions
    assert "donated" in part.note, part.note


def _sin_of_input(x):
    return x.sin() * 2


def test_a_graph_input_is_never_donated(folder):
    plugin = folder(frozen=False)
    plugin.PREALLOCATED, plugin.ALIASES = True, {0: 0}
    x = torch.randn(4, 5)
    before = x.clone()
    graph = _run(_sin_of_input, x)
    torch.testing.assert_close(x, before)
    assert plugin.calls and all(c == [(True, [])] for c in plugin.calls), plugin.calls
    (part,) = graph.partitions
    assert "a graph input, a view" in part.note, part.note


def _expanded(x):
    # the partition's output is an expand: meta["val"] has stride 0 over its first dimension
    return x.sin()[0].expand(4, 5)


@pytest.mark.parametrize("preallocated", [False, True])
def test_an_expanded_output_is_given_its_layout(folder, preallocated):
    """An output whose strides overlap (an expand, stride 0): a runtime's dense result is put
    into that layout (its one row, not every element into one memory place), and a
    preallocated output is a dense buffer for the plugin to write; the result has eager's
    layout, nothing falls back (fallback=False: a fault would raise)."""
    plugin = folder(frozen=False)
    plugin.BREAK, plugin.PREALLOCATED = ("" if preallocated else "strides"), preallocated
    graph = _run(_expanded, torch.randn(4, 5), fallback=False)
    assert [p.compiled_by for p in graph.partitions] == ["folder"], str(graph)
    x = torch.randn(4, 5)
    with torch.no_grad():
        out = torch.compile(_expanded, backend=sdk.backend("folder", fallback=False))(x)
    torch.testing.assert_close(out, _expanded(x))
    assert out.stride() == (0, 1)


def test_the_conformance_kit_takes_a_dense_result_of_an_expanded_output(folder):
    """(A runtime returns dense buffers: for an expand's output that is no violation.)"""
    from sdk import conformance as C

    plugin = folder(frozen=False)
    plugin.BREAK = "strides"
    module, violations = C.checking_outputs("folder")
    with C.registry_with("folder", module), torch.no_grad():
        torch.compile(_expanded, backend=sdk.backend("folder"))(torch.randn(4, 5))
    assert plugin.partitions and violations == [], violations


def test_aliases_without_preallocated_outputs_are_refused():
    with pytest.raises(ValueError, match="preallocated_outputs=True"):
        sdk.CompiledSubgraph(fn=lambda: None, aliases={0: 0})


# -- the conformance kit's output check ----------------------------------------------


@pytest.mark.parametrize(
    ("brk", "preallocated", "expected"),
    [
        ("", False, None),
        ("", True, None),
        ("strides", False, "output 0 has strides (8, 1), expected (1, 5)"),
        ("write", False, "input 0 was written"),
    ],
)
def test_the_conformance_kit_checks_outputs_against_the_contract(
    folder, brk, preallocated, expected
):
    from sdk import conformance as C

    plugin = folder(frozen=False)
    plugin.BREAK, plugin.PREALLOCATED = brk, preallocated
    module, violations = C.checking_outputs("folder")
    x = torch.randn(8, 5)
    with C.registry_with("folder", module), torch.no_grad():
        torch.compile(lambda x: torch.sin(x.t()) * 2, backend=sdk.backend("folder"))(x.clone())
    # the core keeps the program right either way: outputs of other strides are copied
    # into meta["val"]'s, and the compiled result has eager's layout
    with torch.no_grad():
        compiled = torch.compile(lambda x: torch.sin(x.t()) * 2, backend=sdk.backend("folder"))
        assert compiled(x.clone()).stride() == (1, 5)
    if expected is None:
        assert violations == []
    else:
        assert any(expected in v for v in violations), violations

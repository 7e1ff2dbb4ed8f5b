"""Per-op partitioning between the plugins of a chain (core/partition.py).

Property test over random DAGs: whatever the claims of 2-3 plugins, the partitioned graph is a
valid, acyclic FX graph whose partitions are owned by the plugin that claimed their nodes, and it
computes exactly what the original graph computed."""

from __future__ import annotations

import copy
import random

import pytest
import torch

from sdk.core.partition import Claimant, partition

OPS = [torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor, torch.ops.aten.sub.Tensor]
UNARY = [torch.ops.aten.neg.default, torch.ops.aten.sin.default, torch.ops.aten.relu.default]


def _random_dag(rng: random.Random, n_inputs: int, n_ops: int) -> torch.fx.GraphModule:
    """A random DAG of ATen ops: each op reads one or two random earlier values."""
    graph = torch.fx.Graph()
    values = [graph.placeholder(f"x{i}") for i in range(n_inputs)]
    for _ in range(n_ops):
        if rng.random() < 0.6:
            args = (rng.choice(values), rng.choice(values))
            values.append(graph.call_function(rng.choice(OPS), args))
        else:
            values.append(graph.call_function(rng.choice(UNARY), (rng.choice(values),)))
    outputs = rng.sample(values[n_inputs:], k=min(3, n_ops))
    graph.output(tuple(outputs))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _claims(rng: random.Random, gm: torch.fx.GraphModule, n_plugins: int) -> list:
    """Random claims: each plugin claims each call node with probability 1/2."""
    names = [n.name for n in gm.graph.nodes if n.op == "call_function"]
    claims = {f"p{p}": {name for name in names if rng.random() < 0.5} for p in range(n_plugins)}
    claimants = [
        (plugin, lambda node, mine=mine: (node.name in mine, "random refusal"))
        for plugin, mine in claims.items()
    ]
    return claimants, claims, names


def _check_acyclic(gm: torch.fx.GraphModule) -> None:
    """Every node's inputs come before it, in the outer graph and in every partition."""
    for module in gm.modules():
        if isinstance(module, torch.fx.GraphModule):
            module.graph.lint()
            seen = set()
            for node in module.graph.nodes:
                assert all(arg in seen for arg in node.all_input_nodes), node
                seen.add(node)


@pytest.mark.parametrize("seed", range(60))
def test_random_dag_partitions_are_acyclic_and_exact(seed):
    rng = random.Random(seed)
    gm = _random_dag(rng, n_inputs=rng.randint(1, 3), n_ops=rng.randint(2, 25))
    original = copy.deepcopy(gm)
    claimants, claims, names = _claims(rng, gm, rng.randint(2, 3))
    plan = partition(gm, claimants, min_size=rng.choice([1, 1, 2, 3]))
    _check_acyclic(plan.gm)
    for part in plan.partitions:
        sub = getattr(plan.gm, part.name)
        inner = [n.name for n in sub.graph.nodes if n.op == "call_function"]
        assert set(inner) <= claims[part.plugin]
        assert all(plan.owner[n] == part.plugin for n in inner)
        assert part.size == len(inner)
    assert set(plan.owner) >= set(names)
    inputs = [torch.randn(4, 5) for n in original.graph.nodes if n.op == "placeholder"]
    for want, got in zip(original(*inputs), plan.gm(*inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


@pytest.mark.parametrize("seed", range(60))
def test_random_groups_are_kept_whole_or_cut_acyclic_and_exact(seed):
    """A plugin's own groups (sdk.ClaimGroups), random subsets of the call nodes (many of
    them cyclic once contracted): the result is acyclic and exact, every partition of the
    grouping plugin lies inside one of its groups, and each cut has its reason."""
    rng = random.Random(seed)
    gm = _random_dag(rng, n_inputs=rng.randint(1, 3), n_ops=rng.randint(2, 25))
    original = copy.deepcopy(gm)
    names = [n.name for n in gm.graph.nodes if n.op == "call_function"]
    groups = [rng.sample(names, k=rng.randint(1, len(names))) for _ in range(rng.randint(1, 4))]
    grouped = {n for g in groups for n in g}
    other = ("other", lambda node: (rng.random() < 0.5, "random refusal"))
    least = rng.choice([1, 1, 2])
    mine = Claimant("mine", lambda n: (n.name in grouped, "not claimed"), groups, least)
    plan = partition(gm, [mine, other])
    _check_acyclic(plan.gm)
    for part in plan.partitions:
        inner = {n.name for n in getattr(plan.gm, part.name).graph.nodes if n.op == "call_function"}
        if part.plugin == "mine":
            assert part.size >= least
            # inside the first group that names its nodes (a node stays in its first group)
            first = [next(k for k, g in enumerate(groups) if n in g) for n in inner]
            assert len(set(first)) == 1, (inner, groups)
    inputs = [torch.randn(4, 5) for n in original.graph.nodes if n.op == "placeholder"]
    for want, got in zip(original(*inputs), plan.gm(*inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert all("would form a cycle through" in cut for cut in plan.cuts)


def test_a_cyclic_group_is_cut_and_an_acyclic_one_kept_whole():
    def f(x):
        a = x.sin()
        return a * a.exp(), x.cos() + 1

    aten = torch.fx.experimental.proxy_tensor.make_fx(f)(torch.randn(3))
    by_op = {
        n.target.__name__.split(".")[0]: n.name for n in aten.graph.nodes if n.op == "call_function"
    }
    groups = [[by_op["sin"], by_op["mul"]], [by_op["cos"], by_op["add"]]]
    mine = Claimant("mine", lambda n: (n.name in {*groups[0], *groups[1]}, "no"), groups)
    plan = partition(aten, [mine])
    assert sorted(p.size for p in plan.partitions) == [1, 1, 2]
    (cut,) = plan.cuts
    assert f"would form a cycle through {by_op['exp']}" in cut and "cut into 2 piece(s)" in cut
    x = torch.randn(3)
    for want, got in zip(f(x), plan.gm(x), strict=True):
        torch.testing.assert_close(got, want)


def test_first_claimant_wins_and_refusals_name_the_earlier_plugins():
    def f(x, y):
        return torch.sin(x + y) * y

    aten = torch.fx.experimental.proxy_tensor.make_fx(f)(torch.randn(3), torch.randn(3))
    a = ("A", lambda n: (n.target is not torch.ops.aten.sin.default, "A has no sin"))
    b = ("B", lambda n: (True, ""))
    plan = partition(aten, [a, b])
    owners = {plan.owner[n] for n in plan.owner if "sin" in n}
    assert owners == {"B"}
    sin = next(n for n in plan.refusals if "sin" in n)
    assert plan.refusals[sin] == [("A", "A has no sin")]
    assert [p.plugin for p in plan.partitions].count("A") == 2
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(plan.gm(x, y), f(x, y))
    report = plan.describe()
    assert "B, 1 ops; in 1 tensors (12 B)" in report
    assert f"{sin} -> B (A: A has no sin)" in report
    assert "getitem" not in report, "the fusing's own getitems are not ops to hand out"


def test_min_partition_size_below_one_is_refused():
    gm = torch.fx.experimental.proxy_tensor.make_fx(torch.sin)(torch.randn(2))
    with pytest.raises(ValueError, match="min_partition_size"):
        partition(gm, [], min_size=0)

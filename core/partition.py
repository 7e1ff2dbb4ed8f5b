"""Per-op partitioning of one ATen graph between the plugins of a chain.

Each plugin of the chain, in order of priority, gets the maximal connected groups of the call
nodes it claims that no earlier plugin took; what nobody claims stays in the outer graph and runs
in ATen. The cutting is torch's own ``CapabilityBasedPartitioner`` (it merges candidate groups only
when the merge forms no cycle) and ``fuse_by_partitions`` (which turns each group into a
``call_module`` node of a self-contained GraphModule). A later plugin sees the earlier plugins'
partitions as opaque ``call_module`` nodes, so the result of every round is again a DAG and the
rounds compose: no hand-rolled graph cutting.

A group smaller than ``min_size`` call nodes is not fused: its nodes stay open for the next
plugin (a tiny island is cheaper run by the neighbour than as its own partition).

A graph-level plugin may instead name its own groups (``sdk.ClaimGroups``, hook API 7): a
:class:`Claimant` with ``groups``. Each group is kept whole unless contracting it would form a
cycle through nodes outside it, given the groups accepted before it (a path that leaves the
group and comes back, possibly through another group): such a group is cut into the maximal
acyclic pieces torch's partitioner finds among its nodes, with the reason in ``plan.cuts``.
A group or piece below the claimant's ``min_size`` (or the option's) is not fused.

This module is the cutting step and its bookkeeping; :mod:`core.chain` compiles the partitions
and runs the outer graph.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from .fallback import op_name

Claim = Callable[[torch.fx.Node], "tuple[bool, str]"]
"""A plugin's answer for one call node: (claimed, reason for a refusal)."""


@dataclass
class Claimant:
    """One plugin of the chain: its per-node ``claim``, and optionally its own ``groups``
    (node names; the nodes it claims are then those of its groups) with their ``min_size``."""

    plugin: str
    claim: Claim
    groups: Sequence[Sequence[str]] | None = None
    min_size: int = 1


@dataclass
class Partition:
    """One fused partition: the outer graph's ``call_module`` target and who compiles it."""

    name: str
    plugin: str
    size: int


@dataclass
class Plan:
    """The partitioned graph and why each op went where it went.

    ``refusals[node_name]`` lists ``(plugin, reason)`` for every plugin before the one that got
    the node (all of them for a node left to ATen)."""

    gm: torch.fx.GraphModule
    partitions: list[Partition] = field(default_factory=list)
    owner: dict[str, str] = field(default_factory=dict)
    refusals: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    #: each claimable call node's op, by node name
    ops: dict[str, str] = field(default_factory=dict)
    #: why a plugin's own group was cut or left out (``sdk.ClaimGroups``), one line each
    cuts: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The partition report: each partition with its plugin, size and the tensors (count,
        bytes, from the fake values in ``node.meta["val"]``) crossing its boundary, then each op
        that did not go to the first plugin, with who refused it and why."""
        lines = []
        for part in self.partitions:
            node = next(n for n in self.gm.graph.nodes if n.target == part.name)
            ins, in_bytes = _crossing(node.all_input_nodes)
            outs, out_bytes = _crossing(node.users)
            lines.append(
                f"{part.name}: {part.plugin}, {part.size} ops; in {ins} tensors ({in_bytes} B), "
                f"out to {outs} users ({out_bytes} B)"
            )
        for name, refused in self.refusals.items():
            why = "; ".join(f"{plugin}: {reason}" for plugin, reason in refused)
            lines.append(f"{name} -> {self.owner.get(name, 'aten')} ({why})")
        return "\n".join(lines)


class _Claimed(OperatorSupportBase):
    """Adapts one plugin's claims to torch's partitioner: only still-open call_function nodes."""

    def __init__(self, claimed: set[torch.fx.Node]) -> None:
        self.claimed = claimed

    def is_node_supported(self, submodules: Mapping, node: torch.fx.Node) -> bool:
        return node in self.claimed


def partition(
    gm: torch.fx.GraphModule,
    claimants: Sequence[tuple[str, Claim] | Claimant],
    min_size: int = 1,
) -> Plan:
    """Split ``gm`` in place between ``claimants`` (plugin name, claim function; or a
    :class:`Claimant` with its own groups), first first.

    :param gm: an ATen FX graph; it is rewritten (partitions become ``call_module`` nodes).
    :param claimants: the chain in order of priority.
    :param min_size: smallest partition (in call nodes) worth fusing; smaller groups go on.
    :return: the Plan; ``gm`` is ``plan.gm``.
    :raises ValueError: ``min_size`` below 1.
    """
    if min_size < 1:
        raise ValueError(f"min_partition_size must be at least 1, got {min_size}")
    plan = Plan(gm)
    for index, entry in enumerate(claimants):
        c = entry if isinstance(entry, Claimant) else Claimant(*entry)
        plugin = c.plugin
        claimed = _ask(gm, plugin, c.claim, plan)
        if c.groups is None:
            groups = CapabilityBasedPartitioner(
                gm, _Claimed(claimed), allows_single_node_partition=True
            ).propose_partitions()
            groups = [g.nodes for g in groups if _calls(g.nodes) >= min_size]
            small = f"partition smaller than min_partition_size={min_size}"
        else:
            least = max(min_size, c.min_size)
            groups = [
                g for g in _own_groups(gm, plugin, c.groups, claimed, plan) if _calls(g) >= least
            ]
            small = (
                f"its group (or the piece of it left after cutting) is smaller than the minimum "
                f"size {least} (ClaimGroups.min_size={c.min_size}, min_partition_size="
                f"{min_size}): runs elsewhere"
            )
        for node in (n for g in groups for n in g):
            plan.owner[node.name] = plugin
        for node in claimed - {n for g in groups for n in g}:
            plan.refusals.setdefault(node.name, []).append((plugin, small))
        if not groups:
            continue
        prefix = f"part{index}_"
        fuse_by_partitions(gm, groups, prefix=prefix, always_return_tuple=True)
        plan.partitions += [
            Partition(f"{prefix}{i}", plugin, _calls(g)) for i, g in enumerate(groups)
        ]
    for node in gm.graph.nodes:
        if node.op == "call_function" and not _unpacks_partition(node):
            plan.owner.setdefault(node.name, "aten")
    gm.recompile()
    return plan


def _ask(gm: torch.fx.GraphModule, plugin: str, claim: Claim, plan: Plan) -> set[torch.fx.Node]:
    """The still-open call nodes ``plugin`` claims; its refusals are recorded with the reason."""
    claimed = set()
    refusals = plan.refusals
    for node in gm.graph.nodes:
        if node.op != "call_function" or _unpacks_partition(node):
            continue
        plan.ops.setdefault(node.name, op_name(node.target))
        ok, reason = claim(node)
        if ok:
            claimed.add(node)
        else:
            refusals.setdefault(node.name, []).append((plugin, reason or "not claimed"))
    return claimed


def _own_groups(
    gm: torch.fx.GraphModule,
    plugin: str,
    named: Sequence[Sequence[str]],
    claimed: set[torch.fx.Node],
    plan: Plan,
) -> list[list[torch.fx.Node]]:
    """A plugin's own groups as acyclic groups of still-open nodes, in its order: each kept
    whole where contracting it (after those before it) forms no cycle, else cut into the
    maximal acyclic pieces of its nodes; a node in an earlier group stays there."""
    by_name = {n.name: n for n in claimed}
    taken: dict[torch.fx.Node, int] = {}  # node -> index of its accepted group
    accepted: list[list[torch.fx.Node]] = []
    for k, names in enumerate(named):
        group = [by_name[n] for n in dict.fromkeys(names) if n in by_name]
        group = [n for n in group if n not in taken]
        if not group:
            continue
        through = _cycle(group, taken, accepted)
        if through is None:
            pieces = [group]
        else:
            pieces = [
                list(p.nodes)
                for p in CapabilityBasedPartitioner(
                    gm, _Claimed(set(group)), allows_single_node_partition=True
                ).propose_partitions()
            ]
            checked = []
            for piece in pieces:  # a piece may still close a cycle with the groups before it
                if _cycle(piece, taken, accepted) is None:
                    checked.append(piece)
                else:
                    checked += [[n] for n in piece]
            pieces = checked
            plan.cuts.append(
                f"sdk:{plugin}'s group {k} ({len(group)} ops: "
                f"{', '.join(n.name for n in group[:6])}{', ...' if len(group) > 6 else ''}) "
                f"would form a cycle through {through.name} outside it: cut into "
                f"{len(pieces)} piece(s) of {', '.join(str(_calls(p)) for p in pieces)} ops"
            )
        for piece in pieces:
            for n in piece:
                taken[n] = len(accepted)
            accepted.append(piece)
    return accepted


def _cycle(
    group: list[torch.fx.Node], taken: dict[torch.fx.Node, int], accepted: list[list]
) -> torch.fx.Node | None:
    """An outside node through which contracting ``group`` would close a cycle (a path from
    the group back into it), given the accepted groups already contracted; or None."""
    inside = set(group)
    stack = [u for n in group for u in n.users if u not in inside]
    seen: set[torch.fx.Node] = set()
    first: dict[torch.fx.Node, torch.fx.Node] = {u: u for u in stack}
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        # an accepted group is one node: reaching one member reaches all its users
        members = accepted[taken[node]] if node in taken else [node]
        for m in members:
            for u in m.users:
                if u in inside:
                    return first[node]
                if u not in seen:
                    first.setdefault(u, first[node])
                    stack.append(u)
            if m is not node and m not in seen:
                seen.add(m)
    return None


def _unpacks_partition(node: torch.fx.Node) -> bool:
    """A getitem the fusing added to read a partition's output: glue, not an op to claim."""
    return node.target is operator.getitem and any(
        a.op == "call_module" for a in node.all_input_nodes
    )


def _crossing(nodes) -> tuple[int, int]:
    """How many tensors the nodes carry and their bytes (unknown sizes count 0 bytes)."""
    count = size = 0
    for node in nodes:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            count += 1
            numel = val.numel()
            size += int(numel) * val.element_size() if isinstance(numel, int) else 0
    return count, size


def _calls(nodes: Mapping | Sequence) -> int:
    """How many call nodes a group holds (the size the min_partition_size option counts)."""
    return sum(1 for n in nodes if n.op == "call_function")

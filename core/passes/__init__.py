"""Graph passes: named rewrites of the ATen graph, run before it is lowered.

Each pass is an :class:`sdk.GraphPass` (a name, a one-line description, and a function
that rewrites a ``torch.fx.GraphModule`` in place and returns how many places it changed).
The core's passes (:data:`CORE_PASSES`) run in a fixed order; the compile's plugin may turn
some off or add its own through ``sdk_graph_passes`` (:func:`choose`). :func:`run` runs the
chosen list on a copy of the graph (the op-level fallback runs the graph as AOTAutograd
made it) and reports each pass (:class:`sdk.PassReport`, in ``sdk.explain``).

A node a pass makes or rewrites carries ``meta[ORIGINS]`` (core/lowering/lowerer.py): the
nodes of the graph before the passes that it stands for, which reports name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from sdk.errors import SDKError
from sdk.plugin import CompileContext, GraphPass
from sdk.report import HookFault, PassReport

from ..registry import Registry, strict
from . import convolution, max_pool, permutations, products
from .needs import Needs


@dataclass(frozen=True)
class _CorePass:
    name: str
    description: str
    fn: Callable[[torch.fx.GraphModule, CompileContext, Needs], int]
    #: whether a graph has anything the pass might rewrite (a quick look at its nodes: a
    #: graph nothing might change is not copied)
    candidates: Callable[[torch.fx.Graph], bool]
    #: the field of :class:`sdk.Preferences` a plugin sets for this pass to run (None: it
    #: always runs)
    wanted_by: str | None = None


#: The core's passes, in the order they run.
CORE_PASSES = (
    _CorePass(
        "relu_into_addmm",
        "relu(addmm(...)) as one library call, aten._addmm_activation (the ReLU in the "
        "product's epilogue)",
        products.relu_into_addmm,
        products.has_relu_of_addmm,
    ),
    _CorePass(
        "mm_bias_into_kernel",
        "addmm read only by pointwise ops as mm plus an add of the bias, which the kernel "
        "of those ops takes",
        products.mm_bias_into_kernel,
        products.has_addmm,
        "mm_bias_in_kernel",
    ),
    _CorePass(
        "conv_bias_into_kernel",
        "a convolution's bias added by the kernel that follows the library call, not by the call",
        convolution.conv_bias_into_kernel,
        convolution.has_convolution_with_bias,
        "conv_bias_in_kernel",
    ),
    _CorePass(
        "accumulate_over_permutations",
        "an accumulating index_put through a permutation's indices (a mixture of experts' "
        "routing) as writes that never meet: no sort, no atomics",
        permutations.accumulate_over_permutations,
        permutations.has_accumulation,
    ),
    _CorePass(
        "max_pool_offsets",
        "max pooling whose indices only its backward reads saves int8 offsets in the window, "
        "not int64 indices (sdk::max_pool2d_offsets and its backward; a plugin that lowers "
        "max_pool2d_with_indices itself turns this off)",
        max_pool.count_offsets,
        max_pool.has_offsets,
    ),
)

#: The passes that rewrite AOTAutograd's joint graph, before the partition, by the name of
#: the pass (of :data:`CORE_PASSES`) that reports them and that a plugin turns off.
JOINT_PASSES = {
    "accumulate_over_permutations": permutations.on_joint_graph,
    "max_pool_offsets": max_pool.on_joint_graph,
}


@dataclass
class Plan:
    """The passes one compile runs, in order, each with the plugin that added it ("" for the
    core's), and the core's passes the plugin turned off."""

    passes: list[tuple[GraphPass, str]]
    off: list[str]
    #: the core's passes of the plan by name -> whether a graph has anything they might change
    candidates: dict[str, Callable[[torch.fx.Graph], bool]]

    def has_work(self, graph: torch.fx.Graph) -> bool:
        """Whether a pass might change ``graph`` (a pass of the plugin's always might)."""
        return any(by or self.candidates[p.name](graph) for p, by in self.passes)

    @property
    def key(self) -> str:
        """What the whole-graph cache keys a program on (the passes by name and owner)."""
        return ",".join(f"{by or 'core'}:{p.name}" for p, by in self.passes)


def core_passes(ctx: CompileContext, needs: Needs) -> list[GraphPass]:
    """The core's passes for this compile, in order: those whose capability the plugin
    declares (or that need none)."""
    return [
        GraphPass(p.name, p.description, functools.partial(p.fn, needs=needs))
        for p in CORE_PASSES
        if p.wanted_by is None or getattr(ctx.preferences, p.wanted_by)
    ]


def choose(hooks: Any, ctx: CompileContext, vendor: Mapping[str, Any]) -> Plan:
    """The passes to run for this compile: the core's, as the plugin's ``sdk_graph_passes``
    answers (an exception in the hook propagates, naming the plugin: the graph fails for it,
    as for any compile hook)."""
    core = core_passes(ctx, Needs(frozenset(vendor), hooks))
    candidates = {p.name: p.candidates for p in CORE_PASSES}
    answer = hooks.sdk_graph_passes(ctx=ctx, passes=tuple(core))
    if answer is None:
        return Plan([(p, "") for p in core], [], candidates)
    chosen = _checked(answer, ctx.plugin)
    ours = {id(p) for p in core}
    return Plan(
        [(p, "" if id(p) in ours else ctx.plugin) for p in chosen],
        [p.name for p in core if all(q is not p for q in chosen)],
        candidates,
    )


def _checked(answer: Any, plugin: str) -> list[GraphPass]:
    fix = "return a list of sdk.GraphPass (the passes given, less those to turn off, with your own), or None"
    if not isinstance(answer, (list, tuple)):
        raise TypeError(f"sdk:{plugin} sdk_graph_passes answered a {type(answer).__name__}; {fix}")
    names: set[str] = set()
    for p in answer:
        if not isinstance(p, GraphPass):
            raise TypeError(
                f"sdk:{plugin} sdk_graph_passes answered a {type(p).__name__} among its "
                f"passes; {fix}"
            )
        if p.name in names:
            raise ValueError(
                f"sdk:{plugin} sdk_graph_passes answered two passes named {p.name!r}; give "
                "each pass a name of its own"
            )
        names.add(p.name)
    return list(answer)


class _PassFailed(Exception):
    def __init__(self, name: str, plugin: str, exc: Exception) -> None:
        super().__init__(name)
        self.name, self.plugin, self.exc = name, plugin, exc


def run(
    plan: Plan, gm: torch.fx.GraphModule, ctx: CompileContext, reg: Registry
) -> tuple[torch.fx.GraphModule, list[PassReport], list[HookFault]]:
    """``gm`` rewritten by the plan's passes (a copy: ``gm`` is not touched; ``gm`` itself
    when no pass runs), what each pass changed, and the faults of the plugin's passes that
    were left out.

    A pass of the core that raises is a failure of the compile. A pass of the plugin that
    raises (or breaks the graph, or answers something else than a count) is left out: the
    passes run again from the graph as it was, without it, and the fault is the plugin's
    (strict mode raises :class:`sdk.PluginHookError`).
    """
    off = [PassReport(name, 0, off=True) for name in plan.off]
    if not plan.has_work(gm.graph):  # (no copy: nothing to rewrite)
        return gm, [PassReport(p.name, 0, by) for p, by in plan.passes] + off, []
    todo = list(plan.passes)
    faults: list[HookFault] = []
    while todo:
        work = copy_graph(gm)
        reports = []
        try:
            for p, by in todo:
                reports.append(PassReport(p.name, _run_one(p, by, work, ctx), by))
        except _PassFailed as failed:
            hook = f"pass {failed.name} (sdk_graph_passes)"
            faults.append(reg.fault(failed.plugin, hook, failed.exc, strict(ctx)))
            todo = [(p, by) for p, by in todo if p.name != failed.name]
            continue
        return work, reports + off, faults
    return gm, off, faults


def _run_one(p: GraphPass, by: str, gm: torch.fx.GraphModule, ctx: CompileContext) -> int:
    if not by:
        return p.fn(gm, ctx)
    try:
        count = p.fn(gm, ctx)
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise TypeError(
                f"returned {count!r}; return how many places the pass rewrote (an int, 0 for none)"
            )
        gm.graph.lint()
        for n in gm.graph.nodes:
            if n.op == "call_function" and "val" not in n.meta:
                raise ValueError(
                    f"left call node {n.name} ({n.target}) without meta['val']; give every "
                    "node the pass adds the fake tensor it produces"
                )
    except SDKError:
        raise  # the plugin says so on purpose: the user's error
    except Exception as exc:  # noqa: BLE001 - the plugin's fault: left out, and reported
        raise _PassFailed(p.name, by, exc) from exc
    return count


def copy_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose graph (nodes and their ``meta`` dicts) a pass may change; the
    module's attributes (constants) are shared."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    for node in graph.nodes:
        node.meta = dict(node.meta)
    return torch.fx.GraphModule(gm, graph)


def summary(reports: Sequence[PassReport]) -> str:
    """One phrase of what the passes did (the ``+sdk`` log line)."""
    return ", ".join(str(r) for r in reports) or "none"


__all__ = ["CORE_PASSES", "Needs", "Plan", "choose", "copy_graph", "core_passes", "run", "summary"]

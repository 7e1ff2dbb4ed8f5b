"""The op-level fallback: run an ATen graph op by op, exactly as eager would.

It is the whole execution path when a graph cannot be compiled, and the path
of every single op a plugin cannot generate. Each op run this way is recorded
(:class:`sdk.report.FallbackReport`) with the reason.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch.fx

from sdk.report import FallbackReport

from .adapters.torch_private import OpOverload


def aten_calls(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The op calls of ``gm`` (tuple unpacking through getitem is not an op)."""
    return [
        n for n in gm.graph.nodes if n.op == "call_function" and n.target is not operator.getitem
    ]


def written_inputs(gm: torch.fx.GraphModule) -> frozenset[int]:
    """The positions of the graph's inputs it writes in place: each the target of an
    ``aten.copy_`` (an input mutation AOTAutograd kept in the graph)."""
    position = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    return frozenset(
        position[n.args[0]]
        for n in gm.graph.nodes
        if n.op == "call_function" and n.target is _COPY_INTO and n.args[0] in position
    )


_COPY_INTO = torch.ops.aten.copy_.default


def op_name(target: Any) -> str:
    """``aten.mul.Tensor`` for an OpOverload, the qualified name for anything else."""
    if isinstance(target, OpOverload):
        return str(target)
    return f"{getattr(target, '__module__', '')}.{getattr(target, '__name__', target)}".lstrip(".")


def whole_graph(gm: torch.fx.GraphModule, reason: str) -> tuple[Callable, list[FallbackReport]]:
    """Run all of ``gm`` through ATen; every call is recorded with ``reason``."""
    reports = [FallbackReport(op_name(n.target), reason, n.name) for n in aten_calls(gm)]
    forward = gm.forward

    def run(args: list[Any]) -> Any:
        return forward(*args)

    return run, reports

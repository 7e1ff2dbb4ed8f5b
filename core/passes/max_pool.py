"""Max pooling's saved indices as int8 offsets in the window (:mod:`core.lowering.pool_offsets`).

On AOTAutograd's joint graph, before the partition: a ``max_pool2d_with_indices`` whose
indices only its backward reads becomes ``sdk::max_pool2d_offsets``, and that backward
``sdk::max_pool2d_offsets_backward``. The partition then saves the offsets (one byte an
element) where it saved the indices (eight). Pooling with dilation, windows of more than
64 elements (:data:`~core.lowering.pool_offsets.MAX_WINDOW`), or indices read by anything else (a user's ``return_indices=True``) are left
as they are.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from sdk.plugin import CompileContext

from ..adapters.torch_private import aten
from ..lowering.pool_offsets import MAX_WINDOW, OFFSETS, OFFSETS_BACKWARD
from .needs import Needs

#: ``meta`` key of a node this pass rewrote on the joint graph (counted per graph)
REWRITTEN = "sdk_max_pool_offsets"

_POOL_DEFAULTS = ((), 0, 1, False)  # stride, padding, dilation, ceil_mode


def _pair(v: Any, default: Any) -> list[int]:
    v = default if v is None or (isinstance(v, (list, tuple)) and len(v) == 0) else v
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(v[0]), int(v[-1])]


def _params(args: tuple, kwargs: dict) -> tuple | None:
    """(kernel, stride, padding, ceil_mode) of a pooling call without dilation, its
    arguments after the input (``args``), each a pair of ints; None where it cannot be
    rewritten."""
    names = ("stride", "padding", "dilation", "ceil_mode")
    rest = (
        list(args[1:]) + [kwargs.get(n, d) for n, d in zip(names, _POOL_DEFAULTS)][len(args) - 1 :]
    )
    try:
        kernel = _pair(args[0], None)
        stride, padding = _pair(rest[0], kernel), _pair(rest[1], 0)
        dilation = _pair(rest[2], 1)
    except (TypeError, ValueError):  # (a symbolic size among them)
        return None
    if dilation != [1, 1] or kernel[0] * kernel[1] > MAX_WINDOW:
        return None
    return kernel, stride, padding, bool(rest[3])


def on_joint_graph(gm: torch.fx.GraphModule) -> int:
    """The rewrite (see the module's text); returns how many poolings it rewrote."""
    count = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not aten.max_pool2d_with_indices.default:
            continue
        params = _params(n.args[1:], n.kwargs)
        if params is None or any(u.target is not operator.getitem for u in n.users):
            continue
        indices = [u for u in n.users if u.args[1] == 1]
        backwards = [b for i in indices for b in i.users]
        if not indices or not all(_backward_of(b, params, indices[0]) for b in backwards):
            continue
        kernel, stride, padding, ceil_mode = params
        values_val, indices_val = n.meta["val"]
        offsets_val = indices_val.to(torch.int8)
        n.target = OFFSETS
        n.args, n.kwargs = (n.args[0], kernel, stride, padding, ceil_mode), {}
        n.meta["val"] = (values_val, offsets_val)
        n.meta[REWRITTEN] = True
        for i in indices:
            i.meta["val"] = offsets_val
        for b in backwards:
            grad, x = b.args[0], b.args[1]
            b.target = OFFSETS_BACKWARD
            b.args, b.kwargs = (grad, x, kernel, stride, padding, ceil_mode, b.args[7]), {}
            b.meta[REWRITTEN] = True
        count += 1
    if count:
        gm.graph.lint()
        gm.recompile()
    return count


def _backward_of(b: torch.fx.Node, params: tuple, indices: torch.fx.Node) -> bool:
    """Whether ``b`` is the pooling's backward, reading ``indices`` only as its indices."""
    if (
        b.op != "call_function"
        or b.target is not aten.max_pool2d_with_indices_backward.default
        or len(b.args) != 8
        or b.kwargs
        or b.args[7] is not indices
        or indices in b.args[:7]
    ):
        return False
    return _params(b.args[2:7], {}) == params


def has_offsets(graph: torch.fx.Graph) -> bool:
    return any(REWRITTEN in n.meta for n in graph.nodes)


def count_offsets(
    gm: torch.fx.GraphModule, ctx: CompileContext | None = None, needs: Needs | None = None
) -> int:
    """How many of the joint graph's rewrites landed in ``gm`` (the pass itself runs on the
    joint graph, before the partition: see :func:`on_joint_graph`)."""
    return sum(1 for n in gm.graph.nodes if REWRITTEN in n.meta)

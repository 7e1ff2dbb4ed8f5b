"""Passes over matrix products with a bias (``addmm``): the ReLU after one into its library
call, and its bias into the generated kernel that reads it."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from sdk.plugin import CompileContext

from ..adapters.torch_private import aten, has_kernel
from ..lowering import ORIGINS, origins_of
from .needs import Needs

_SCALES = {"beta", "alpha"}
_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def graph_outputs(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    return {a for a in out.args[0] if isinstance(a, torch.fx.Node)}


def has_relu_of_addmm(graph: torch.fx.Graph) -> bool:
    return any(
        n.target is aten.relu.default
        and isinstance(n.args[0], torch.fx.Node)
        and n.args[0].target is aten.addmm.default
        for n in graph.nodes
    )


def has_addmm(graph: torch.fx.Graph) -> bool:
    return any(n.target is aten.addmm.default for n in graph.nodes)


def relu_into_addmm(gm: torch.fx.GraphModule, ctx: CompileContext, needs: Needs) -> int:
    """``relu(addmm(...))`` as one library call, ``aten._addmm_activation`` (cuBLASLt
    applies the ReLU in the product's epilogue: no kernel reads the product back, and a
    small layer launches one kernel instead of two), where ATen runs the product (not the
    plugin's ``sdk_extern``), on the graph's device, and only this ReLU reads it.

    The ``addmm`` node becomes the fused call (keeping its name, which reports show) and
    the ReLU's readers read it."""
    if not has_kernel(aten._addmm_activation.default, ctx.device_type):
        return 0
    outputs = graph_outputs(gm)
    count = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not aten.relu.default:
            continue
        (src,) = n.args
        if not (
            isinstance(src, torch.fx.Node)
            and src.op == "call_function"
            and src.target is aten.addmm.default
            and len(src.users) == 1
            and src not in outputs
        ):
            continue
        val = src.meta.get("val")
        if (
            src.name in needs.taken
            or not set(src.kwargs) <= _SCALES
            or not isinstance(val, torch.Tensor)
            or val.device.type != ctx.device_type  # (a product on the host: as it is)
        ):
            continue
        src.meta[ORIGINS] = origins_of(src) + origins_of(n)
        src.target = aten._addmm_activation.default
        n.replace_all_uses_with(src)
        gm.graph.erase_node(n)
        count += 1
    return count


def mm_bias_into_kernel(gm: torch.fx.GraphModule, ctx: CompileContext, needs: Needs) -> int:
    """``addmm(bias, a, b)`` read only by pointwise ops as ``mm(a, b)`` plus an ``add`` of
    the bias, which the generated kernel of those ops takes (``Preferences.mm_bias_in_kernel``:
    the library then picks its product kernel without a bias epilogue). Kept whole: a
    scaled product (beta, alpha), one the plugin's ``sdk_extern`` takes, a graph output, or
    one whose only reader is a ReLU (:func:`relu_into_addmm`'s, where it applies)."""
    outputs = graph_outputs(gm)
    count = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not aten.addmm.default:
            continue
        if (
            len(n.args) > 3
            or any(n.kwargs.get(k, 1) != 1 for k in _SCALES)
            or set(n.kwargs) - _SCALES
            or not _is_tensor(gm, n.args[0])
            or n.name in needs.taken
            or n in outputs
            or not _pointwise_reads(n)
        ):
            continue
        if len(n.users) == 1 and next(iter(n.users)).target is aten.relu.default:
            continue
        bias, a, b = n.args
        origins = origins_of(n)
        n.target, n.args, n.kwargs = aten.mm.default, (a, b), {}
        n.meta[ORIGINS] = origins
        with gm.graph.inserting_after(n):
            add = gm.graph.call_function(aten.add.Tensor, (n, bias))
        add.meta.update(val=n.meta["val"], **{ORIGINS: origins})
        n.replace_all_uses_with(add, delete_user_cb=lambda user, add=add: user is not add)
        count += 1
    return count


def _is_tensor(gm: torch.fx.GraphModule, x: Any) -> bool:
    """Whether ``x`` (an argument) is a tensor of the graph."""
    if not isinstance(x, torch.fx.Node):
        return False
    if x.op == "get_attr":
        value: Any = gm
        for part in x.target.split("."):
            value = getattr(value, part, None)
        return isinstance(value, torch.Tensor)
    return isinstance(x.meta.get("val"), torch.Tensor)


def _pointwise_reads(n: torch.fx.Node) -> bool:
    """Every reader of ``n`` is a pointwise op (through views), as Inductor's
    ``is_pointwise_use`` asks."""
    for user in n.users:
        if user.op != "call_function":
            return False
        if user.target in _VIEWS:
            if not _pointwise_reads(user):
                return False
            continue
        if user.target is aten._to_copy.default and user.kwargs.get("device") is None:
            continue  # a dtype conversion (a bf16 GELU's upcast): pointwise
        tags = getattr(user.target, "tags", ())
        if torch.Tag.pointwise not in tags:
            return False
    return bool(n.users)

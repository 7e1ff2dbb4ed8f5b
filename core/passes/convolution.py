"""A convolution's bias added in the generated kernel that follows the library call."""

from __future__ import annotations

import torch
import torch.fx

from sdk.plugin import CompileContext

from ..adapters.torch_private import aten
from ..lowering import ORIGINS, origins_of, refusal
from .needs import Needs
from .products import _is_tensor


def has_convolution_with_bias(graph: torch.fx.Graph) -> bool:
    return any(
        n.target is aten.convolution.default and isinstance(n.args[2], torch.fx.Node)
        for n in graph.nodes
    )


def conv_bias_into_kernel(gm: torch.fx.GraphModule, ctx: CompileContext, needs: Needs) -> int:
    """``convolution(x, w, bias, ...)`` as ``convolution(x, w, None, ...)`` plus an ``add``
    of the bias viewed as ``(C, 1, ...)``, which the generated kernel after the call takes
    with BatchNorm, activation and residual (``Preferences.conv_bias_in_kernel``: cuDNN adds a
    bias in a kernel of its own). Where the core lowers the convolution (a plugin's
    ``sdk_op_support`` refusing it sends it to ATen whole), and the result is not empty.

    The convolution node keeps its name (reports show it, and ``sdk_extern``'s answer for it
    gets a ``None`` bias); the view and the add are reported as the convolution, as they
    stand for its bias."""
    count = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not aten.convolution.default:
            continue
        x, weight, bias, *rest = n.args
        out = n.meta["val"]
        if not _is_tensor(gm, bias) or refusal(n, needs.hooks, ctx) is not None:
            continue
        if not out.numel() > 0:
            continue
        origins = origins_of(n)
        n.args = (x, weight, None, *rest)
        n.meta[ORIGINS] = origins
        shape = [-1] + [1] * (out.ndim - 2)
        with gm.graph.inserting_after(n):
            view = gm.graph.call_function(aten.view.default, (bias, shape))
        with gm.graph.inserting_after(view):
            add = gm.graph.call_function(aten.add.Tensor, (n, view))
        view.meta.update(val=_value(gm, bias).view(shape), **{ORIGINS: origins})
        add.meta.update(val=out, **{ORIGINS: origins})
        n.replace_all_uses_with(add, delete_user_cb=lambda user, add=add: user is not add)
        count += 1
    return count


def _value(gm: torch.fx.GraphModule, x: torch.fx.Node) -> torch.Tensor:
    """The (fake) tensor of node ``x``: its ``meta["val"]``, or a constant's own value."""
    if x.op == "get_attr":
        value = gm
        for part in x.target.split("."):
            value = getattr(value, part)
        return value
    return x.meta["val"]

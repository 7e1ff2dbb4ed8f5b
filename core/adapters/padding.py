"""Decompositions of the padding gradients torch has none for.

``replication_pad{1,2,3}d_backward``: each input element's gradient sums the output elements
that replicate it. Along one padded dimension of an input of ``n`` elements, output rows
``0 .. before`` all read input row 0, rows ``before + n - 1 ..`` all read row ``n - 1``, and
the rows between read one row each. So the gradient is, dimension by dimension: the sum of
the first ``before + 1`` rows, the rows between as they are, the sum of the rest
(sums and slices: deterministic, and fused by the scheduler). Without this, ATen ran the op
one by one in every training graph with ``nn.ReplicationPad``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten


def _fold(g: torch.Tensor, dim: int, before: int, n: int) -> torch.Tensor:
    """The gradient along ``dim`` of a replicating pad of ``before`` elements ahead of ``n``."""
    if n == 1:
        return g.sum(dim, keepdim=True)
    last = before + n - 1  # the first output row that reads input row n - 1
    first = g.narrow(dim, 0, before + 1).sum(dim, keepdim=True)
    end = g.narrow(dim, last, g.shape[dim] - last).sum(dim, keepdim=True)
    return torch.cat([first, g.narrow(dim, before + 1, n - 2), end], dim)


def replication_pad_backward(dims: int) -> Callable[..., Any]:
    """The gradient of ``replication_pad{dims}d(self, padding)`` (padding: the last
    dimension's before and after, then the one ahead of it, ...). Anything else than such a
    call's arguments, and negative padding (a crop), is left to ATen (and its error)."""

    def backward(grad_output: torch.Tensor, self: torch.Tensor, padding: list[int]) -> Any:
        if len(padding) != 2 * dims or self.dim() < dims or grad_output.dim() != self.dim():
            return NotImplemented
        if any(p < 0 for p in padding):
            return NotImplemented
        padded = list(self.shape)
        for i in range(dims):
            padded[-1 - i] += padding[2 * i] + padding[2 * i + 1]
        if list(grad_output.shape) != padded:
            return NotImplemented
        g = grad_output
        for i in range(dims):
            dim = g.dim() - 1 - i
            g = _fold(g, dim, padding[2 * i], self.shape[dim])
        return g

    return backward


def padding_decompositions() -> dict[Any, Callable[..., Any]]:
    return {
        getattr(aten, f"replication_pad{k}d_backward").default: replication_pad_backward(k)
        for k in (1, 2, 3)
        if hasattr(aten, f"replication_pad{k}d_backward")
    }

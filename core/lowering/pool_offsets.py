"""Max pooling's indices as offsets in the window: two operators of the ``sdk`` namespace.

``max_pool2d_with_indices`` answers each maximum's position in the input plane (int64, 8
bytes an element); its backward reads them once per window that can hold an input element
(four for ResNet's 3x3 stride-2 stem). What the backward needs is only which element of its
window won: ``sdk::max_pool2d_offsets`` answers that, ``kh * kw`` positions in int8 (row
``a``, column ``b`` of the window as ``a * kw + b``), and ``sdk::max_pool2d_offsets_backward``
takes it. A training graph saves them for its backward instead of the indices: an eighth of
the bytes, stored once and gathered four times (Inductor's low-memory max pooling does the
same). :mod:`core.passes.max_pool` puts them in AOTAutograd's joint graph where the indices
feed only the backward; the core lowers both (:mod:`core.lowering.pooling`), and where a
graph runs through ATen their kernels below are ATen's, the indices converted.

Dilation stays ATen's (the pass leaves those graphs as they are).
"""

from __future__ import annotations

import torch

#: the largest window the pass rewrites: the core's lowering unrolls up to 64 elements (its
#: offsets fit int8 with room to spare)
MAX_WINDOW = 64


def _grid(out: torch.Tensor, stride: list[int], padding: list[int]) -> tuple:
    """Each output position's window origin in the input, rows and columns."""
    oh, ow = out.shape[-2:]
    rows = torch.arange(oh, device=out.device).view(-1, 1) * stride[0] - padding[0]
    cols = torch.arange(ow, device=out.device).view(1, -1) * stride[1] - padding[1]
    return rows, cols


def indices_to_offsets(
    indices: torch.Tensor, width: int, kernel_size: list[int], stride: list[int], padding: list[int]
) -> torch.Tensor:
    """ATen's indices (``row * width + column`` in the input plane) as offsets in the window."""
    rows, cols = _grid(indices, stride, padding)
    offsets = (indices // width - rows) * kernel_size[1] + (indices % width - cols)
    return offsets.to(torch.int8)


def offsets_to_indices(
    offsets: torch.Tensor, width: int, kernel_size: list[int], stride: list[int], padding: list[int]
) -> torch.Tensor:
    """Offsets in the window as ATen's indices into the input plane."""
    rows, cols = _grid(offsets, stride, padding)
    off = offsets.to(torch.int64)
    return (rows + off // kernel_size[1]) * width + cols + off % kernel_size[1]


@torch.library.custom_op("sdk::max_pool2d_offsets", mutates_args=())
def max_pool2d_offsets(
    x: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``max_pool2d_with_indices`` (no dilation) with each maximum's offset in its window."""
    values, indices = torch.ops.aten.max_pool2d_with_indices.default(
        x, kernel_size, stride, padding, [1, 1], ceil_mode
    )
    return values, indices_to_offsets(indices, x.shape[-1], kernel_size, stride, padding)


@max_pool2d_offsets.register_fake
def _(x, kernel_size, stride, padding, ceil_mode):
    values, indices = torch.ops.aten.max_pool2d_with_indices.default(
        x, kernel_size, stride, padding, [1, 1], ceil_mode
    )
    return values, indices.to(torch.int8)


@torch.library.custom_op("sdk::max_pool2d_offsets_backward", mutates_args=())
def max_pool2d_offsets_backward(
    grad: torch.Tensor,
    x: torch.Tensor,
    kernel_size: list[int],
    stride: list[int],
    padding: list[int],
    ceil_mode: bool,
    offsets: torch.Tensor,
) -> torch.Tensor:
    """``max_pool2d_with_indices_backward`` from :func:`max_pool2d_offsets`' offsets."""
    indices = offsets_to_indices(offsets, x.shape[-1], kernel_size, stride, padding)
    return torch.ops.aten.max_pool2d_with_indices_backward.default(
        grad, x, kernel_size, stride, padding, [1, 1], ceil_mode, indices
    )


@max_pool2d_offsets_backward.register_fake
def _(grad, x, kernel_size, stride, padding, ceil_mode, offsets):
    return torch.ops.aten.max_pool2d_with_indices_backward.default(
        grad, x, kernel_size, stride, padding, [1, 1], ceil_mode, offsets.to(torch.int64)
    )


OFFSETS = torch.ops.sdk.max_pool2d_offsets.default
OFFSETS_BACKWARD = torch.ops.sdk.max_pool2d_offsets_backward.default

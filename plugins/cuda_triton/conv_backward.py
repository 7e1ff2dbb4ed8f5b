"""A convolution's bias gradient as a sum the core generates, not inside the library call.

``convolution_backward`` asked for the bias gradient sums the output gradient over every
dimension but the channels inside ATen (a reduction kernel of its own on the GPU: 0.36 ms of
a ConvNeXt-tiny training step on the H100). As a sum in the graph it is a generated
reduction that can share a kernel with whatever produced the output gradient (a layer
norm's backward), as Inductor decomposes it on GPUs. The call then computes the input and
weight gradients only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten


def convolution_backward(
    grad_output: torch.Tensor,
    input: torch.Tensor,
    weight: torch.Tensor,
    bias_sizes: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: int,
    output_mask: list[bool],
) -> Any:
    if not output_mask[2] or input.shape[1] == 0:
        return NotImplemented  # (then ATen's: no bias gradient, or no input channels)
    grad_bias = aten.sum(grad_output, [0, *range(2, grad_output.dim())])
    grad_input, grad_weight, _ = aten.convolution_backward(
        grad_output,
        input,
        weight,
        bias_sizes,
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        [output_mask[0], output_mask[1], False],
    )
    return grad_input, grad_weight, grad_bias


def decompositions() -> dict[Any, Callable[..., Any]]:
    return {aten.convolution_backward.default: convolution_backward}

"""Compare a compiled function with eager, the way Inductor's tests do.

``check(fn, inputs, plugin=...)`` compiles ``fn`` with ``sdk:<plugin>``, runs
it on the inputs, and compares outputs with eager; when any floating input
needs grad it also compares the gradients of every such input for a random
upstream gradient. bf16/fp16 are compared against an fp32 eager reference
cast down ("reference in float"), with Inductor's low-precision tolerances.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

import sdk

TOL = {
    torch.float32: dict(rtol=1.3e-5, atol=1e-5),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
}


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in _tensors(y)]
    return []


def _clone(x: Any, dtype: torch.dtype | None = None) -> Any:
    if isinstance(x, torch.Tensor):
        y = x.detach()
        if dtype is not None and y.dtype in (torch.bfloat16, torch.float16):
            y = y.to(dtype)
        else:
            y = y.clone()
        # keep the input's strides and offset: a clone would be contiguous
        if dtype is None and (not x.is_contiguous() or x.storage_offset()):
            span = x.storage_offset() + 1 + sum((s - 1) * st for s, st in zip(x.shape, x.stride()))
            base = torch.empty(span, dtype=x.dtype, device=x.device)
            y = base.as_strided(x.size(), x.stride(), x.storage_offset())
            y.copy_(x.detach())
        return y.requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(y, dtype) for y in x)
    return x


def compile_fn(fn: Callable, plugin: str, **options: Any) -> Callable:
    return torch.compile(fn, backend=sdk.backend(plugin, **options), fullgraph=False)


def check(
    fn: Callable,
    inputs: Sequence[Any],
    *,
    plugin: str,
    grad: bool = True,
    tol: dict | None = None,
    reference_in_float: bool = True,
    **options: Any,
) -> Any:
    """Compiled ``fn`` against eager on ``inputs`` (forward, and backward when inputs need grad).

    ``reference_in_float=False`` for modules holding low-precision parameters: eager
    then runs in the inputs' own dtype.
    """
    actual_in = _clone(list(inputs))
    low = reference_in_float and any(
        t.dtype in (torch.bfloat16, torch.float16) for t in _tensors(list(inputs))
    )
    ref_in = _clone(list(inputs), torch.float32 if low else None)
    compiled = compile_fn(fn, plugin, **options)
    actual = compiled(*actual_in)
    expected = fn(*ref_in)
    _compare(actual, expected, tol)
    leaves_a = [t for t in _tensors(actual_in) if t.requires_grad]
    leaves_e = [t for t in _tensors(ref_in) if t.requires_grad]
    outs_a = [t for t in _tensors(actual) if t.requires_grad]
    outs_e = [t for t in _tensors(expected) if t.requires_grad]
    if grad and leaves_a and outs_a:
        gouts = [torch.randn_like(t) for t in outs_a]
        ga = torch.autograd.grad(outs_a, leaves_a, gouts, allow_unused=True)
        ge = torch.autograd.grad(
            outs_e, leaves_e, [g.to(t.dtype) for g, t in zip(gouts, outs_e)], allow_unused=True
        )
        _compare(list(ga), list(ge), tol)
    return actual


def _compare(actual: Any, expected: Any, tol: dict | None) -> None:
    a, e = _tensors(actual), _tensors(expected)
    assert len(a) == len(e), f"{len(a)} outputs, eager gives {len(e)}"
    for x, y in zip(a, e):
        assert x.shape == y.shape, f"shape {tuple(x.shape)} vs eager {tuple(y.shape)}"
        y = y.to(x.dtype) if y.dtype != x.dtype and x.dtype in TOL and y.is_floating_point() else y
        assert x.dtype == y.dtype, f"dtype {x.dtype} vs eager {y.dtype}"
        t = tol or TOL.get(x.dtype, dict(rtol=0, atol=0))
        torch.testing.assert_close(x.detach(), y.detach(), equal_nan=True, **t)

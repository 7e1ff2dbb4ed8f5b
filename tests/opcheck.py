"""Compare a compiled function with eager, the way Inductor's tests do.

``check(fn, inputs, plugin=...)`` compiles ``fn`` with ``sdk:<plugin>``, runs
it on the inputs, and compares outputs with eager; when any floating input
needs grad it also compares the gradients of every such input for a random
upstream gradient. bf16/fp16 are compared against an fp32 eager reference
cast down ("reference in float"), with Inductor's low-precision tolerances; a tensor outside
them still passes where its error against the reference is at most twice eager's own in that
precision (Dynamo's rule: eager's rounding is not the compiler's error).
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
    fallbacks: bool = False,
    **options: Any,
) -> Any:
    """Compiled ``fn`` against eager on ``inputs`` (forward, and backward when inputs need grad).

    ``reference_in_float=False`` for modules holding low-precision parameters: eager
    then runs in the inputs' own dtype. No op may run through ATen one by one (the
    graphs' fallbacks, from ``sdk.collect_reports``) unless ``fallbacks``.
    """
    with sdk.collect_reports() as reports:
        actual = _check(fn, inputs, plugin, grad, tol, reference_in_float, options)
    ran_in_aten = sorted({fb.op for g in reports.graphs for fb in g.fallbacks})
    assert fallbacks or not ran_in_aten, f"ops run in ATen: {ran_in_aten}"
    return actual


def _check(
    fn: Callable,
    inputs: Sequence[Any],
    plugin: str,
    grad: bool,
    tol: dict | None,
    reference_in_float: bool,
    options: dict[str, Any],
) -> Any:
    actual_in = _clone(list(inputs))
    low = reference_in_float and any(
        t.dtype in (torch.bfloat16, torch.float16) for t in _tensors(list(inputs))
    )
    ref_in = _clone(list(inputs), torch.float32 if low else None)
    compiled = compile_fn(fn, plugin, **options)
    actual = compiled(*actual_in)
    expected = fn(*ref_in)
    gouts: list[torch.Tensor] = []
    eager_low: dict[str, Any] = {}

    def in_low_precision(what: str) -> list[torch.Tensor]:
        """Eager in the inputs' own dtype (run once, when a comparison needs it): its
        outputs, or its gradients for ``gouts``."""
        if what not in eager_low:  # (the gradients once ``gouts`` are drawn)
            low_in = _clone(list(inputs))
            outs = fn(*low_in)
            eager_low["out"] = _tensors(outs)
            leaves = [t for t in _tensors(low_in) if t.requires_grad]
            need = [t for t in _tensors(outs) if t.requires_grad]
            if gouts and leaves and need:
                eager_low["grad"] = list(
                    torch.autograd.grad(need, leaves, gouts, allow_unused=True)
                )
        return eager_low[what]

    _compare(actual, expected, tol, (lambda: in_low_precision("out")) if low else None)
    leaves_a = [t for t in _tensors(actual_in) if t.requires_grad]
    leaves_e = [t for t in _tensors(ref_in) if t.requires_grad]
    outs_a = [t for t in _tensors(actual) if t.requires_grad]
    outs_e = [t for t in _tensors(expected) if t.requires_grad]
    if grad and leaves_a and outs_a:
        gouts[:] = [torch.randn_like(t) for t in outs_a]
        ga = torch.autograd.grad(outs_a, leaves_a, gouts, allow_unused=True)
        ge = torch.autograd.grad(
            outs_e, leaves_e, [g.to(t.dtype) for g, t in zip(gouts, outs_e)], allow_unused=True
        )
        _compare(list(ga), list(ge), tol, (lambda: in_low_precision("grad")) if low else None)
    return actual


def _compare(
    actual: Any,
    expected: Any,
    tol: dict | None,
    eager_low: Callable[[], list[torch.Tensor]] | None = None,
) -> None:
    """``actual`` against ``expected`` within the dtype's tolerance. With ``eager_low`` (a
    low-precision result against a float32 reference): a tensor outside the tolerance still
    passes where its RMSE against the reference is at most twice eager's own in that
    low precision, plus 1e-4: Dynamo's accuracy rule for low precision (eager's rounding is
    not the compiler's error)."""
    a, e = _tensors(actual), _tensors(expected)
    assert len(a) == len(e), f"{len(a)} outputs, eager gives {len(e)}"
    for i, (x, y) in enumerate(zip(a, e)):
        assert x.shape == y.shape, f"shape {tuple(x.shape)} vs eager {tuple(y.shape)}"
        ref = y
        y = y.to(x.dtype) if y.dtype != x.dtype and x.dtype in TOL and y.is_floating_point() else y
        assert x.dtype == y.dtype, f"dtype {x.dtype} vs eager {y.dtype}"
        t = tol or TOL.get(x.dtype, dict(rtol=0, atol=0))
        try:
            torch.testing.assert_close(x.detach(), y.detach(), equal_nan=True, **t)
        except AssertionError:
            if eager_low is None or not x.is_floating_point():
                raise
            low = _tensors(eager_low())[i]
            mine, theirs = _rmse(x, ref), _rmse(low, ref)
            if not mine <= 2 * theirs + 1e-4:
                raise AssertionError(
                    f"RMSE against the float32 reference {mine:.3g}, eager in {x.dtype} "
                    f"{theirs:.3g} (allowed: 2x eager's + 1e-4)"
                ) from None


def _rmse(a: torch.Tensor, ref: torch.Tensor) -> float:
    a, ref = a.detach().double(), ref.detach().double()
    finite = torch.isfinite(ref) & torch.isfinite(a)
    if not torch.equal(torch.isfinite(ref), torch.isfinite(a)):
        return float("inf")
    return float((a[finite] - ref[finite]).pow(2).mean().sqrt()) if finite.any() else 0.0

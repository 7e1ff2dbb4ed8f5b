"""``sdk.explain``: compile a function and say what became of every op."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from sdk.report import ExplainReport


def explain(
    fn: Callable[..., Any],
    *args: Any,
    backend: Any = "sdk:cpu_cpp",
    dynamic: bool | None = None,
    **options: Any,
) -> ExplainReport:
    """Compile ``fn`` with ``backend`` on ``args``, run it once and report.

    ``backend`` is ``"sdk:<plugin>"`` or an ``sdk.backend(...)``; ``dynamic`` is
    ``torch.compile``'s (True: symbolic sizes, see ``GraphReport.sizes``); ``options`` are
    the backend's options (added to the backend's own).
    If an output needs grad, the backward runs as well (through
    ``torch.autograd.grad``, so no ``.grad`` is touched) and its graph is
    reported. Dynamo's caches are reset first, so the report covers a cold
    compile of ``fn``.
    """
    from sdk import backend as make_backend
    from sdk.core import pipeline
    from sdk.core.adapters import torch_private as tp

    if isinstance(backend, str):
        name = backend[4:] if backend.startswith("sdk:") else backend
        compiled_backend = make_backend(name, **options)
    elif isinstance(backend, pipeline.Backend):
        compiled_backend = make_backend(backend.name, **{**backend.options, **options})
    else:
        raise TypeError(
            f"sdk.explain: backend must be 'sdk:<plugin>' or sdk.backend(...), "
            f"got {type(backend).__name__}"
        )
    report = ExplainReport()
    tp.reset_dynamo()
    breaks_before = tp.graph_break_count()
    token = pipeline.collect_reports(report.graphs)
    try:
        out = torch.compile(fn, backend=compiled_backend, dynamic=dynamic)(*args)
        outs = [t for t in _tensors(out) if t.requires_grad and t.grad_fn is not None]
        leaves = _leaves(outs)
        if outs and leaves:
            torch.autograd.grad(outs, leaves, [torch.ones_like(t) for t in outs], allow_unused=True)
    finally:
        pipeline.stop_collecting(token)
    report.graph_breaks = tp.graph_break_count() - breaks_before
    return report


def _tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _tensors(item)]
    if isinstance(x, dict):
        return [t for item in x.values() for t in _tensors(item)]
    return []


def _leaves(outs: list[torch.Tensor]) -> list[torch.Tensor]:
    """The leaf tensors the outputs' autograd graph accumulates into (inputs, parameters)."""
    leaves: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    stack = [t.grad_fn for t in outs if t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        leaf = getattr(fn, "variable", None)
        if isinstance(leaf, torch.Tensor):
            leaves[id(leaf)] = leaf
        stack.extend(f for f, _ in fn.next_functions)
    return list(leaves.values())

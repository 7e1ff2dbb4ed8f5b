"""The tables of the lowering: each op's lowering (:data:`LOWERINGS`, filled by
:func:`register` from the op-family modules), the library calls that run through ATen on
purpose (:data:`EXTERN_OPS`), the collectives, and the in-place forms of library calls."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..adapters.torch_private import OpOverload, OpOverloadPacket, aten, defined_op
from ..ir.graph import LIBRARY_OPS

LOWERINGS: dict[Any, Callable[..., Any]] = {}

#: Lowerings of ops that torch defines only once some module of its own is imported (Dynamo's
#: ``prims.fma``, from ``torch._inductor.inductor_prims``, which Dynamo imports where it emits
#: one), by qualified name (``"prims::fma"``): :func:`resolve_late` moves each into
#: :data:`LOWERINGS` once its op exists, so the SDK itself never pays for that import.
_LATE: dict[str, Callable[..., Any]] = {}

#: Library ops: run through ATen (cuBLAS, oneDNN, cuDNN, flash attention...) on purpose: the
#: library calls a plugin may take over (``sdk.ir.LIBRARY_OPS``; aten.convolution is lowered by
#: _convolution, which makes the call), and these.
EXTERN_OPS = (LIBRARY_OPS - {aten.convolution.default}) | {
    aten._addmm_activation.default,  # relu(addmm(...)) as one call: core/passes/products.py
    aten._adaptive_avg_pool2d_backward.default,  # the forward: _adaptive_avg_pool2d
    aten.avg_pool2d.default,
    aten.avg_pool2d_backward.default,
    aten.scatter_add.default,  # index_put: _index_put; scatter.src/.value: _scatter
    aten.scatter_reduce.two,
    aten.index_add.default,
    aten.sort.default,
    aten.topk.default,
    aten.cumsum.default,
    aten.cumprod.default,  # (prod's gradient)
    aten.as_strided_scatter.default,  # (Swin's and FocalNet's backwards)
    aten._embedding_bag.default,
    aten.upsample_nearest2d.default,
}

#: Library ops whose functional form copies its first argument and then updates the copy in
#: place, as the in-place form does to the argument itself. Where that argument is a
#: temporary of the program dying at the call (the zeros an embedding backward accumulates
#: into), core/memory.py runs the in-place form over it and skips the copy.
IN_PLACE_FORMS = {
    aten.index_add.default: aten.index_add_.default,
    aten.index_put.default: aten.index_put_.default,
}

_functional = torch.ops._c10d_functional
#: Functional collectives (torch.distributed._functional_collectives, FSDP2 and DTensor in
#: graphs): each starts its communication and returns its output at once; a wait_tensor
#: later makes the output ready. Library calls, ordered by the program (core/program.py:
#: a collective as early as its inputs allow, its wait just before its output is read).
#: Their inputs are never recycled (core/memory.py): the communication may read them until
#: the wait.
COLLECTIVE_OPS = frozenset(
    getattr(_functional, name).default
    for name in (
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather_into_tensor",
        "all_gather_into_tensor_coalesced",
        "reduce_scatter_tensor",
        "reduce_scatter_tensor_coalesced",
        "all_to_all_single",
        "broadcast",
    )
    if hasattr(_functional, name)
)
WAIT_OPS = frozenset({_functional.wait_tensor.default})
EXTERN_OPS |= COLLECTIVE_OPS | WAIT_OPS


class Unsupported(Exception):
    """Raised by a lowering for a case it does not handle: the op falls back."""


def register(*ops: Any) -> Callable:
    """Enter the decorated lowering in :data:`LOWERINGS` for each op: an overload, every
    overload of a packet, or a qualified name (``"prims::fma"``) whose op torch may define
    later (:func:`resolve_late`)."""

    def deco(fn: Callable) -> Callable:
        for op in ops:
            if isinstance(op, str):
                _LATE[op] = fn
            elif isinstance(op, OpOverloadPacket):
                for name in op.overloads():
                    LOWERINGS.setdefault(getattr(op, name), fn)
            else:
                LOWERINGS[op] = fn
        return fn

    return deco


def lowering_for(op: Any) -> Callable[..., Any] | None:
    """The lowering of ``op``: from :data:`LOWERINGS`, or a late one whose op this is (the op
    exists: the graph calls it), entered in the table on this first use."""
    fn = LOWERINGS.get(op)
    if fn is None and isinstance(op, OpOverload):
        late = _LATE.pop(
            f"{op.namespace}::{op.overloadpacket._qualified_op_name.split('::')[1]}", None
        )
        if late is not None:
            register(op.overloadpacket)(late)
            fn = LOWERINGS.get(op)
    return fn


def resolve_late() -> None:
    """Move each late lowering whose op torch now defines into :data:`LOWERINGS` (for a
    listing of every op: :func:`lowering_for` finds a graph's own ops without this)."""
    for qualname in list(_LATE):
        packet = defined_op(qualname)
        if packet is not None:
            register(packet)(_LATE.pop(qualname))

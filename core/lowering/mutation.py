"""Input mutations kept in the graph: ``aten.copy_(input, value)``.

AOTAutograd keeps a data mutation of an input that needs no grad (BatchNorm's running
statistics) in the graph, as a ``copy_`` into the input at the graph's end
(``keep_input_mutations``, core/adapters/torch_private.py). Lowered here, it is a computed
node stored in the input's own layout (``Node.into``): the memory plan gives the node the
input's memory, so the kernel that computes the new value writes it where it belongs, and
no copy runs after the call.

What keeps that right:

* the node runs after every other reader of the input (the scheduler's write-after-read
  edges), and shares a kernel with another reader only where every read of the input in
  that kernel is of the element being written (``Scheduler._legal``);
* its own value reads the input only at the element it writes, else the value is stored
  first (``x.copy_(x.flip(0))``), and no producer that reads the input is inlined into it
  (core/scheduler/inline.py);
* a copy into part of an input, into a host input (a CPU step count beside CUDA tensors),
  or into an input whose elements overlap is a library call to ATen's ``copy_``, as
  AOTAutograd would have run it (ordered the same way).

Symbolic sizes (``dynamic=True``) are written the same way: the input's layout is symbolic,
and so is the kernel's index.
"""

from __future__ import annotations

from typing import Any

import sympy

from ..adapters.torch_private import aten
from ..ir.expr import loads
from ..ir.graph import TensorValue, fresh_vars
from .helpers import bload
from .layouts import _dense
from .lowerer import Lowerer, cast
from .optable import register


@register(aten.copy_.default)
def _copy_into_input(L: Lowerer, dst: Any, src: Any, non_blocking: bool = False) -> Any:
    st = dst.storage if isinstance(dst, TensorValue) else None
    if (
        st is None
        or not L.is_input(st.buffer)  # (a host input's device copy: not the input)
        or st.layout != L.layouts.get(st.buffer)
        or not _dense(st.layout.sizes, st.layout.strides)
    ):
        # ATen's copy_, as AOTAutograd would have run it after the call: a library call
        kwargs = {"non_blocking": True} if non_blocking else {}
        return L.extern(aten.copy_.default, (dst, src), kwargs)
    lay = st.layout
    sizes, dtype, into = st.sizes, st.dtype, st.buffer

    def body(value: Any) -> Any:
        return lambda idx: cast(bload(value, sizes, idx, getattr(value, "dtype", dtype)), dtype)

    vs = fresh_vars("i", len(sizes))
    target = sympy.expand(lay.linear(vs))
    if any(
        ld.buffer == into and (ld.binds or sympy.expand(sympy.sympify(ld.index) - target) != 0)
        for ld in loads(body(src)(vs))
    ):
        # it reads the input at other elements than it writes: the value is stored first
        src = L.pointwise(src.sizes, src.dtype, src.load, cse=False)
    view = L.pointwise(sizes, dtype, body(src), layout=lay, cse=False)
    view.node.into = into
    return view

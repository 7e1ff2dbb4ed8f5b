"""The graph's size arithmetic as the lowering sees it: counts and scalars as IR values, the
floats Python computes from sizes, and a concrete variant's sizes from its operands."""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping
from typing import Any

import sympy
import torch
import torch.fx

from ..fallback import op_name
from ..ir.expr import Const, Expr, IndexValue, cast
from ..ir.index import is_static, static


def size_value(n: Any, dtype: torch.dtype) -> Expr:
    """A count (a reduction's element count, or a variance's divisor: a float for a
    fractional correction) as a value of ``dtype``: a constant, or the run's value of a
    symbolic size."""
    if is_static(n) or isinstance(n, float):
        return Const(n, dtype)
    return cast(IndexValue(n), dtype)


def scalar_value(x: Any, dtype: torch.dtype) -> Expr:
    """A scalar operand as a value of ``dtype``: a computed value (a float of sizes), a
    symbolic size (its run's value) or a number."""
    if isinstance(x, Expr):
        return cast(x, dtype)
    if isinstance(x, sympy.Expr):
        return size_value(x, dtype)
    return Const(x, dtype)


#: Python's arithmetic on a float computed from sizes (a SymFloat: BatchNorm's running
#: variance scales by ``n / (n - 1)``, ``n`` its count) -> the IR op that computes it, in
#: float64 as Python does; ``None``: a conversion.
SIZE_FLOAT_OPS: dict[Any, str | None] = {
    operator.add: "add",
    operator.sub: "sub",
    operator.mul: "mul",
    operator.truediv: "truediv",
    operator.neg: "neg",
    operator.pow: "pow",
    torch.sym_float: None,
}

#: Python's arithmetic on ints of sizes, as the traced graph writes it
_INT_OPS = frozenset(
    {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg}
)


def float_unsupported(n: torch.fx.Node) -> str | None:
    """Why a node computing a SymFloat or SymBool cannot be lowered, or None."""
    val = n.meta.get("val")
    if isinstance(val, torch.SymFloat) and n.target in SIZE_FLOAT_OPS:
        return None
    return f"a size ({val}) that is not known when compiling, from {op_name(n.target)}"


def concrete_size(n: torch.fx.Node, env: Mapping[torch.fx.Node, Any]) -> int | None:
    """A size-valued node's value from its operands' values in this lowering, where they
    are numbers: a tensor's size (``sym_size``, ``sym_numel``), an int input, Python's
    arithmetic of those. None for anything else, or a value still symbolic. A variant
    compiled for concrete sizes reads its sizes here, not from the trace's metadata,
    which torch 2.11 leaves symbolic for a backward's size inputs when it re-derives them
    (BEiT's backward, per shape on a GPU, failed: "no hint for size symbols")."""
    args = [env[a] if isinstance(a, torch.fx.Node) else a for a in n.args]
    if n.target in (torch.ops.aten.sym_size.int, torch.ops.aten.sym_numel.default):
        sizes = getattr(args[0], "sizes", None)
        if sizes is None:
            return None
        value = sizes[args[1]] if n.target is torch.ops.aten.sym_size.int else math.prod(sizes)
    elif n.target in _INT_OPS and all(type(a) is int or is_static(a) for a in args):
        try:
            value = n.target(*(int(static(a)) for a in args))
        except ZeroDivisionError:
            return None  # (the trace's own value, or its error)
    else:
        return None
    return int(static(value)) if is_static(value) else None

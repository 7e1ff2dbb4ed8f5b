"""The lowered graph: computed nodes, extern nodes, and the tensor values between them.

Lowering turns each ATen call into either nothing (a view: index arithmetic
on its input), one :class:`Node` (pointwise math or a reduction, with its own
output buffer in *logical* coordinates), or one :class:`ExternNode` (a library
call run through ATen). The scheduler later decides which nodes share a kernel
and which buffers are ever written to memory.

A plugin's ``sdk_lower_op`` builds nodes through a :class:`LoweringBuilder`; a library call
of :data:`LIBRARY_OPS` may run through the plugin's own library (``sdk_extern``).

Tensor values:

* :class:`StorageView` reads a buffer that lives in memory with a known
  layout (a graph input, an extern's output, or a view of one): loads carry a
  linear index.
* :class:`ComputedView` reads a computed node's output in its logical
  coordinates (``Load.index`` is a tuple), so the scheduler can inline the
  node's expression into the reader by substituting the index.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import sympy
import torch

from .expr import Expr, Load, Op, cast
from .index import static, var
from .kernel import Layout

Index = tuple[sympy.Expr, ...]


def contiguous_strides(sizes: tuple[Any, ...]) -> tuple[Any, ...]:
    """Row-major strides; symbolic where a size is (a size symbol is >= 2)."""
    strides: list[Any] = []
    acc: Any = 1
    for s in reversed(sizes):
        strides.append(acc)
        s = static(s)
        acc = acc * (max(s, 1) if isinstance(s, int) else s)
    return tuple(reversed(strides))


class TensorValue:
    """A tensor during lowering: sizes, dtype, and how to read an element.

    What a plugin's ``sdk_lower_op`` receives for each tensor argument (public as
    ``sdk.ir.TensorValue``): read :attr:`sizes` and :attr:`dtype`, and build expressions
    from :meth:`load`. ``sizes`` and ``dtype`` are properties (not plain annotations), so
    that ``dir()`` and ``help()`` show them.
    """

    _sizes: tuple[Any, ...]
    _dtype: torch.dtype

    @property
    def sizes(self) -> tuple[Any, ...]:
        """The logical sizes, one per dimension: ints, or sympy expressions over size
        symbols under symbolic sizes (``sdk.ir.is_static`` tells them apart). Pass them on
        as they are: ``int()`` of a symbolic size fails."""
        return self._sizes

    @sizes.setter
    def sizes(self, value: tuple[Any, ...]) -> None:
        self._sizes = tuple(value)

    @property
    def dtype(self) -> torch.dtype:
        """The element type; the expressions :meth:`load` gives have it."""
        return self._dtype

    @dtype.setter
    def dtype(self, value: torch.dtype) -> None:
        self._dtype = value

    def load(self, index: Index) -> Expr:
        """The element at ``index`` (a tuple of sympy expressions, one per dimension, over
        the loop variables the builder passes): a :class:`sdk.ir.Load` for a tensor in
        memory, the producer's expression for a value computed in this graph."""
        raise NotImplementedError

    @property
    def storage(self) -> StorageView | None:
        """The same tensor as a strided view of a buffer in memory, if it is one."""
        return None

    @property
    def ndim(self) -> int:
        return len(self.sizes)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.sizes)}, {self.dtype})"


class StorageView(TensorValue):
    def __init__(self, buffer: str, layout: Layout) -> None:
        self.buffer = buffer
        self.layout = layout
        self.sizes = tuple(static(s) for s in layout.sizes)
        self.dtype = layout.dtype

    def load(self, index: Index) -> Expr:
        return Load(self.buffer, self.layout.linear(index), self.dtype)

    @property
    def storage(self) -> StorageView:
        return self


class ComputedView(TensorValue):
    def __init__(
        self,
        node: Node,
        sizes: tuple[int, ...],
        reindex: Callable[[Index], Index] | None = None,
        storage: StorageView | None = None,
    ) -> None:
        self.node = node
        self.sizes = tuple(static(s) for s in sizes)
        self.dtype = node.dtype
        self.reindex = reindex
        self._storage = storage

    def load(self, index: Index) -> Expr:
        idx = tuple(index) if self.reindex is None else tuple(self.reindex(tuple(index)))
        return Load(self.node.name, idx, self.dtype)

    @property
    def storage(self) -> StorageView | None:
        return self._storage


class ScalarValue(TensorValue):
    """A 0-d tensor or broadcast scalar whose value is an expression (e.g. a constant)."""

    def __init__(self, expr: Expr, sizes: tuple[int, ...] = ()) -> None:
        self.expr = expr
        self.sizes = tuple(sizes)
        self.dtype = expr.dtype

    def load(self, index: Index) -> Expr:
        return self.expr


@dataclass(eq=False)
class Node:
    """A computed buffer: ``out[vars] = value`` or ``out[vars] = reduce(value over rvars)``."""

    name: str
    sizes: tuple[int, ...]
    dtype: torch.dtype  # of the buffer; ``value`` may compute in a wider type
    vars: tuple[sympy.Symbol, ...]
    value: Expr
    layout: Layout
    rvars: tuple[sympy.Symbol, ...] = ()
    rsizes: tuple[int, ...] = ()
    reduce_op: str | None = None
    origins: list[str] = field(default_factory=list)
    reads: set[str] = field(default_factory=set)  # buffers loaded by value
    #: the graph input this node writes in place (an input mutation AOTAutograd kept in the
    #: graph: BatchNorm's running statistics), else None. Its layout is the input's, and the
    #: memory plan gives it the input's memory (core/lowering/mutation.py)
    into: str | None = None

    @property
    def is_reduction(self) -> bool:
        return self.reduce_op is not None

    @property
    def numel(self) -> Any:
        n: Any = 1
        for s in self.sizes:
            n = n * s
        return n

    def store_value(self, result: Expr) -> Expr:
        """``result`` (value, or the reduction's result) cast to the buffer's dtype."""
        return result if result.dtype == self.dtype else Op("cast", (result,), self.dtype)

    def __repr__(self) -> str:
        kind = f"reduce {self.reduce_op} over {list(self.rsizes)}" if self.is_reduction else "pw"
        return f"Node({self.name}, {list(self.sizes)}, {self.dtype}, {kind})"


@dataclass(eq=False)
class ExternNode:
    """An op run through ATen on buffers in memory: a library call or a fallback."""

    name: str
    target: Any  # the OpOverload (or callable) to run
    args: tuple[Any, ...]  # StorageViews stand for tensors
    kwargs: dict[str, Any]
    outputs: list[tuple[str, Layout]]  # buffer name and layout of each tensor output
    origins: list[str] = field(default_factory=list)
    fallback_reason: str | None = None  # None: a library call on purpose
    multi_output: bool = False
    #: (the call's id, the plugin's own function for it: ``sdk_extern``), else None: ATen's
    vendor: tuple[str, Any] | None = None
    #: the graph input this call writes in place (an ``aten.copy_`` into it run by ATen)
    into: str | None = None

    @property
    def reads(self) -> set[str]:
        out: set[str] = set()

        def visit(x: Any) -> None:
            if isinstance(x, StorageView):
                out.add(x.buffer)
            elif isinstance(x, (list, tuple)):
                for y in x:
                    visit(y)

        visit(self.args)
        visit(list(self.kwargs.values()))
        return out


def fresh_vars(prefix: str, n: int) -> tuple[sympy.Symbol, ...]:
    return tuple(var(f"{prefix}{i}") for i in range(n))


_aten = torch.ops.aten

#: The library calls a plugin may run through its own library (``sdk_extern``): matrix
#: products, convolutions and attention, forward and backward. The core runs every other
#: library call through ATen.
LIBRARY_OPS = frozenset(
    {
        _aten.mm.default,
        _aten.bmm.default,
        _aten.addmm.default,
        _aten.baddbmm.default,
        _aten.convolution.default,
        _aten.convolution_backward.default,
        _aten._scaled_dot_product_flash_attention.default,
        _aten._scaled_dot_product_flash_attention_backward.default,
        _aten._scaled_dot_product_efficient_attention.default,
        _aten._scaled_dot_product_efficient_attention_backward.default,
        _aten._scaled_dot_product_cudnn_attention.default,
        _aten._scaled_dot_product_cudnn_attention_backward.default,
        _aten._scaled_dot_product_flash_attention_for_cpu.default,
        _aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
    }
)


class Lowering(Protocol):
    """What a :class:`LoweringBuilder` builds with: the core's lowering of one graph, which
    adds each node to the graph being lowered."""

    def meta(self) -> Any: ...

    def pointwise(
        self, sizes: tuple[Any, ...], dtype: torch.dtype, fn: Callable[[Index], Expr]
    ) -> TensorValue: ...

    def reduction(
        self,
        sizes: tuple[Any, ...],
        reduced: tuple[Any, ...],
        op: str,
        dtype: torch.dtype,
        fn: Callable[[Index, Index], Expr],
    ) -> TensorValue: ...

    def extern(self, target: Any, args: tuple, kwargs: dict[str, Any]) -> Any: ...


class LoweringBuilder:
    """What a plugin's ``sdk_lower_op`` builds IR with (public as ``sdk.ir.LoweringBuilder``).

    ``out`` is the fake tensor the op produces (shape, dtype, strides); each
    builder method adds a node to the graph being lowered and returns its
    :class:`TensorValue`. Read inputs with ``value.load(index)``; an index is a
    tuple of sympy expressions, one per dimension.
    """

    def __init__(self, lowering: Lowering) -> None:
        self._L = lowering

    @property
    def out(self) -> Any:
        return self._L.meta()

    def pointwise(
        self, sizes: tuple[int, ...], dtype: torch.dtype, fn: Callable[[Index], Expr]
    ) -> TensorValue:
        """``out[i] = fn(i)`` over ``sizes``."""
        return self._L.pointwise(tuple(sizes), dtype, fn)

    def reduction(
        self,
        sizes: tuple[int, ...],
        reduced: tuple[int, ...],
        op: str,
        dtype: torch.dtype,
        fn: Callable[[Index, Index], Expr],
    ) -> TensorValue:
        """``out[i] = op over r of fn(i, r)``; ``op`` is one of ``sdk.ir.REDUCTIONS``."""
        return self._L.reduction(tuple(sizes), tuple(reduced), op, dtype, fn)

    def extern(self, target: Any, args: tuple, kwargs: dict | None = None) -> Any:
        """Run ``target`` (an ATen op) through ATen on these arguments, as a library call."""
        return self._L.extern(target, tuple(args), dict(kwargs or {}))

    @staticmethod
    def cast(e: Expr, dtype: torch.dtype) -> Expr:
        return cast(e, dtype)

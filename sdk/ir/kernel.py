"""Scheduled kernels: what a plugin renders.

A :class:`Kernel` iterates its outer ranges (``vars`` over ``sizes``: the
parallel loops), and for each outer point runs its :class:`Stage` s in order.
A stage with inner ranges loops over them, folding :class:`Reduction` s and
doing :class:`Store` s per inner point; a stage without inner ranges runs its
stores once per outer point. A reduction's result is visible to later stages
as ``LocalRef(name)``. Every load and store index is linear, in elements,
counted from the argument's data pointer (``tensor.data_ptr()``, which already
points at its storage offset): strides and offsets are applied.

Every load's index is in bounds at every point of its loops, whatever
``where`` it sits under: a renderer may evaluate both arms of a select.

Pointwise kernel:  one stage, no inner ranges.
Softmax row:       stage 0 reduces max, stage 1 reduces sum(exp(x - max)),
                   stage 2 stores exp(x - max) / sum; all over the same row.

A :class:`FusionGroup` is what ``sdk_can_fuse`` sees of a kernel before it is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch

from .expr import OPS, PREDICATES, REDUCTIONS, Const, Expr, IndexValue, Load, LocalRef, Op, walk
from .index import is_static, static


@dataclass(frozen=True)
class Layout:
    """Where a tensor's elements are: sizes, strides and offset in elements, dtype, device."""

    sizes: tuple[Any, ...]
    strides: tuple[Any, ...]
    offset: Any
    dtype: torch.dtype
    device: str  # device type

    def linear(self, index: tuple[Any, ...]) -> sympy.Expr:
        if len(index) != len(self.sizes):
            raise ValueError(f"index of rank {len(index)} into a buffer of rank {len(self.sizes)}")
        return sympy.expand(
            sympy.sympify(self.offset)
            + sum(
                (
                    sympy.sympify(st) * i
                    for st, i, sz in zip(self.strides, index, self.sizes)
                    if sz != 1
                ),
                sympy.Integer(0),
            )
        )

    @property
    def numel(self) -> Any:
        """An int, or a sympy expression where a size is symbolic (see ``index.size_var``)."""
        return static(math.prod((static(s) for s in self.sizes), start=1))

    @property
    def storage_size(self) -> Any:
        """Elements the storage must hold from offset 0 (symbolic where a size is)."""
        if any(s == 0 for s in self.sizes):
            return 0
        return static(
            static(self.offset)
            + 1
            + sum((static(s) - 1) * static(st) for s, st in zip(self.sizes, self.strides))
        )

    @property
    def symbolic(self) -> bool:
        return not all(is_static(x) for x in (*self.sizes, *self.strides, self.offset))

    def is_contiguous(self) -> bool:
        expect: Any = 1
        for s, st in zip(reversed(self.sizes), reversed(self.strides)):
            if s != 1 and sympy.expand(st - expect) != 0:
                return False
            expect = expect * static(s)
        return True


@dataclass(frozen=True)
class BufferArg:
    """One kernel argument: a buffer, read ("in"), written ("out") or both ("inout")."""

    name: str
    layout: Layout
    role: str


@dataclass
class Store:
    buffer: str
    index: sympy.Expr
    value: Expr


@dataclass
class Reduction:
    """``name = reduce(op, value)`` over the stage's inner ranges."""

    name: str
    op: str
    value: Expr
    dtype: torch.dtype  # of the result (accumulate floats in at least float32)


@dataclass
class Stage:
    vars: tuple[sympy.Symbol, ...]
    sizes: tuple[Any, ...]
    reductions: list[Reduction] = field(default_factory=list)
    stores: list[Store] = field(default_factory=list)

    @property
    def numel(self) -> Any:
        return static(math.prod((static(s) for s in self.sizes), start=1))


@dataclass
class Kernel:
    """One fused loop nest. ``args`` is the call order of the compiled kernel."""

    name: str
    vars: tuple[sympy.Symbol, ...]
    sizes: tuple[Any, ...]
    stages: list[Stage]
    args: list[BufferArg]
    origins: tuple[str, ...] = ()  # "fx_node: aten.op" covered by this kernel
    #: The size symbols the kernel's ranges and indices use, in the order the compiled
    #: kernel takes their values: after the buffers, as integers (``sdk.ir.size_var``).
    size_args: tuple[sympy.Symbol, ...] = ()

    @property
    def is_reduction(self) -> bool:
        return any(s.reductions for s in self.stages)

    @property
    def outer_numel(self) -> Any:
        return static(math.prod((static(s) for s in self.sizes), start=1))

    def arg(self, name: str) -> BufferArg:
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError(name)

    def exprs(self) -> list[Expr]:
        roots: list[Expr] = []
        for st in self.stages:
            roots += [r.value for r in st.reductions] + [s.value for s in st.stores]
        return walk(roots)


class IRCheckError(AssertionError):
    pass


def check_kernel(k: Kernel) -> None:
    """The IR checker: raises IRCheckError on a malformed kernel (SDK_DEBUG=1 runs it)."""

    def fail(msg: str) -> None:
        raise IRCheckError(f"kernel {k.name}: {msg}")

    args = {a.name: a for a in k.args}
    if len(args) != len(k.args):
        fail("duplicate argument names")
    outer = set(k.vars) | set(k.size_args)
    locals_: dict[str, torch.dtype] = {}
    for si, st in enumerate(k.stages):
        scope = outer | set(st.vars)
        if st.reductions and not st.vars:
            fail(f"stage {si} reduces without inner ranges")
        roots = [r.value for r in st.reductions] + [s.value for s in st.stores]
        for node in walk(roots):
            if isinstance(node, Load):
                if node.buffer not in args:
                    fail(f"load of {node.buffer}, which is not an argument")
                if args[node.buffer].role == "out":
                    fail(f"load of output-only buffer {node.buffer}")
                if isinstance(node.index, tuple):
                    fail(f"load of {node.buffer} has an unlinearized index")
                bound = {b[0] for b in node.binds}
                free = node.index.free_symbols - scope - bound
                if free:
                    fail(f"load of {node.buffer} uses {free} outside its loops")
                if node.dtype != args[node.buffer].layout.dtype:
                    fail(f"load of {node.buffer} as {node.dtype}")
            elif isinstance(node, LocalRef):
                if locals_.get(node.name) != node.dtype:
                    fail(f"{node.name} is read before an earlier stage computes it")
            elif isinstance(node, IndexValue):
                if node.expr.free_symbols - scope:
                    fail(f"index value uses {node.expr.free_symbols - scope} outside its loops")
            elif isinstance(node, Op):
                if node.name not in OPS:
                    fail(f"unknown op {node.name}")
                if node.name in PREDICATES and node.dtype != torch.bool:
                    fail(f"{node.name} must produce bool")
            elif not isinstance(node, Const):
                fail(f"unknown expression node {type(node).__name__}")
        for r in st.reductions:
            if r.op not in REDUCTIONS:
                fail(f"unknown reduction {r.op}")
        for s in st.stores:
            if s.buffer not in args or args[s.buffer].role == "in":
                fail(f"store to {s.buffer}, which is not an output argument")
            if s.value.dtype != args[s.buffer].layout.dtype:
                fail(f"store of {s.value.dtype} into {s.buffer} of {args[s.buffer].layout.dtype}")
            if s.index.free_symbols - scope:
                fail(f"store to {s.buffer} uses {s.index.free_symbols - scope} outside its loops")
        for r in st.reductions:
            locals_[r.name] = r.dtype


@dataclass(frozen=True)
class FusionGroup:
    """What the plugin's ``sdk_can_fuse`` sees of a group of nodes that would become one
    kernel (public, read-only).

    ``first`` and ``second`` are the two groups as they are now, each as its own kernel;
    ``merged`` is the kernel fusing them would make. A group's buffers are named as in the
    kernel's ``Kernel.args`` (graph inputs ``arg<i>``, computed buffers ``buf<i>``, library
    call results ``ext<i>``, constants ``const<i>``).
    """

    #: the group's nodes' buffer names joined by "+" (as in ``explain``'s refusals)
    name: str
    #: the ATen nodes the group computes, as "node_name: aten.op.overload", graph order
    origins: tuple[str, ...]
    #: the outer (parallel) iteration space, size-1 dimensions dropped; symbolic sizes
    #: are sympy expressions
    sizes: tuple[int, ...]
    #: the inner (reduction) iteration space; () for a pointwise group
    reduction_sizes: tuple[int, ...]
    #: how many of its nodes are reductions
    num_reductions: int
    #: how many lowered nodes it holds (an ATen op may lower to several)
    num_nodes: int
    #: the distinct buffers the kernel reads from memory, sorted by name: graph inputs,
    #: constants and what other kernels or library calls produce. What one member
    #: computes for another is not read from memory and is not here
    inputs: tuple[str, ...] = ()
    #: the distinct buffers the kernel writes: what later kernels, library calls or the
    #: graph's outputs need (a buffer only its own group reads is not stored)
    outputs: tuple[str, ...] = ()
    #: whether the kernel loads at an index computed from values that change along its
    #: reduction (a max pool's backward, gathered from its windows, summed by BatchNorm's
    #: backward over the points it writes); an embedding's rows summed over their features
    #: are gathered the same way at every step of the reduction, and do not count
    gathers_along_reduction: bool = False

    @property
    def is_reduction(self) -> bool:
        return self.num_reductions > 0

    @property
    def buffers(self) -> int:
        """Distinct buffers the kernel takes (its pointer arguments): inputs and outputs,
        one that is both counted once."""
        return len(set(self.inputs) | set(self.outputs))

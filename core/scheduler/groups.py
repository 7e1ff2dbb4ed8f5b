"""Fusion groups and their iteration spaces: which nodes can share a group's loops.

A group runs over an outer space ``X`` and, if it reduces, an inner space ``R`` (size-1
dimensions dropped). :func:`_fits` says how a node fits such a group; both the fusion search
(:mod:`.fusion`) and the kernel builder (:mod:`.builder`) ask it, so it lives apart from both.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter
from dataclasses import dataclass

from ..ir.graph import Node
from ..ir.index import is_static


@dataclass(eq=False)
class Group:
    id: int
    members: list[Node]
    X: tuple[int, ...]
    R: tuple[int, ...]
    order: int  # position of the first member in the graph

    @property
    def names(self) -> set[str]:
        return {n.name for n in self.members}


@dataclass
class Decision:
    """One fusion the scheduler considered: for ``explain`` and the tests."""

    first: str
    second: str
    saved_bytes: int
    fused: bool
    reason: str = ""
    #: who refused it: "plugin" (its ``sdk_can_fuse`` veto or its ``sdk_kernel_limits``)
    #: or "core" (the core's own legality rules); "" for a fusion made
    by: str = ""


def _squeeze(sizes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(s for s in sizes if s != 1)


def _space(node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if node.is_reduction:
        return _squeeze(node.sizes), _squeeze(node.rsizes)
    return _squeeze(node.sizes), ()


def _fits(node: Node, X: tuple[int, ...], R: tuple[int, ...]) -> str | None:
    """'red', 'outer' or 'inner' when ``node`` fits a group over (X, R), else None."""
    if node.is_reduction:
        return "red" if _space(node) == (X, R) else None
    return _fit(node.sizes, X, R)


@functools.lru_cache(maxsize=1 << 16)
def _fit(sizes: tuple[int, ...], X: tuple[int, ...], R: tuple[int, ...]) -> str | None:
    """How a pointwise node of ``sizes`` fits a group over (X, R) (:func:`_fits`), by sizes
    alone; a fusion search asks it for the same few shapes thousands of times."""
    sq = _squeeze(sizes)
    if sq == X:
        return "outer"
    if R and sq == X + R:
        return "inner"
    # the same elements in another shape: a view merged or split dimensions
    if math.prod(sq) == math.prod(X):
        return "outer"
    if R and math.prod(sq) == math.prod(X) * math.prod(R) and _splits_at(sq, math.prod(X)):
        return "inner"
    if R and Counter(sq) == Counter(X + R):
        # the same dims in another order (a reduction over a leading dim reads its
        # producer transposed): the builder maps it through how the group reads it
        return "permuted"
    return None


def _splits_at(sizes: tuple[int, ...], n: int) -> bool:
    """Is ``n`` the product of a prefix of ``sizes`` (so the dims split there)?"""
    acc = 1
    for s in (1, *sizes):
        acc *= s
        if acc == n:
            return True
    return False


def _merged_space(a: Group, b: Group) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    spaces = [(a.X, a.R), (b.X, b.R)]
    if not a.R and not b.R:
        finer = _refinement(a.X, b.X)
        if finer is not None:
            spaces.insert(0, (finer, ()))
    for X, R in spaces:
        if all(_fits(n, X, R) for n in itertools.chain(a.members, b.members)):
            return X, R
    return None


@functools.lru_cache(maxsize=1 << 12)
def _refinement(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """Loops for two pointwise groups over the same elements in shapes of different rank:
    the finer shape's dims, ordered so that each of the coarser's dims is the product of a
    run of them. A matrix product's epilogue over ``[N*H*W, C]`` and a permuted
    ``[N, C, H, W]`` (timm's ConvNeXt block: Linear, then back to NCHW) get loops
    ``(N, H, W, C)``: the product's output maps onto them as a plain reshape, the permuted
    nodes as a permutation, and no index is unravelled (an unravelled index walks memory
    out of order: 1.5-3x slower kernels on an H200). None where the ranks are equal, a size
    is symbolic, the coarser shape is a plain reshape of the finer (no permute between
    them), or no order has such runs."""
    fine, coarse = (a, b) if len(a) > len(b) else (b, a)
    if len(fine) == len(coarse) or len(fine) > 6:
        return None
    if not all(map(is_static, fine + coarse)):
        return None
    if _runs_of(fine, coarse):
        return None  # a plain reshape: either group's loops map the other's without a permute
    for order in itertools.permutations(range(len(fine))):
        dims = tuple(fine[i] for i in order)
        if _runs_of(dims, coarse):
            return dims
    return None


def _runs_of(dims: tuple[int, ...], coarse: tuple[int, ...]) -> bool:
    """Is each of ``coarse`` the product of consecutive ``dims``, in order?"""
    k, acc = 0, 1
    for d in dims:
        acc *= int(d)
        if k == len(coarse) or acc > int(coarse[k]):
            return False
        if acc == int(coarse[k]):
            k, acc = k + 1, 1
    return k == len(coarse) and acc == 1

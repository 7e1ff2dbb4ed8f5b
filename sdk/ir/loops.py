"""Merging loop ranges: a contiguous loop nest indexed by one variable, without division.

A kernel's ranges are the tensor's dimensions: a pointwise kernel over a contiguous
``(4, 5, 6, 7)`` tensor has four, and a renderer that counts through them with one flat
index recovers each with a division and a remainder, for every element. Where every index
of the kernel is linear in two adjacent ranges with ``stride(outer) == size(inner) *
stride(inner)``, one range of their product indexes the same elements (Inductor's loop
simplification does the same). :func:`merge_loops` merges them in a whole kernel;
:func:`merge_dims` is the rule, over any list of ranges and expressions.
"""

from __future__ import annotations

import dataclasses

import sympy

from .expr import IndexValue, Load, subs_index, walk
from .index import static
from .kernel import Kernel, Stage, Store


def _linear_coeffs(e: sympy.Expr, pair: tuple[sympy.Symbol, ...]) -> dict | None:
    """Coefficients of ``pair`` in ``e``, an expanded expression (integers, or expressions
    over size symbols); None when ``e`` is not linear in them."""
    out: dict = {v: sympy.Integer(0) for v in pair}
    if not (e.free_symbols & set(pair)):
        return out
    for term in sympy.Add.make_args(e):
        if not (term.free_symbols & set(pair)):
            continue
        c, rest = term.as_independent(*pair, as_Add=False)
        if rest in out and all(s.is_positive for s in c.free_symbols):  # size symbols only
            out[rest] += c
        else:
            return None
    return out


def merge_dims(
    dims: list[tuple[sympy.Symbol, int]], exprs: list[sympy.Expr]
) -> tuple[list[tuple[sympy.Symbol, int]], dict[sympy.Symbol, sympy.Expr]]:
    """Drop size-1 dimensions and merge adjacent ones wherever every expression
    in ``exprs`` is linear in both with ``stride(outer) == size(inner) * stride(inner)``.

    Returns the remaining dimensions (a merged one keeps the inner variable's name
    and spans both) and the substitution to apply to every expression (merged-away
    variables become 0)."""
    subs: dict[sympy.Symbol, sympy.Expr] = {v: sympy.Integer(0) for v, s in dims if s == 1}
    dims = [(v, static(s)) for v, s in dims if s != 1]
    if len(dims) < 2:
        return dims, subs
    exprs = list({sympy.expand(e.xreplace(subs)) for e in exprs})
    i = len(dims) - 2
    while i >= 0:
        (a, _), (b, sb) = dims[i], dims[i + 1]
        ok = True
        for e in exprs:
            c = _linear_coeffs(e, (a, b))
            if c is None or sympy.expand(c[a] - sb * c[b]) != 0:
                ok = False
                break
        if ok:
            subs[a] = sympy.Integer(0)
            exprs = list({e.xreplace({a: 0}) for e in exprs})
            dims[i + 1] = (b, dims[i][1] * sb)
            del dims[i]
        i -= 1
    return dims, subs


def index_exprs(stages: list[Stage]) -> list[sympy.Expr]:
    """Every index expression of ``stages``: loads (indirect ones' too), stores and index
    values."""
    out: list[sympy.Expr] = []
    roots = []
    for st in stages:
        out += [sympy.sympify(s.index) for s in st.stores]
        roots += [r.value for r in st.reductions] + [s.value for s in st.stores]
    for n in walk(roots):
        if isinstance(n, Load):
            out.append(n.index)  # (one sympy expression in a scheduled kernel)
        elif isinstance(n, IndexValue):
            out.append(n.expr)
    return out


def _two_or_more(sizes: tuple) -> bool:
    """Whether ``sizes`` has two ranges longer than 1 (else there is nothing to merge)."""
    return sum(static(s) != 1 for s in sizes) >= 2


def merge_loops(kernel: Kernel) -> Kernel:
    """``kernel`` with its ranges merged by :func:`merge_dims`: the outer ranges over every
    index of the kernel, each stage's inner ranges over the indices of every stage of the
    same inner shape, taken together (a renderer may give those stages one set of
    variables), position by position. A merged range keeps the inner variable; its value
    is the row-major position over both, so a reduction's argument position is unchanged.
    Ranges of size 1 go where a merge is made; where none can be, the ranges stay as they
    are."""
    subs: dict[sympy.Symbol, sympy.Expr] = {}
    outer = list(zip(kernel.vars, kernel.sizes))
    if _two_or_more(kernel.sizes):
        merged, outer_subs = merge_dims(outer, index_exprs(kernel.stages))
        if merged:
            outer = merged
            subs.update(outer_subs)
    shapes: dict[tuple, list[Stage]] = {}
    for st in kernel.stages:
        if _two_or_more(st.sizes):
            shapes.setdefault(tuple(st.sizes), []).append(st)
    inner: dict[int, tuple[tuple, tuple]] = {}  # id(stage) -> its merged vars and sizes
    for sizes, stages in shapes.items():
        canon = tuple(
            sympy.Dummy(f"p{j}", integer=True, nonnegative=True) for j in range(len(sizes))
        )
        exprs = [e.xreplace(dict(zip(st.vars, canon))) for st in stages for e in index_exprs([st])]
        dims, canon_subs = merge_dims(list(zip(canon, sizes)), exprs)
        if not dims:
            continue
        kept = [canon.index(v) for v, _ in dims]
        for st in stages:
            subs.update({st.vars[canon.index(v)]: e for v, e in canon_subs.items()})
            inner[id(st)] = (tuple(st.vars[j] for j in kept), tuple(s for _, s in dims))
    if not subs:
        return kernel
    stages = []
    for st in kernel.stages:
        vars_, sizes = inner.get(id(st), (st.vars, st.sizes))
        stages.append(
            Stage(
                vars_,
                sizes,
                [dataclasses.replace(r, value=subs_index(r.value, subs)) for r in st.reductions],
                [
                    Store(
                        s.buffer, sympy.sympify(s.index).xreplace(subs), subs_index(s.value, subs)
                    )
                    for s in st.stores
                ],
            )
        )
    return dataclasses.replace(
        kernel,
        vars=tuple(v for v, _ in outer),
        sizes=tuple(s for _, s in outer),
        stages=stages,
    )

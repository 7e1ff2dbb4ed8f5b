"""Tile planning for the Triton renderer: what a kernel's source will look like, decided
before a line of it is written.

:class:`KernelPlan` renames the kernel's loop variables canonically (outer ``x0, x1, ...``;
inner ``r<g>_<j>``, ``g`` numbering the distinct inner shapes), lists its stages
(:class:`StagePlan`), picks the block plan (:func:`.heuristics.plan`: pointwise, persistent,
looped or split), tiles a transposing pointwise kernel in 2D, finds softmax's two passes
that a looped kernel runs as one, and chooses int32 or int64 indices. It is pure analysis of
the kernel; :mod:`.expressions` writes lines on top of it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import sympy
import torch

import sdk
from sdk import ir

from . import heuristics
from .ops import HELPERS

# ---------------------------------------------------------------------------
# Index helpers
# ---------------------------------------------------------------------------


def _sym(name: str) -> sympy.Symbol:
    return ir.var(name)


#: Indices (and their bounds, with a margin for the blocks' overhang) from this value on
#: are computed in 64 bits.
INT32_LIMIT = 2**31 - 1

#: No bound: an index the analysis cannot bound (its kernel indexes in 64 bits).
_UNBOUNDED = sympy.oo


def _upper(
    e: sympy.Expr, bounds: dict, sizes: set[sympy.Symbol], worst: list[sympy.Expr]
) -> sympy.Expr:
    """An upper bound of ``|e|``, every subexpression's bound appended to ``worst``;
    ``_UNBOUNDED`` where there is none. ``bounds``: each loop variable's largest value;
    ``sizes``: the size symbols, each its own bound. Without size symbols the bound is a
    number; with them, a polynomial in them with non-negative coefficients (so it grows
    with each of them)."""
    e = sympy.sympify(e)
    if e.is_Integer:
        v: sympy.Expr = abs(e)
    elif e.is_Symbol:
        if e in bounds:  # a loop variable: its range's bound, bounded as everything else is
            v = _upper(bounds[e], bounds, sizes, [])
        else:  # a size symbol: itself
            v = e if e in sizes else _UNBOUNDED
    elif isinstance(e, ir.FloorDiv):
        num = _upper(e.args[0], bounds, sizes, worst)
        v = num / e.args[1] if e.args[1].is_Integer else num
    elif isinstance(e, ir.Mod):  # (its argument may be negative: the modulus bounds it)
        _upper(e.args[0], bounds, sizes, worst)
        d = e.args[1]
        v = d - 1 if d.is_Integer else _upper(d, bounds, sizes, [])
    elif e.is_Add:
        v = sympy.Add(*(_upper(a, bounds, sizes, worst) for a in e.args))
    elif e.is_Mul:
        v = sympy.Mul(*(_upper(a, bounds, sizes, worst) for a in e.args))
    elif e.is_Pow and e.exp.is_Integer and e.exp >= 0:  # (s0**2: a square's elements)
        v = _upper(e.base, bounds, sizes, worst) ** e.exp
    else:
        v = _UNBOUNDED
    worst.append(v)
    return v


def _subst(node: ir.Expr, mapping: dict, memo: dict) -> ir.Expr:
    """``node`` with loop variables renamed in every index."""
    hit = memo.get(node)
    if hit is not None:
        return hit
    if isinstance(node, ir.Load):
        binds = tuple((s, _subst(e, mapping, memo), n) for s, e, n in node.binds)
        out: ir.Expr = ir.Load(node.buffer, node.index.xreplace(mapping), node.dtype, binds)
    elif isinstance(node, ir.IndexValue):
        out = ir.IndexValue(node.expr.xreplace(mapping), node.dtype)
    elif isinstance(node, ir.Op):
        out = ir.Op(node.name, tuple(_subst(a, mapping, memo) for a in node.args), node.dtype)
    else:
        out = node
    memo[node] = out
    return out


def _ident(name: str, taken: set[str]) -> str:
    base = re.sub(r"\W", "_", name)
    if not base or base[0].isdigit():
        base = "k_" + base
    out, i = base, 1
    while out in taken:
        out, i = f"{base}_{i}", i + 1
    taken.add(out)
    return out


# ---------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------


def unit_step(index: sympy.Expr, syms: set[sympy.Symbol]) -> sympy.Symbol | None:
    """A variable of ``syms`` that is a term of ``index`` with coefficient 1 (``index``
    moves by one element as it does), or None; the terms are ``index``'s own, not expanded."""
    for term in sympy.Add.make_args(index):
        c, rest = term.as_coeff_Mul()
        if c == 1 and rest in syms:
            return rest
    return None


@dataclass
class StagePlan:
    """One stage of the kernel under the canonical names: its inner ranges, reductions and
    stores."""

    vars: tuple[str, ...]  # canonical inner var names (size-1 ranges dropped)
    sizes: tuple[int, ...]
    numel: int
    group: int  # index of the distinct inner shape; -1 without inner ranges
    reductions: list[tuple[str, str, ir.Expr, torch.dtype]]  # (local var, op, value, dtype)
    stores: list[tuple[str, sympy.Expr, ir.Expr]]


class KernelPlan:
    """The analysis of one kernel that every line of its source depends on (see the module
    doc); one instance per kernel, read by the writer built on it."""

    def __init__(self, kernel: ir.Kernel) -> None:
        # a contiguous loop nest: one index, no division and remainder per element
        kernel = ir.merge_loops(kernel)
        self.k = kernel
        taken = {"tl", "triton", "libdevice", "math"} | set(HELPERS)
        # symbolic sizes: each size argument is a kernel parameter under its own name
        self.sizes = [s.name for s in kernel.size_args]
        for n in self.sizes:
            if _ident(n, taken) != n:
                raise sdk.LoweringError(f"cuda_triton: size argument {n} clashes with a name")
        self.symbolic = bool(self.sizes)
        self.name = _ident(kernel.name, taken)
        self.ptr = {a.name: _ident(a.name + "_ptr", taken) for a in kernel.args}
        self.layout = {a.name: a.layout for a in kernel.args}
        mapping = self._name_outer_vars(kernel)
        self._plan_stages(kernel, mapping, taken)
        self.online = self._online_pairs()
        self.ranges = {sym: (0, hi) for sym, hi in self.bounds.items()}  # for index_bounds
        self.rsyms = {_sym(n) for s in self.stages for n in s.vars}
        self._choose_plan()
        # axis 0 of a 2D block: index, mask, block size (rows of a 2D pointwise tile: y)
        self.ax0 = ("xindex", "xmask", "XBLOCK")
        self.tile: tuple[list[tuple[str, int]], list[tuple[str, int]], dict] | None = None
        if self.plan.mode == "pointwise" and not self.symbolic:
            self._plan_tile()
        self.int64, self.requires = self._index_width()
        self.itype = "tl.int64" if self.int64 else "tl.int32"
        self.two_d = self.plan.mode != "pointwise"
        self.shape1 = "[1, 1]" if self.two_d else "[1]"

    def _name_outer_vars(self, kernel: ir.Kernel) -> dict[sympy.Symbol, sympy.Expr]:
        """Canonical names of the outer ranges, x0.. (a size-1 range is 0): the substitution
        from the kernel's variables; sets ``bounds``, ``xvars``, ``xsyms`` and ``xnumel``."""
        mapping: dict[sympy.Symbol, sympy.Expr] = {}
        self.bounds: dict[sympy.Symbol, int] = {}
        self.xvars: list[tuple[str, int]] = []
        for i, (v, s) in enumerate(zip(kernel.vars, kernel.sizes)):
            s = ir.static(s)
            if ir.is_static(s) and s == 1:
                mapping[v] = sympy.Integer(0)
            else:
                mapping[v] = _sym(f"x{i}")
                self.xvars.append((f"x{i}", s))
                self.bounds[mapping[v]] = ir.static(s - 1)
        self.xsyms = {_sym(n) for n, _ in self.xvars}
        self.xnumel = kernel.outer_numel
        return mapping

    def _plan_stages(
        self, kernel: ir.Kernel, mapping: dict[sympy.Symbol, sympy.Expr], taken: set[str]
    ) -> None:
        """Each stage's :class:`StagePlan`, its inner ranges named r<group>_<j> (one group per
        distinct inner shape); sets ``stages``, ``groups`` and ``local`` (a reduction's
        result -> its local variable)."""
        groups: dict[tuple[int, ...], int] = {}
        self.local: dict[str, str] = {}
        nred = 0
        self.stages: list[StagePlan] = []
        for st in kernel.stages:
            sizes = tuple(ir.static(s) for s in st.sizes)
            smap = dict(mapping)
            names, kept = [], []
            g = -1
            if st.vars:
                g = groups.setdefault(sizes, len(groups))
                for j, (v, s) in enumerate(zip(st.vars, sizes)):
                    if s == 1:
                        smap[v] = sympy.Integer(0)
                    else:
                        smap[v] = _sym(f"r{g}_{j}")
                        names.append(f"r{g}_{j}")
                        kept.append(s)
                        self.bounds[smap[v]] = s - 1
            memo: dict = {}
            reds = []
            for r in st.reductions:
                local = _ident(f"red{nred}", taken)
                nred += 1
                reds.append((local, r.op, _subst(r.value, smap, memo), r.dtype))
            stores = [
                (s.buffer, sympy.sympify(s.index).xreplace(smap), _subst(s.value, smap, memo))
                for s in st.stores
            ]
            # LocalRefs are renamed after this stage's values were read
            for r, (local, *_rest) in zip(st.reductions, reds):
                self.local[r.name] = local
            self.stages.append(
                StagePlan(
                    tuple(names),
                    tuple(kept),
                    ir.static(math.prod(sizes)) if st.vars else 1,
                    g,
                    reds,
                    stores,
                )
            )
        self.groups = {g: sz for sz, g in groups.items()}

    def _choose_plan(self) -> None:
        """The launch plan (:mod:`.heuristics`): ``plan``, and ``alt_plan`` for symbolic sizes."""
        inner = [s.numel for s in self.stages if s.group >= 0]
        #: symbolic sizes: a persistent form of a looped kernel, taken at run time where
        #: every row fits its block (``meta["alt"]``)
        self.alt_plan: heuristics.Plan | None = None
        if self.symbolic:
            # shapes and block sizes from the compiling call's sizes (hints); a reduction
            # over a symbolic range loops over it, and none splits (the split's chunk and
            # scratch are literals)
            hints = [ir.size_hint(n) for n in inner]
            outer = bool(inner) and self._outer_reduction()
            self.plan = heuristics.plan(
                ir.size_hint(self.xnumel),
                hints,
                False,
                outer=outer,
                looped=not all(ir.is_static(n) for n in inner),
            )
            if self.plan.mode == "looped" and not outer and not all(ir.is_static(n) for n in inner):
                rows = heuristics.plan(ir.size_hint(self.xnumel), hints, False)
                if rows.mode == "persistent":
                    self.alt_plan = rows
        else:
            self.plan = heuristics.plan(
                self.xnumel,
                inner,
                self._splittable(),
                outer=bool(inner) and self._outer_reduction(),
            )

    # -- analysis --------------------------------------------------------

    def _splittable(self) -> bool:
        """Can the kernel run as a split reduction (:mod:`.split`)? Its first stage has inner
        ranges, some stage reduces, and every stage with inner ranges covers as many
        elements (each is cut into the same chunks); not softmax's two passes."""
        st = self.stages
        if not heuristics.SPLIT_BY_GRID:  # one reduction stage, then none with inner ranges
            return (
                bool(st)
                and st[0].group >= 0
                and bool(st[0].reductions)
                and not st[0].stores
                and all(s.group < 0 for s in st[1:])
            )
        return (
            bool(st)
            and st[0].group >= 0
            and any(s.reductions for s in st)
            and len({s.numel for s in st if s.group >= 0}) == 1
            # softmax's passes stay one loop (online softmax, one kernel): as a chain they
            # would be five launches, for rows short enough to read again from the cache
            and not self._online_pairs()
        )

    def split_phases(self) -> list[tuple[int, list[int]]]:
        """A split kernel's stages by phase: each stage with inner ranges (run in chunks by a
        first kernel), with the stages without inner ranges after it (run per row by the
        second kernel, which combines the partials of the first's reductions)."""
        phases: list[tuple[int, list[int]]] = []
        for i, st in enumerate(self.stages):
            if st.group >= 0:
                phases.append((i, []))
            else:
                phases[-1][1].append(i)
        return phases

    def local_refs(self, stages: list[int]) -> list[str]:
        """The local variables of the reductions that ``stages`` read, in order."""
        roots = [
            e
            for i in stages
            for e in [v for _, _, v, _ in self.stages[i].reductions]
            + [v for _, _, v in self.stages[i].stores]
        ]
        out: list[str] = []
        for node in ir.walk(roots):
            if isinstance(node, ir.LocalRef) and self.local[node.name] not in out:
                out.append(self.local[node.name])
        return out

    def _online_pairs(self) -> dict[int, int]:
        """Softmax's two passes that a looped kernel runs as one (online softmax).

        Stage ``a`` reduces only ``m = max(v)``; the next stage with inner ranges, ``b``,
        over the same ranges, reduces only ``sum(exp(v - m))`` (the stages between have
        none: they store ``m``). Both in float32 or float64, so rescaling the running sum
        by ``exp(m_old - m_new)`` changes rounding only. Returns ``{a: b}``.
        """
        ir_name = {local: name for name, local in self.local.items()}
        pairs: dict[int, int] = {}
        stages = self.stages
        for a, st in enumerate(stages):
            if st.group < 0 or st.stores or len(st.reductions) != 1:
                continue
            m, op, v, dt = st.reductions[0]
            if op != "max" or dt not in (torch.float32, torch.float64) or v.dtype != dt:
                continue
            b = next((j for j in range(a + 1, len(stages)) if stages[j].group >= 0), None)
            if (
                b is None
                or stages[b].group != st.group
                or stages[b].stores
                or len(stages[b].reductions) != 1
            ):
                continue
            _s, op2, e, dt2 = stages[b].reductions[0]
            want = ir.Op("exp", (ir.Op("sub", (v, ir.LocalRef(ir_name[m], dt)), dt),), dt)
            if op2 == "sum" and dt2 == dt and e == want:
                pairs[a] = b
        return pairs

    def _outer_reduction(self) -> bool:
        """Does the kernel's largest reduced load run contiguously along an outer variable
        (a column sum: the bias gradient of a linear layer), not along its reduction?"""
        best: tuple[int, ir.Load] | None = None
        for st in self.stages:
            if st.group < 0:
                continue
            for node in ir.walk([v for _, _, v, _ in st.reductions]):
                if isinstance(node, ir.Load) and not node.binds:
                    size = ir.numel_hint(self.layout[node.buffer].sizes)
                    if best is None or size > best[0]:
                        best = (size, node)
        if best is None:
            return False
        index = sympy.expand(sympy.sympify(best[1].index))
        if self._unit_var(index) is None or unit_step(index, self.rsyms) is not None:
            return False
        return bool(index.free_symbols & self.rsyms)

    def _unit_var(self, index: sympy.Expr) -> sympy.Symbol | None:
        """The outer variable along which ``index`` is contiguous (coefficient 1), if plain."""
        if index.has(ir.FloorDiv, ir.Mod):
            return None
        return unit_step(sympy.expand(index), self.xsyms)

    def _plan_tile(self) -> None:
        """Tile a pointwise kernel in 2D when a load or a store is contiguous along a
        non-last variable: a transpose. Loads come first; a store is asked where the loads
        are contiguous along the last variable (Swin's attention writes ``k`` transposed
        for its batched matmul while reading ``q``, ``k`` and ``v`` along the last)."""
        if len(self.xvars) < 2:
            return
        names = [_sym(n) for n, _ in self.xvars]
        roots = [v for s in self.stages for _, _, v in s.stores]
        loads = [n.index for n in ir.walk(roots) if isinstance(n, ir.Load) and not n.binds]
        stores = [sympy.sympify(i) for s in self.stages for _, i, _ in s.stores]
        for index in [*loads, *stores]:
            unit = self._unit_var(index)
            if unit is None or unit == names[-1]:
                continue
            p = names.index(unit) + 1
            rows, cols = self.xvars[:p], self.xvars[p:]
            cfg = heuristics.tile_2d(
                math.prod(s for _, s in rows),
                math.prod(s for _, s in cols),
                broadcast=self._row_broadcast(roots, set(names[p:])),
            )
            if cfg is None:
                return
            self.tile = (rows, cols, cfg)
            self.plan = heuristics.Plan("pointwise2d", self.xnumel, 0, cfg)
            self.xsyms = {_sym(n) for n, _ in rows}  # axis 0
            self.rsyms = {_sym(n) for n, _ in cols}  # axis 1
            self.ax0 = ("yindex", "ymask", "YBLOCK")
            return

    def _row_broadcast(self, roots: list[ir.Expr], cols: set[sympy.Symbol]) -> bool:
        """Is every access that spans the columns ``cols`` a plain one contiguous along a
        column (the loads along the rows being per-row vectors)? Gathers (indices through
        indirect ones), and indices with divisions or none of unit stride, count as not: a
        transpose, maybe."""
        indices = [sympy.sympify(idx) for s in self.stages for _, idx, _ in s.stores]
        for node in ir.walk(roots):
            if isinstance(node, ir.Load):
                index = sympy.sympify(node.index)
                if node.binds and not index.free_symbols <= self.xsyms - cols:
                    return False
                indices.append(index)
        for index in indices:
            if index.free_symbols & cols and self._unit_var(index) not in cols:
                return False
        return True

    def _index_width(self) -> tuple[bool, tuple[tuple[str, int], ...]]:
        """Whether indices need 64 bits, and the kernel's size requirements.

        Every index is bounded (:func:`_upper`): the grid's and the loops' overhang, the
        storage sizes, each load's, store's and index value's. With static sizes the bounds
        are numbers: 32 bits where all fit. With symbolic sizes they are polynomials in the
        size symbols: 32 bits where they fit at the compiling call's sizes, each dominant
        bound then a requirement the program checks per call (``KernelSource.requires``: a
        call it does not fit runs a variant compiled for its sizes)."""
        sizes = set(self.k.size_args)
        bounds: dict = dict(self.bounds)
        worst: list[sympy.Expr] = []
        # (sizes may round up: s - s % 8 + 8 is bounded by s + 8)
        worst += [_upper(self.xnumel, bounds, sizes, worst) + 4096]
        worst += [_upper(s.numel, bounds, sizes, worst) + 8192 for s in self.stages]
        for a in self.k.args:
            _upper(a.layout.storage_size, bounds, sizes, worst)
        for s in self.stages:
            exprs = [r[2] for r in s.reductions] + [v for _, _, v in s.stores]
            for node in ir.walk(exprs):
                if isinstance(node, ir.Load):
                    for sym, _e, n in node.binds:
                        n = sympy.sympify(n)
                        bounds[sym] = n - 1 if n.free_symbols <= sizes else _UNBOUNDED
                    _upper(node.index, bounds, sizes, worst)
                elif isinstance(node, ir.IndexValue):
                    _upper(node.expr, bounds, sizes, worst)
            for _, idx, _ in s.stores:
                _upper(idx, bounds, sizes, worst)
        limit = INT32_LIMIT - 1  # (an index of INT32_LIMIT or more needs 64 bits)
        if any(e.has(sympy.oo, sympy.zoo, sympy.nan) for e in worst):
            return True, ()
        if not sizes:
            return any(e > limit for e in worst), ()
        exprs = ir.dominant_bounds(e for e in worst if not e.is_Number or e > limit)
        if any(ir.size_hint(e) > limit for e in exprs):  # (at the compiling call's sizes)
            return True, ()
        return False, tuple((str(e), limit) for e in exprs)

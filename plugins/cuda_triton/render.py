"""Render a loop-IR :class:`sdk.ir.Kernel` to Triton source.

The renderer is mostly data, kept in :mod:`.ops`: ``TYPE_MAP`` (torch dtype
-> Triton type), ``CODE_FOR_OP`` (IR op -> function of the operand strings
returning a Triton expression, with ``CODE_FOR_OP_F64`` and
``CODE_FOR_OP_INT`` overriding entries for float64 and integer operands),
``REDUCE`` (IR reduction -> identity, elementwise combine and final
cross-lane reduce), and ``HELPERS`` (small ``@triton.jit`` functions a
kernel's source includes when it uses them). This module walks the kernel.

How a kernel becomes Triton (shapes are in :mod:`.heuristics`):

* The outer ranges are flattened to ``xindex`` and decomposed back into
  ``x0, x1, ...`` with ``//`` and ``%``; inner ranges of a stage likewise into
  ``r<g>_0, ...`` from ``rindex`` (``g`` numbers the distinct inner shapes, so
  a persistent kernel shares one ``rindex`` and its loads across stages).
  Reduction kernels use ``[XBLOCK, R]`` blocks (rows on axis 0). A transposing
  pointwise kernel splits its outer ranges into rows (``yindex``, up to the
  variable a load is contiguous along) and columns (``xindex``) of a
  ``[YBLOCK, XBLOCK]`` tile, with the same two-axis machinery.
* Every expression node becomes one ``tmpN = ...`` line, memoised on the node
  (nodes are hashable), which is the common-subexpression elimination.
* Each node knows the axes it depends on (``x``, ``r`` or none): a load is
  masked by exactly those axes' masks, and in a looped stage nodes without
  ``r`` are computed once before the loop.
* Loads and stores keep their dtype (bf16/fp16 in memory); the IR already
  casts to float32 for compute, and an op the IR leaves in half precision is
  computed in float32 and cast back.
* Index arithmetic is int32 when every index the kernel forms is below 2**31,
  int64 otherwise.

The source needs ``triton``, ``triton.language as tl`` and
``triton.language.extra.libdevice`` (``from triton.language.extra import
libdevice``; Triton >= 3.0).
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
from .ops import (
    CODE_FOR_OP,
    CODE_FOR_OP_F64,
    CODE_FOR_OP_INT,
    HALF_TYPES,
    HELPER_DEPS,
    HELPERS,
    LOGICAL_OPS,
    PRELUDE,
    REDUCE,
    cast_to,
    highest,
    lowest,
    tl_type,
)

# ---------------------------------------------------------------------------
# Index helpers
# ---------------------------------------------------------------------------


def _sym(name: str) -> sympy.Symbol:
    return ir.var(name)


def _py(x: object) -> str:
    """A size as Triton (Python) source: a number, or an expression over size arguments."""
    return ir.print_size(x, "python")


def _json_size(x: object) -> int | str:
    """A size in plain JSON meta: an int, or its Python expression over the size arguments."""
    return int(x) if ir.is_static(x) else ir.print_size(x, "python")  # type: ignore[arg-type]


def _upper(e: sympy.Expr, bounds: dict[sympy.Symbol, int], worst: list[int]) -> int:
    """An upper bound of ``|e|`` and of every subexpression (recorded in ``worst``)."""
    if e.is_Integer:
        v = abs(int(e))
    elif e.is_Symbol:
        v = bounds.get(e, 2**63)
    elif isinstance(e, ir.FloorDiv):
        v = (
            _upper(e.args[0], bounds, worst) // max(1, int(e.args[1]))
            if e.args[1].is_Integer
            else _upper(e.args[0], bounds, worst)
        )
    elif isinstance(e, ir.Mod):
        a = _upper(e.args[0], bounds, worst)
        v = min(a, int(e.args[1]) - 1) if e.args[1].is_Integer else a
    elif e.is_Add:
        v = sum(_upper(a, bounds, worst) for a in e.args)
    elif e.is_Mul:
        v = math.prod(_upper(a, bounds, worst) for a in e.args)
    else:
        v = 2**63
    worst[0] = max(worst[0], v)
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


def _literal(value: object, dt: torch.dtype) -> str:
    if dt.is_floating_point:
        v = float(value)  # type: ignore[arg-type]
        if math.isnan(v):
            return 'float("nan")'
        if math.isinf(v):
            return 'float("inf")' if v > 0 else 'float("-inf")'
        return repr(v)
    if dt == torch.bool:
        return "1" if value else "0"
    return str(int(value))  # type: ignore[call-overload]


# ---------------------------------------------------------------------------
# The writer
# ---------------------------------------------------------------------------


@dataclass
class _Stage:
    vars: tuple[str, ...]  # canonical inner var names (size-1 ranges dropped)
    sizes: tuple[int, ...]
    numel: int
    group: int  # index of the distinct inner shape; -1 without inner ranges
    reductions: list[tuple[str, str, ir.Expr, torch.dtype]]  # (local var, op, value, dtype)
    stores: list[tuple[str, sympy.Expr, ir.Expr]]


class _Writer:
    """Renders one kernel; one instance per kernel."""

    def __init__(self, kernel: ir.Kernel, *, debug: bool = False) -> None:
        self.k = kernel
        self.debug = debug
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
        self.asserts = False  # device-side index checks: compiled with asserts on
        self.clamped = 0  # direct loads whose bounds could not be proven: clamped
        self.helpers: set[str] = set()
        self._n = 0

        # canonical names: outer x0.., inner r<group>_<j>
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
        groups: dict[tuple[int, ...], int] = {}
        self.local: dict[str, str] = {}
        nred = 0
        self.stages: list[_Stage] = []
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
                _Stage(
                    tuple(names),
                    tuple(kept),
                    ir.static(math.prod(sizes)) if st.vars else 1,
                    g,
                    reds,
                    stores,
                )
            )
        self.groups = {g: sz for sz, g in groups.items()}
        self.online = self._online_pairs()
        self.ranges = {sym: (0, hi) for sym, hi in self.bounds.items()}  # for index_bounds
        self.rsyms = {_sym(n) for s in self.stages for n in s.vars}

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
        # axis 0 of a 2D block: index, mask, block size (rows of a 2D pointwise tile: y)
        self.ax0 = ("xindex", "xmask", "XBLOCK")
        self.tile: tuple[list[tuple[str, int]], list[tuple[str, int]], dict] | None = None
        if self.plan.mode == "pointwise" and not self.symbolic:
            self._plan_tile()
        self.int64 = self._needs_int64()
        self.itype = "tl.int64" if self.int64 else "tl.int32"
        self.two_d = self.plan.mode != "pointwise"
        self.shape1 = "[1, 1]" if self.two_d else "[1]"

    # -- analysis --------------------------------------------------------

    def _splittable(self) -> bool:
        """One reduction stage first (no stores), then stages without inner ranges."""
        st = self.stages
        return (
            bool(st)
            and st[0].group >= 0
            and bool(st[0].reductions)
            and not st[0].stores
            and all(s.group < 0 for s in st[1:])
        )

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
        if self._unit_var(index) is None:
            return False
        for term in sympy.Add.make_args(index):
            c, rest = term.as_coeff_Mul()
            if c == 1 and rest in self.rsyms:
                return False
        return bool(index.free_symbols & self.rsyms)

    def _unit_var(self, index: sympy.Expr) -> sympy.Symbol | None:
        """The outer variable along which ``index`` is contiguous (coefficient 1), if plain."""
        if index.has(ir.FloorDiv, ir.Mod):
            return None
        for term in sympy.Add.make_args(sympy.expand(index)):
            c, rest = term.as_coeff_Mul()
            if c == 1 and rest in self.xsyms:
                return rest
        return None

    def _plan_tile(self) -> None:
        """Tile a pointwise kernel in 2D when a load is contiguous along a non-last variable."""
        if len(self.xvars) < 2:
            return
        names = [_sym(n) for n, _ in self.xvars]
        roots = [v for s in self.stages for _, _, v in s.stores]
        for node in ir.walk(roots):
            if not isinstance(node, ir.Load) or node.binds:
                continue
            unit = self._unit_var(node.index)
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

    def _needs_int64(self) -> bool:
        if self.symbolic:  # sizes unknown until the call: 64-bit indices
            return True
        limit = 2**31 - 1
        worst = [self.xnumel + 4096, max((s.numel for s in self.stages), default=1) + 8192]
        for a in self.k.args:
            worst.append(a.layout.storage_size)
        acc = [0]
        bounds = dict(self.bounds)
        for s in self.stages:
            exprs = [r[2] for r in s.reductions] + [v for _, _, v in s.stores]
            for node in ir.walk(exprs):
                if isinstance(node, ir.Load):
                    for sym, _e, n in node.binds:
                        bounds[sym] = int(n) - 1 if isinstance(n, (int, sympy.Integer)) else 2**62
                    _upper(node.index, bounds, acc)
                elif isinstance(node, ir.IndexValue):
                    _upper(node.expr, bounds, acc)
            for _, idx, _ in s.stores:
                _upper(idx, bounds, acc)
        return max(worst + acc) >= limit

    def _deps(self, node: ir.Expr, memo: dict) -> frozenset[str]:
        hit = memo.get(node)
        if hit is not None:
            return hit
        out: set[str] = set()
        if isinstance(node, (ir.Load, ir.IndexValue)):
            expr = node.index if isinstance(node, ir.Load) else node.expr
            free = expr.free_symbols
            if free & self.xsyms:
                out.add("x")
            if free & self.rsyms:
                out.add("r")
        elif isinstance(node, ir.LocalRef):
            out.add("x")
        for c in node.children():
            out |= self._deps(c, memo)
        res = frozenset(out)
        memo[node] = res
        return res

    # -- emission --------------------------------------------------------

    def _tmp(self) -> str:
        self._n += 1
        return f"tmp{self._n - 1}"

    def _shape(self, deps: frozenset[str] | set[str]) -> str:
        if not self.two_d:
            return "[XBLOCK]"
        return f"[{self.ax0[2] if 'x' in deps else '1'}, {self.rb if 'r' in deps else '1'}]"

    def _mask(self, deps: frozenset[str] | set[str]) -> str:
        parts = []
        if "x" in deps:
            parts.append(self.ax0[1])
        if "r" in deps and self.rmask:
            parts.append(self.rmask)
        return " & ".join(parts)

    def _put(self, line: str, deps: frozenset[str]) -> None:
        (self.body if "r" in deps else self.pre).append(line)

    def emit(self, node: ir.Expr) -> str:
        deps = self._deps(node, self.depmemo)
        memo = self.memo_r if "r" in deps else self.memo_x
        hit = memo.get(node)
        if hit is not None:
            return hit
        if isinstance(node, ir.Const):
            name = self._tmp()
            self.consts.append(
                f"{name} = tl.full({self.shape1}, {_literal(node.value, node.dtype)}, "
                f"{tl_type(node.dtype)})"
            )
        elif isinstance(node, ir.LocalRef):
            name = self.local[node.name]
        elif isinstance(node, ir.IndexValue):
            name = self._tmp()
            if deps:
                text = ir.print_index(node.expr, "python")
                self._put(f"{name} = ({text}).to({tl_type(node.dtype)})", deps)
            else:
                self._put(
                    f"{name} = tl.full({self.shape1}, "
                    f"{ir.print_index(node.expr, 'python')}, {tl_type(node.dtype)})",
                    deps,
                )
        elif isinstance(node, ir.Load):
            name = self._load(node, deps)
        elif isinstance(node, ir.Op):
            text = self._op(node)
            name = self._tmp()
            self._put(f"{name} = {text}", deps)
        else:
            raise NotImplementedError(f"cannot render {type(node).__name__}")
        memo[node] = name
        return name

    def _load(self, node: ir.Load, deps: frozenset[str]) -> str:
        """A masked load that never leaves its buffer, whatever the indices hold.

        An indirect index out of ``[0, extent)`` trips a device-side assert (the
        kernel is compiled with asserts on, as Inductor does, so it raises as eager
        does) and is clamped in range, so no build reads outside the buffer. A
        direct index whose bounds over the kernel's ranges are not provably inside
        the buffer is clamped into it, as cpu_cpp does; an empty buffer is not read.
        """
        ranges = dict(self.ranges) if node.binds else self.ranges
        subs = {}
        empty = False
        for sym, e, extent in node.binds:
            v = self.emit(e)
            edeps = self._deps(e, self.depmemo)
            n = ir.static(extent)  # an int, or a symbolic size (>= 2)
            mask = self._mask(edeps)
            ok = f"(0 <= {v}) & ({v} < {_py(n)})"
            self._put(
                f"tl.device_assert(({ok}){f' | ~({mask})' if mask else ''}, "
                f'"index out of bounds: {node.buffer}")',
                edeps,
            )
            self.asserts = True
            if ir.is_static(n) and n <= 0:
                empty = True
                continue
            clamped = self._tmp()
            self._put(f"{clamped} = tl.minimum(tl.maximum({v}, 0), {_py(ir.static(n - 1))})", edeps)
            subs[sym] = _sym(clamped)
            ranges[_sym(clamped)] = (0, ir.static(n - 1))
        layout = self.layout[node.buffer]
        size = layout.storage_size
        name = self._tmp()
        if empty or (ir.is_static(size) and size <= 0):  # nothing can be read: never used
            self._put(f"{name} = tl.full({self._shape(deps)}, 0, {tl_type(node.dtype)})", deps)
            return name
        index = node.index.xreplace(subs) if subs else node.index
        text = ir.print_index(index, "python")
        lo, hi = ir.static(-layout.offset), ir.static(size - 1 - layout.offset)
        bounds = ir.index_bounds(index, ranges)
        if (
            bounds is None
            or not ir.provably_nonneg(bounds[0] - lo)
            or not ir.provably_nonneg(hi - bounds[1])
        ):
            text = f"tl.minimum(tl.maximum({text}, {_py(lo)}), {_py(hi)})"
            self.clamped += 1
        mask = self._mask(deps)
        ptr = self.ptr[node.buffer]
        if mask:
            self._put(f"{name} = tl.load({ptr} + {text}, {mask}, other=0)", deps)
        else:
            self._put(f"{name} = tl.load({ptr} + {text})", deps)
        return name

    def _op(self, node: ir.Op) -> str:
        name = node.name
        args = [self.emit(a) for a in node.args]
        adt = [a.dtype for a in node.args]
        out_cast = None
        if name == "cast":
            dt = node.dtype
        elif name in LOGICAL_OPS:
            args = [a if d == torch.bool else f"({a} != 0)" for a, d in zip(args, adt)]
            dt = torch.bool
        elif name == "where":
            dt = node.dtype
            args[0] = args[0] if adt[0] == torch.bool else f"({args[0]} != 0)"
            args[1:] = [a if d == dt else cast_to(dt, a) for a, d in zip(args[1:], adt[1:])]
        elif name in ("rand", "randn"):
            dt = torch.float32
            out_cast = node.dtype if node.dtype != dt else None
        else:
            if name in ir.PREDICATES:
                dt = adt[0]
                for d in adt[1:]:
                    dt = torch.promote_types(dt, d)
            else:
                dt = node.dtype
            if dt in HALF_TYPES:
                dt = torch.float32
                if name not in ir.PREDICATES:
                    out_cast = node.dtype
            args = [a if d == dt else cast_to(dt, a) for a, d in zip(args, adt)]
        if dt == torch.float64:
            table = CODE_FOR_OP_F64
        elif dt.is_floating_point:
            table = CODE_FOR_OP
        else:
            table = CODE_FOR_OP_INT
        fn = table.get(name)
        if fn is None:
            raise NotImplementedError(f"op {name} on {dt} has no Triton rendering")
        text = fn(dt, *args)
        for h in re.findall(r"\b(_[a-z_]+)\(", text):
            self._need(h)
        return cast_to(out_cast, text) if out_cast is not None else text

    def _need(self, helper: str) -> None:
        if helper in HELPERS and helper not in self.helpers:
            self.helpers.add(helper)
            for dep in HELPER_DEPS.get(helper, ()):
                self._need(dep)
            for h in re.findall(r"\b(_[a-z_]+)\(", HELPERS[helper]):
                if h != helper:
                    self._need(h)

    def _store(self, buffer: str, index: sympy.Expr, value: ir.Expr) -> None:
        v = self.emit(value)
        ideps = self._deps(ir.IndexValue(index), self.depmemo)
        vdeps = self._deps(value, self.depmemo)
        deps = ideps | vdeps
        if not deps or (self.two_d and "x" not in deps):
            deps = deps | {"x"}
        text = ir.print_index(index, "python")
        if deps != ideps:
            text = (
                f"tl.broadcast_to({text}, {self._shape(deps)})"
                if ideps
                else f"tl.full({self._shape(deps)}, {text}, {self.itype})"
            )
        mask = self._mask(deps)
        line = f"tl.store({self.ptr[buffer]} + {text}, {v}" + (f", {mask})" if mask else ")")
        self._put(line, frozenset(deps))

    # -- reductions ------------------------------------------------------

    def _acc_dtype(self, op: str, value: ir.Expr, dtype: torch.dtype) -> torch.dtype:
        if op in ("any", "all"):
            return torch.int32
        if op in ("argmax", "argmin"):
            dt = value.dtype
        else:
            dt = dtype
        if dt in HALF_TYPES:
            return torch.float32
        if dt == torch.bool:
            return torch.int32
        return dt

    def _red_value(self, op: str, value: ir.Expr, acc: torch.dtype) -> str:
        v = self.emit(value)
        if op in ("any", "all"):
            return f"({v} != 0).to(tl.int32)" if value.dtype != torch.bool else f"{v}.to(tl.int32)"
        return v if value.dtype == acc else cast_to(acc, v)

    def _finish(self, local: str, text: str, op: str, dtype: torch.dtype, acc: torch.dtype) -> str:
        """``local = text[:, None]`` cast to the reduction's dtype."""
        if op in ("any", "all"):
            return f"{local} = ({text} != 0)[:, None]"
        if op in ("argmax", "argmin"):
            return f"{local} = {text}[:, None]" + (
                "" if dtype == torch.int64 else f".to({tl_type(dtype)})"
            )
        if dtype != acc:
            return f"{local} = {cast_to(dtype, text + '[:, None]')}"
        return f"{local} = {text}[:, None]"

    def _full_shape(self, v: str, deps: frozenset[str]) -> str:
        """``v`` (a value masked by the stage's row mask) in the full ``[XBLOCK, R]`` shape."""
        if self.rmask:
            deps = deps | {"r"}
        if {"x", "r"} <= deps:
            return v
        return f"tl.broadcast_to({v}, [XBLOCK, {self.rb}])"

    def _reduction_persistent(
        self, local: str, op: str, value: ir.Expr, dtype: torch.dtype
    ) -> None:
        acc = self._acc_dtype(op, value, dtype)
        deps = self._deps(value, self.depmemo)
        v = self._red_value(op, value, acc)
        if op in ("argmax", "argmin"):
            init = lowest(acc) if op == "argmax" else highest(acc)
            helper = f"_{op}_combine"
            self._need(helper)
            masked = f"tl.where({self.rmask}, {v}, {init})" if self.rmask else v
            vals = self._full_shape(masked, deps)
            idx = f"tl.broadcast_to(rindex{self.cur_group}.to(tl.int64), [XBLOCK, {self.rb}])"
            t = self._tmp()
            self.body.append(f"{t}, {local}_idx = tl.reduce(({vals}, {idx}), 1, {helper})")
            self.body.append(self._finish(local, f"{local}_idx", op, dtype, acc))
            return
        red = REDUCE[op]
        masked = f"tl.where({self.rmask}, {v}, {red.init(acc)})" if self.rmask else v
        full = self._full_shape(masked, deps)
        text = red.final(acc, full)
        for h in re.findall(r"\b(_[a-z_]+)\b", text):
            self._need(h)
        self.body.append(self._finish(local, text, op, dtype, acc))

    def _reduction_looped(
        self, local: str, op: str, value: ir.Expr, dtype: torch.dtype, post: list[str]
    ) -> None:
        acc = self._acc_dtype(op, value, dtype)
        v = self._red_value(op, value, acc)
        shape = f"[XBLOCK, {self.rb}]"
        if op in ("argmax", "argmin"):
            init = lowest(acc) if op == "argmax" else highest(acc)
            helper = f"_{op}_combine"
            self._need(helper)
            self.pre.append(f"{local}_acc = tl.full({shape}, {init}, {tl_type(acc)})")
            self.pre.append(
                f"{local}_accidx = tl.broadcast_to(({self.rfirst}).to(tl.int64), {shape})"
            )
            cmp = ">" if op == "argmax" else "<"
            t = self._tmp()
            self.body.append(f"{t} = tl.where({self.rmask}, {v}, {init})")
            # strictly better only: equal values keep the earlier (smaller) index
            self.body.append(
                f"{t}_take = ({t} {cmp} {local}_acc) | "
                f"(({t} != {t}) & ({local}_acc == {local}_acc))"
            )
            self.body.append(f"{local}_acc = tl.where({t}_take, {t}, {local}_acc)")
            self.body.append(
                f"{local}_accidx = tl.where({t}_take, rindex.to(tl.int64), {local}_accidx)"
            )
            post.append(
                f"{local}_val, {local}_idx = tl.reduce(({local}_acc, {local}_accidx), 1, {helper})"
            )
            if not self.partial:
                post.append(self._finish(local, f"{local}_idx", op, dtype, acc))
            return
        red = REDUCE[op]
        init = red.init(acc)
        self.pre.append(f"{local}_acc = tl.full({shape}, {init}, {tl_type(acc)})")
        combined = red.combine(acc, f"{local}_acc", f"tl.where({self.rmask}, {v}, {init})")
        self.body.append(f"{local}_acc = {combined}")
        final = red.final(acc, f"{local}_acc")
        for h in re.findall(r"\b(_[a-z_]+)\b", combined + final):
            self._need(h)
        if self.partial:
            post.append(f"{local}_part = {final}[:, None]")
        else:
            post.append(self._finish(local, final, op, dtype, acc))

    # -- kernel bodies ---------------------------------------------------

    def _begin(self) -> None:
        self.consts: list[str] = []
        self.pre: list[str] = []
        self.body = self.pre
        self.memo_x: dict = {}
        self.memo_r = self.memo_x
        self.depmemo: dict = {}
        self.rmask: str | None = None
        self.rb = "RBLOCK"
        self.cur_group = -1
        self.partial = False
        self.rfirst = "rbase"  # a lane's first inner index (split: its chunk's)

    def _xheader(self, lines: list[str], pid: str = "tl.program_id(0)") -> None:
        pid = f"{pid}.to(tl.int64)" if self.int64 else pid
        arange = "tl.arange(0, XBLOCK)" + ("[:, None]" if self.two_d else "")
        lines.append(f"xindex = {pid} * XBLOCK + {arange}")
        lines.append(f"xmask = xindex < {_py(self.xnumel)}")
        self._decompose(lines, "xindex", self.xvars)

    def _decompose(self, lines: list[str], index: str, vs: list[tuple[str, int]]) -> None:
        stride = 1
        for i, (n, s) in reversed(list(enumerate(vs))):
            e = index if stride == 1 else f"({index} // {_py(stride)})"
            lines.append(f"{n} = {e} % {_py(s)}" if i else f"{n} = {e}")
            stride = ir.static(stride * s)

    def _stage_vars(self, st: _Stage) -> list[tuple[str, int]]:
        return list(zip(st.vars, st.sizes))

    def _stores(self, st: _Stage) -> None:
        for buf, idx, val in st.stores:
            self._store(buf, idx, val)

    def _pointwise(self) -> list[str]:
        self._begin()
        head: list[str] = []
        self._xheader(head)
        for st in self.stages:
            self._stores(st)
        return head + self.consts + self.pre

    def _pointwise2d(self) -> list[str]:
        assert self.tile is not None
        rows, cols, _cfg = self.tile
        self._begin()
        self.rmask, self.rb = "xmask", "XBLOCK"
        to64 = ".to(tl.int64)" if self.int64 else ""
        head = [
            f"yindex = tl.program_id(1){to64} * YBLOCK + tl.arange(0, YBLOCK)[:, None]",
            f"ymask = yindex < {math.prod(s for _, s in rows)}",
            f"xindex = tl.program_id(0){to64} * XBLOCK + tl.arange(0, XBLOCK)[None, :]",
            f"xmask = xindex < {math.prod(s for _, s in cols)}",
        ]
        self._decompose(head, "yindex", rows)
        self._decompose(head, "xindex", cols)
        for st in self.stages:
            self._stores(st)
        return head + self.consts + self.pre

    def _persistent(self) -> list[str]:
        self._begin()
        self.rb = str(self.plan.rblock)
        head: list[str] = []
        self._xheader(head)
        rtype = ".to(tl.int64)" if self.int64 else ""
        head.append(f"rbase = tl.arange(0, {self.rb})[None, :]{rtype}")
        defined: set[int] = set()
        for st in self.stages:
            if st.group < 0:
                self.rmask = None
                self._stores(st)
                continue
            g = st.group
            self.cur_group = g
            self.rmask = f"rmask{g}" if st.numel != self.plan.rblock else None
            if g not in defined:
                defined.add(g)
                self.pre.append(f"rindex{g} = rbase")
                if self.rmask:
                    self.pre.append(f"rmask{g} = rindex{g} < {st.numel}")
                self._decompose(self.pre, f"rindex{g}", self._stage_vars(st))
            self._stores(st)
            for local, op, value, dtype in st.reductions:
                self._reduction_persistent(local, op, value, dtype)
        return head + self.consts + self.pre

    def _looped_stage(
        self, st: _Stage, out: list[str], split: bool = False, second: _Stage | None = None
    ) -> None:
        """One stage with inner ranges as a loop over RBLOCK chunks, appended to ``out``;
        with ``second`` (see :meth:`_online_pairs`), that stage's sum in the same loop."""
        self.pre, self.body, self.memo_r = [], [], {}
        self.rmask = "rmask"
        self.cur_group = st.group
        post: list[str] = []
        if second is not None:
            self._reduction_online(st, second, post)
        else:
            for local, op, value, dtype in st.reductions:
                self._reduction_looped(local, op, value, dtype, post)
        self._stores(st)
        body_head: list[str] = []
        if split:
            header = f"for roffset in range(0, {self.plan.chunk}, RBLOCK):"
            body_head.append("rlocal = roffset + rbase")
            body_head.append(f"rindex = split * {self.plan.chunk} + rlocal")
            body_head.append(f"rmask = (rlocal < {self.plan.chunk}) & (rindex < {st.numel})")
        else:
            header = f"for roffset in range(0, {_py(st.numel)}, RBLOCK):"
            body_head.append("rindex = roffset + rbase")
            body_head.append(f"rmask = rindex < {_py(st.numel)}")
        self._decompose(body_head, "rindex", self._stage_vars(st))
        out += self.pre
        out.append(header)
        out += ["    " + line for line in body_head + self.body]
        out += post
        self.pre = self.body = out
        self.memo_r = self.memo_x

    def _reduction_online(self, st: _Stage, second: _Stage, post: list[str]) -> None:
        """``m = max(v)`` (``st``) and ``s = sum(exp(v - m))`` (``second``) in one loop: a
        running maximum per lane, and a running sum rescaled by ``exp(m_old - m_new)``
        when the maximum grows. Lanes (and elements) at -inf add nothing; NaN and +inf
        propagate to NaN, as the two passes give."""
        m, _op, value, dtype = st.reductions[0]
        s = second.reductions[0][0]
        acc = self._acc_dtype("max", value, dtype)
        v = self._red_value("max", value, acc)
        shape, ty, ninf = f"[XBLOCK, {self.rb}]", tl_type(acc), 'float("-inf")'
        for h in ("_maximum", "_sum"):
            self._need(h)
        self.pre.append(f"{m}_acc = tl.full({shape}, {ninf}, {ty})")
        self.pre.append(f"{s}_acc = tl.full({shape}, 0, {ty})")
        t = self._tmp()
        self.body += [
            f"{t} = tl.where(rmask, {v}, {ninf})",
            f"{t}_max = _maximum({m}_acc, {t})",
            (
                f"{s}_acc = {s}_acc * tl.where({m}_acc == {ninf}, 0.0, tl.exp({m}_acc - {t}_max)) "
                f"+ tl.where({t} == {ninf}, 0.0, tl.exp({t} - {t}_max))"
            ),
            f"{m}_acc = {t}_max",
        ]
        post.append(f"{m}_row = tl.reduce({m}_acc, 1, _maximum)")
        post.append(
            f"{s}_row = tl.reduce(tl.where({m}_acc == {ninf}, 0.0, "
            f"{s}_acc * tl.exp({m}_acc - {m}_row[:, None])), 1, _sum)"
        )
        post.append(self._finish(m, f"{m}_row", "max", dtype, acc))
        post.append(self._finish(s, f"{s}_row", "sum", dtype, acc))

    def _looped(self) -> list[str]:
        self._begin()
        out: list[str] = []
        self._xheader(out)
        rtype = ".to(tl.int64)" if self.int64 else ""
        out.append(f"rbase = tl.arange(0, RBLOCK)[None, :]{rtype}")
        self.pre = self.body = out
        merged = set(self.online.values())
        for i, st in enumerate(self.stages):
            if i in merged:
                continue  # computed with its maximum, in one loop
            if st.group < 0:
                self.rmask = None
                self._stores(st)
            else:
                second = self.stages[self.online[i]] if i in self.online else None
                self._looped_stage(st, out, second=second)
        return self.consts + out

    def _split_partial(self) -> tuple[list[str], list[tuple[str, torch.dtype]]]:
        """First kernel of a split reduction: grid (SPLIT, xnumel), partials to scratch."""
        self._begin()
        out: list[str] = []
        pid = "tl.program_id(1)"
        pid = f"{pid}.to(tl.int64)" if self.int64 else pid
        out.append(f"xindex = {pid} + tl.full([1, 1], 0, {self.itype})")
        out.append(f"xmask = xindex < {self.xnumel}")
        self._decompose(out, "xindex", self.xvars)
        out.append("split = tl.program_id(0)" + (".to(tl.int64)" if self.int64 else ""))
        rtype = ".to(tl.int64)" if self.int64 else ""
        out.append(f"rbase = tl.arange(0, RBLOCK)[None, :]{rtype}")
        self.pre = self.body = out
        self.partial = True
        self.rfirst = f"split * {self.plan.chunk} + rbase"
        st = self.stages[0]
        self._looped_stage(st, out, split=True)
        scratch: list[tuple[str, torch.dtype]] = []
        at = f"xindex * {self.plan.split} + split"
        for local, op, value, dtype in st.reductions:
            acc = self._acc_dtype(op, value, dtype)
            if op in ("argmax", "argmin"):
                scratch += [(f"{local}_pv", acc), (f"{local}_pi", torch.int64)]
                out.append(f"tl.store({local}_pv + ({at}), {local}_val[:, None])")
                out.append(f"tl.store({local}_pi + ({at}), {local}_idx[:, None])")
            else:
                scratch.append((f"{local}_p", acc))
                out.append(f"tl.store({local}_p + ({at}), {local}_part)")
        return self.consts + out, scratch

    def _split_final(self, scratch: list[tuple[str, torch.dtype]]) -> list[str]:
        """Second kernel of a split reduction: combine partials, then the epilogue stages."""
        self._begin()
        out: list[str] = []
        self._xheader(out)
        s = self.plan.split
        sb = heuristics.next_power_of_2(s)
        out.append(f"sindex = tl.arange(0, {sb})[None, :]")
        out.append(f"smask = xmask & (sindex < {s})")
        st = self.stages[0]
        for local, op, value, dtype in st.reductions:
            acc = self._acc_dtype(op, value, dtype)
            at = f"xindex * {s} + sindex"
            if op in ("argmax", "argmin"):
                init = lowest(acc) if op == "argmax" else highest(acc)
                helper = f"_{op}_combine"
                self._need(helper)
                out.append(f"{local}_v = tl.load({local}_pv + ({at}), smask, other={init})")
                out.append(f"{local}_i = tl.load({local}_pi + ({at}), smask, other={2**62})")
                out.append(
                    f"{local}_rv, {local}_idx = tl.reduce(({local}_v, {local}_i), 1, {helper})"
                )
                out.append(self._finish(local, f"{local}_idx", op, dtype, acc))
            else:
                red = REDUCE[op]
                out.append(f"{local}_v = tl.load({local}_p + ({at}), smask, other={red.init(acc)})")
                final = red.final(acc, f"{local}_v")
                for h in re.findall(r"\b(_[a-z_]+)\b", final):
                    self._need(h)
                out.append(self._finish(local, final, op, dtype, acc))
        self.pre = self.body = out
        for st in self.stages[1:]:
            self._stores(st)
        return self.consts + out

    # -- assembly --------------------------------------------------------

    def _header(self) -> str:
        k = self.k
        ints = "int64" if self.int64 else "int32"
        lines = [f"# kernel {k.name}: {self.plan.mode}, {ints} indices"]
        for o in k.origins:
            lines.append(f"#   from {o}")
        outer = ", ".join(f"{n} < {s}" for n, s in self.xvars) or "one point"
        lines.append(f"# outer: {outer} (xnumel {self.xnumel})")
        for i, st in enumerate(self.stages):
            what = [f"{op} -> {loc}" for loc, op, _v, _d in st.reductions]
            what += [f"store {b}" for b, _i, _v in st.stores]
            rng = ", ".join(f"{n} < {s}" for n, s in zip(st.vars, st.sizes)) or "no inner range"
            lines.append(f"# stage {i}: {rng}: {'; '.join(what)}")
        return "\n".join(lines) + "\n"

    def _fn(self, name: str, params: list[str], body: list[str]) -> str:
        sig = ", ".join(params)
        return f"@triton.jit\ndef {name}({sig}):\n" + "".join(f"    {ln}\n" for ln in body)

    def render(self) -> sdk.KernelSource:
        ptrs = [self.ptr[a.name] for a in self.k.args] + self.sizes
        mode = self.plan.mode
        fns: list[str] = []
        meta: dict = {
            "mode": mode,
            "xnumel": _json_size(self.xnumel),
            "rnumel": self.plan.rnumel,
            "int64": self.int64,
            "config": dict(self.plan.config),
            "grid": [[_json_size(self.xnumel), "XBLOCK"]],
            "args": [
                [
                    a.name,
                    _json_size(a.layout.storage_size),
                    str(a.layout.dtype).replace("torch.", ""),
                    a.role,
                ]
                for a in self.k.args
            ],
            "scratch": [],
        }
        if self.sizes:
            # symbolic sizes: the kernel takes them after the buffers; a grid entry or
            # storage size that is a string is a Python expression over them
            meta["sizes"] = list(self.sizes)

        def fn(name: str, params: list[str], consts: list[str], body: list[str]) -> str:
            return self._fn(name, params + [f"{c}: tl.constexpr" for c in consts], body)

        if mode == "pointwise":
            meta["constexprs"] = ["XBLOCK"]
            fns.append(fn(self.name, ptrs, meta["constexprs"], self._pointwise()))
        elif mode == "pointwise2d":
            assert self.tile is not None
            rows, cols, _ = self.tile
            meta["grid"] = [
                [math.prod(s for _, s in cols), "XBLOCK"],
                [math.prod(s for _, s in rows), "YBLOCK"],
            ]
            meta["constexprs"] = ["XBLOCK", "YBLOCK"]
            fns.append(fn(self.name, ptrs, meta["constexprs"], self._pointwise2d()))
        elif mode == "persistent":
            meta["constexprs"] = ["XBLOCK"]
            meta["rblock"] = self.plan.rblock
            fns.append(fn(self.name, ptrs, meta["constexprs"], self._persistent()))
        elif mode == "looped":
            meta["constexprs"] = ["XBLOCK", "RBLOCK"]
            fns.append(fn(self.name, ptrs, meta["constexprs"], self._looped()))
            if self.alt_plan is not None:
                looped, self.plan = self.plan, self.alt_plan
                rows = [_py(st.numel) for st in self.stages if st.group >= 0]
                name = self.name + "_rows"
                meta["alt"] = {
                    "fn": name,
                    "rblock": self.plan.rblock,
                    "config": dict(self.plan.config),
                    "grid": [[_json_size(self.xnumel), "XBLOCK"]],
                    "constexprs": ["XBLOCK"],
                    "when": " and ".join(f"{r} <= {self.plan.rblock}" for r in rows),
                }
                fns.append(fn(name, ptrs, ["XBLOCK"], self._persistent()))
                self.plan = looped
        else:
            partial, scratch = self._split_partial()
            names = [n for n, _ in scratch]
            pname = self.name + "_partial"
            meta["pre"] = {
                "fn": pname,
                "grid": [[self.plan.split, None], [self.xnumel, None]],
                "constexprs": ["XBLOCK", "RBLOCK"],
            }
            meta["constexprs"] = ["XBLOCK"]
            fns.append(fn(pname, ptrs + names, meta["pre"]["constexprs"], partial))
            fns.append(fn(self.name, ptrs + names, meta["constexprs"], self._split_final(scratch)))
            meta["split"] = self.plan.split
            meta["chunk"] = self.plan.chunk
            meta["scratch"] = [
                [self.xnumel * self.plan.split, str(dt).replace("torch.", "")] for _, dt in scratch
            ]
            meta["config"]["pre"] = dict(self.plan.pre_config)
        if self.debug or self.asserts:
            meta["debug"] = True  # compile with device-side asserts
        meta["clamped"] = self.clamped
        helpers = [HELPERS[h].strip() + "\n" for h in HELPERS if h in self.helpers]
        source = "\n\n".join([self._header() + PRELUDE.rstrip() + "\n", *helpers, *fns])
        return sdk.KernelSource(self.name, "triton", source, self.name, meta)


def render(kernel: ir.Kernel, *, debug: bool = False) -> sdk.KernelSource:
    """Render ``kernel`` to Triton; ``debug`` compiles it with device-side asserts on
    (a kernel with indirect loads always is: its index checks are asserts).

    ``meta`` of the result is plain JSON data for :mod:`.launch`: ``mode``,
    ``xnumel``, ``config`` (default constexprs and ``num_warps``), ``constexprs``
    (the main kernel's, in parameter order), ``grid`` (per grid axis: numel and
    the constexpr that divides it, or None), ``args`` (name, storage size,
    dtype, role), ``debug`` (compile with asserts), ``clamped`` (direct loads whose
    index was clamped into the buffer), and for a split reduction ``pre`` (the first kernel: name,
    grid, constexprs; its config is ``config["pre"]``) and ``scratch`` (numel,
    dtype of each scratch buffer, passed after the arguments).
    """
    return _Writer(kernel, debug=debug).render()

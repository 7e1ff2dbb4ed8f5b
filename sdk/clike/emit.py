"""The loop-nest emitter of :mod:`sdk.clike`: one :class:`sdk.ir.Kernel` to one C or C++
function, every op, type, literal and reduction spelled by a :class:`~sdk.clike.CTarget`.

Loop structure (:func:`render`):

* Loop dimensions are merged when every index and index value of the kernel is
  linear in them with matching strides (a contiguous 2048x4096 pointwise kernel
  becomes one loop of 8M), size-1 dimensions are dropped.
* Pointwise kernels (no inner ranges): the innermost dimension is cut into
  blocks of :data:`BLOCK`; one ``omp parallel for`` runs over (outer points x
  blocks), each block an ``omp simd`` loop. Kernels of fewer than
  :data:`PARALLEL_MIN_WORK` elements run serially (no OpenMP fork).
* Reduction and multi-stage kernels: ``omp parallel for`` over the outer
  points; each runs its stages in order, every inner loop ``omp simd`` with a
  ``reduction`` clause (max/min keep a separate NaN flag so they vectorize and
  still propagate NaN; a reducer without an OpenMP clause, such as argmax, runs a
  scalar loop). When the outer extent is small and the rows long, the rows are
  instead reduced by all threads together (per-thread partials, combined in
  thread order after a barrier; only when every reducer of the kernel can combine
  partials); which of the two runs is decided at run time from
  ``omp_get_max_threads()``.
* Expressions are emitted once per loop body (CSE on the hashable IR nodes) as
  ``const T tN = ...;`` lines, each at the outermost loop level it depends on
  (loop invariants before the parallel loop, per-row values before the inner
  loops): :class:`sdk.clike.expressions.Emitter` writes them, this module places
  its blocks in the loop nests.
* Loads are evaluated unconditionally (a ``where`` selects between computed
  values), so a load whose index cannot be proven to lie in its buffer is
  clamped into it (``sdk_clamp_index``).

Index checks: an indirect (bind) index outside ``[0, extent)`` (after the
lowering's negative wrap, which the bind expression holds) is still read
clamped, so memory stays safe, but it is also recorded in the calling thread's
error slot (the target's ``checks`` prelude, added to a translation unit only when
one of its kernels checks). Such a kernel clears the slot on entry and returns
its flag (``int64_t``; ``meta["index_checks"]``), and the launcher of
:func:`sdk.clike.launchers` raises :class:`IndexError` when it is set. A bind
computed outside the ``omp simd`` loop is checked by a branch
(``sdk_checked_index``: the clamp only runs on the cold path); one computed inside
it feeds an unsigned-max reduction of the loop (``reduction(max:sdk_badN)``) that
is tested after the loop, so the loop still vectorizes. Kernels without binds are
``void``.

Symbolic sizes: sizes print with :func:`sdk.ir.print_size` (the kernel's size
arguments are ``const int64_t`` parameters after its pointers); heuristics read
:func:`sdk.ir.numel_hint`, never what is computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import sympy
import torch

import sdk
from sdk.ir import (
    FloorDiv,
    Kernel,
    Load,
    LocalRef,
    Reduction,
    Stage,
    is_static,
    numel_hint,
    print_index,
    size_hint,
    static,
    var,
    walk,
)
from sdk.ir.loops import index_exprs

from .c import Reducer
from .expressions import Emitter, EmitterTarget, Names, c_size
from .indexing import merge_dims

BOOL = torch.bool

#: Work (elements) below which a kernel runs on one thread.
PARALLEL_MIN_WORK = 32768
#: Elements of the innermost dimension a pointwise block covers.
BLOCK = 4096
#: A reduction kernel with fewer outer points than this and long rows also gets
#: the variant that reduces each row with all threads.
SPLIT_MAX_OUTER = 256
#: ... when its rows have at least this many elements.
SPLIT_MIN_INNER = 4096
#: Columns one thread reduces together in the column form of a reduction (each row's
#: elements of a block are contiguous: one ``omp simd`` loop over them per row).
COLUMNS = 64


# ----------------------------------------------------------------------------- loops


def _indent(lines: list[str], n: int = 1) -> list[str]:
    pad = "  " * n
    return [pad + ln if ln else ln for ln in lines]


def _loop(var_: str, lo: str, hi: str, body: list[str], pragma: str | None = None) -> list[str]:
    head = [f"#pragma omp {pragma}"] if pragma else []
    return head + [f"for (int64_t {var_} = {lo}; {var_} < {hi}; ++{var_}) {{", *_indent(body), "}"]


def _decompose(p: str, dims: list[tuple[str, Any]], tail: Any = 1) -> list[str]:
    """Lines deriving the row-major variables ``dims`` from the flat index ``p``,
    whose fastest-moving part (of extent ``tail``) is not among them."""
    lines, stride = [], tail
    for i in range(len(dims) - 1, -1, -1):
        name, size = dims[i]
        code = f"{p} / {c_size(stride)}" if stride != 1 else p
        if i:
            code = f"({code}) % {c_size(size)}" if stride != 1 else f"{p} % {c_size(size)}"
        lines.insert(0, f"const int64_t {name} = {code};")
        stride = static(stride * size)
    return lines


def _when_large(work: Any) -> str:
    """OpenMP's ``if`` clause for work of symbolic size: fork only when it is large."""
    return "" if is_static(work) else f" if({c_size(work)} >= {PARALLEL_MIN_WORK})"


def _above_one(stride: Any) -> bool:
    """Whether a stride is known to be at least 2 in magnitude at every size: a number, or
    a product of sizes (each symbolic size is at least ``MIN_SIZE``, 2) and a nonzero
    integer."""
    if is_static(stride):
        return abs(int(stride)) >= 2
    factors = sympy.Mul.make_args(stride)
    return all((f.is_Symbol and f.is_positive) or (f.is_Integer and f != 0) for f in factors)


def _slot(slot: str, thread: str) -> str:
    """Index of ``thread``'s partial in a double-buffered, padded partials array."""
    if slot == "0":
        return "0" if thread == "0" else f"{thread} * 16"
    return f"{slot} * nth * 16" if thread == "0" else f"({slot} * nth + {thread}) * 16"


@dataclass
class _Dims:
    """Loop dimensions after merging: C names, sizes, the symbols that stand for them
    in substituted expressions, and the substitution."""

    names: list[str]
    sizes: list[Any]  # ints, or expressions over the kernel's size arguments
    syms: list[sympy.Symbol]
    subs: dict[sympy.Symbol, sympy.Expr]

    @property
    def numel(self) -> Any:
        n: Any = 1
        for s in self.sizes:
            n = static(n * s)
        return n


@dataclass
class _Red:
    """One reduction as rendered: its C names and accumulator type."""

    r: Reduction
    info: Reducer
    name: str  # the result (what LocalRef(r.name) reads)
    acc: str
    T: str  # accumulator C type
    acc_dt: torch.dtype
    nan: bool  # keeps a NaN flag {name}_nan
    idx: str  # position (argmax/argmin)
    part: str  # per-thread partials (split variant)
    ipart: str


@dataclass
class _StageInfo:
    st: Stage
    dims: _Dims
    reds: list[_Red]


class _KernelRenderer:
    def __init__(self, target: EmitterTarget, kernel: Kernel) -> None:
        self.t, self.k = target, kernel
        self.names = Names()
        self.fn_name = self.names.take(kernel.name)
        for s in kernel.size_args:  # a size argument keeps its name (indices print it)
            if self.names.take(s.name) != s.name:
                raise sdk.LoweringError(
                    f"{target.name}: size argument {s.name} clashes with a name"
                )
        self.bufs = {a.name: self.names.take(a.name) for a in kernel.args}
        self.loop_names: dict[sympy.Symbol, str] = {}
        self.if_clause = ""  # the parallel row loop's OpenMP if clause (symbolic sizes)
        self.em = Emitter(target, kernel, self.names, self.bufs)

    # -- shared pieces
    def _dims(self, vars_: tuple, sizes: tuple, exprs: list[sympy.Expr]) -> _Dims:
        for v, s in zip(vars_, sizes):
            self.em.ranges[v] = (0, static(s - 1))
        dims, subs = merge_dims(list(zip(vars_, (static(s) for s in sizes))), exprs)
        names, syms = [], []
        for v, _ in dims:
            if v not in self.loop_names:  # one symbol: one name (stages never nest)
                self.loop_names[v] = self.names.take(v.name)
            c = self.loop_names[v]
            if c != v.name:
                subs[v] = var(c)
            names.append(c)
            syms.append(var(c))
        return _Dims(names, [s for _, s in dims], syms, subs)

    @staticmethod
    def _arg_pos(st: Stage) -> sympy.Expr:
        """Row-major position within the stage's inner ranges."""
        pos, stride = sympy.Integer(0), 1
        for v, s in reversed(list(zip(st.vars, st.sizes))):
            pos += stride * v
            stride = static(stride * s)
        return pos

    def _index_exprs(self, stages: list[Stage]) -> list[sympy.Expr]:
        """Every index of ``stages`` (:func:`sdk.ir.loops.index_exprs`), and the position an
        arg reduction (argmax) reports."""
        args = [
            self._arg_pos(st)
            for st in stages
            if any(self.t.reducer(r.op).arg for r in st.reductions)
        ]
        return index_exprs(stages) + args

    def _stores(self, st: Stage) -> list[str]:
        out = []
        for s in st.stores:
            idx, _ = self.em.index(s.index)
            out.append(
                f"{self.bufs[s.buffer]}[{print_index(idx, 'c')}] = {self.em.memo[s.value][0]};"
            )
        return out

    # -- whole kernel
    def render(self) -> str:
        k = self.k
        for st in k.stages:
            for r in st.reductions:
                self.t.reducer(r.op)  # NotImplementedError before any work
        exprs = self._index_exprs(k.stages)
        if any(st.vars for st in k.stages):
            body = self._reduction_kernel(exprs)
        else:
            body = self._pointwise_kernel(exprs)
        t = self.t
        params = ", ".join(
            [
                f"{'const ' if a.role == 'in' else ''}{t.ctype(a.layout.dtype)}* {self.bufs[a.name]}"
                for a in k.args
            ]
            + [f"const int64_t {s.name}" for s in k.size_args]
        )
        ret = "void"
        if self.em.has_checks:
            ret = "int64_t"
            body = [
                "int64_t* const sdk_err = sdk_index_errors();  // cleared; set by a bad index",
                *body,
                "return sdk_err[0];",
            ]
        return "\n".join(
            self._header()
            + [
                t.spelling.head.format(ret=ret, name=self.fn_name, params=params) + " {",
                *_indent(body),
                "}",
                "",
            ]
        )

    def _header(self) -> list[str]:
        k = self.k
        out = [f"// kernel {k.name}"]
        out += [f"//   from {o}".replace("\n", " ") for o in k.origins]
        if k.vars:
            out.append("// outer: " + ", ".join(f"{v} < {s}" for v, s in zip(k.vars, k.sizes)))
        for i, st in enumerate(k.stages):
            rng = ", ".join(f"{v} < {s}" for v, s in zip(st.vars, st.sizes)) or "-"
            what = [f"{r.name} = {r.op}" for r in st.reductions] + [
                f"store {s.buffer}" for s in st.stores
            ]
            out.append(f"// stage {i}: inner {rng}: {'; '.join(what)}")
        return out

    # -- pointwise: one stage (or several) without inner ranges
    def _pointwise_kernel(self, exprs: list[sympy.Expr]) -> list[str]:
        k, em = self.k, self.em
        dims = self._dims(k.vars, k.sizes, exprs)
        em.subs = dims.subs
        n = len(dims.names)
        # symbolic sizes: the parallel loop, with OpenMP's if clause deciding at run time
        parallel = n > 0 and (not is_static(dims.numel) or dims.numel >= PARALLEL_MIN_WORK)
        # parallel: level 1 is a block's outer point, level 2 the innermost loop;
        # serial: one level per loop
        levels = [1] * (n - 1) + [2] if parallel else list(range(1, n + 1))
        for s, lvl in zip(dims.syms, levels):
            em.levels[s] = lvl
        em.deepest = levels[-1] if n else 0
        em.simd_level = em.deepest if n else None
        body: list[str] = []
        for st in k.stages:  # stages without inner ranges run one after the other
            em.emit([s.value for s in st.stores])
            body += em.take_block(em.deepest) + self._stores(st)
        top = em.take_block(0)
        if n == 0:
            return top + body
        decls, clauses, after = em.take_simd_checks()
        simd = " ".join(["simd", *clauses])
        if not parallel:
            nest = body
            for i in range(n - 1, -1, -1):
                if i == n - 1:
                    nest = (
                        decls + _loop(dims.names[i], "0", c_size(dims.sizes[i]), nest, simd) + after
                    )
                else:
                    content = em.take_block(i + 1) + nest
                    nest = _loop(dims.names[i], "0", c_size(dims.sizes[i]), content)
            return top + nest
        inner, isize = dims.names[-1], dims.sizes[-1]
        nblk = -(-isize // BLOCK) if is_static(isize) else FloorDiv(isize + BLOCK - 1, BLOCK)
        outer = list(zip(dims.names[:-1], dims.sizes[:-1]))
        units = static(math.prod(dims.sizes[:-1]) * nblk)
        pre = _decompose("p", outer, nblk) if outer else []
        if not is_static(nblk) or nblk > 1:
            pre += [
                f"const int64_t lo = {'(p % ' + c_size(nblk) + ')' if outer else 'p'} * {BLOCK};",
                f"const int64_t hi = {self.t.spelling.imin.format(a=f'lo + {BLOCK}', b=c_size(isize))};",
            ]
            lo, hi = "lo", "hi"
        else:
            lo, hi = "0", c_size(isize)
        unit = pre + em.take_block(1) + decls + _loop(inner, lo, hi, body, simd) + after
        blk = min(BLOCK, isize) if is_static(isize) else BLOCK
        return (
            top
            + [f"// {units} blocks of up to {blk} elements"]
            + _loop(
                "p",
                "0",
                c_size(units),
                unit,
                "parallel for schedule(static)" + _when_large(dims.numel),
            )
        )

    # -- reductions and multi-stage kernels
    def _reduction_kernel(self, exprs: list[sympy.Expr]) -> list[str]:
        k, em = self.k, self.em
        dims = self._dims(k.vars, k.sizes, exprs)
        self.outer_subs = dims.subs
        for s in dims.syms:
            em.levels[s] = 1
        self.stages = [self._prepare(st) for st in k.stages]
        rows = dims.numel
        # how to parallelize: from the sizes of the compiling call (``numel_hint``); every
        # variant is right for every size
        rows_hint = numel_hint(dims.sizes)
        inner = max(numel_hint(si.dims.sizes) for si in self.stages)
        work = rows_hint * sum(numel_hint(si.dims.sizes) for si in self.stages)
        work_expr = static(rows * sum(static(si.dims.numel) for si in self.stages))
        parallel = work >= PARALLEL_MIN_WORK or not is_static(work_expr)
        self.if_clause = _when_large(work_expr)
        split = (
            parallel
            and rows_hint < SPLIT_MAX_OUTER
            and inner >= SPLIT_MIN_INNER
            and all(red.info.arg or red.info.combine for si in self.stages for red in si.reds)
        )
        if self._columns_fit(dims):
            columns = self._columns_variant(dims, parallel)  # (first: it emits level 0 too)
            return em.take_block(0) + columns
        outer = list(zip(dims.names, dims.sizes))
        one_row = is_static(rows) and rows == 1
        variants: list[list[str]] = []
        if not (split and one_row):
            variants.append(self._rows_variant(outer, rows, parallel and not one_row))
        if split:
            variants.append(self._split_variant(outer, rows))
        top = em.take_block(0)
        if len(variants) == 1:
            return top + variants[0]
        return top + [
            f"if ({c_size(rows)} >= 4 * omp_get_max_threads()) {{",
            "  // enough rows: each thread reduces whole rows",
            *_indent(variants[0]),
            "} else {",
            "  // few long rows: all threads reduce each row",
            *_indent(variants[1]),
            "}",
        ]

    def _columns_fit(self, dims: _Dims) -> bool:
        """Whether this kernel is a column reduction for :meth:`_columns_variant`: one outer
        dimension, one stage reducing (sum, prod) over one inner dimension, then stages that
        only store once per row; every element it reads or writes is contiguous along the
        outer dimension and strided along the inner one (a bias gradient: a column sum of
        a row-major matrix, fused with the stores of the matrix it sums). Sizes static or
        symbolic (``dynamic=True`` graphs sum a symbolic count of rows: the form is chosen
        by the sizes' hints and right at every size), no indirect loads."""
        first, *rest = self.stages
        if len(dims.names) != 1 or not first.reds or len(first.dims.names) != 1:
            return False
        if any(si.reds or si.dims.names for si in rest):
            return False
        if any(red.info.omp not in ("+", "*") or red.info.arg or red.nan for red in first.reds):
            return False
        cols, rows = dims.sizes[0], first.dims.sizes[0]
        if size_hint(cols) < 16 or size_hint(rows) < 2:
            return False
        x, r = dims.syms[0], first.dims.syms[0]
        subs = {**self.outer_subs, **first.dims.subs}
        roots = [red.r.value for red in first.reds] + [st.value for st in first.st.stores]
        if any(isinstance(n, Load) and n.binds for n in walk(roots)):
            return False
        strided = False
        for e in self._index_exprs([first.st]):
            e = sympy.expand(sympy.sympify(e).xreplace(subs))
            try:  # (other symbols, sizes, are the coefficients')
                poly = sympy.Poly(e, x, r)
            except sympy.PolynomialError:
                return False
            if poly.total_degree() > 1:
                return False
            cx, cr = poly.coeff_monomial(x), poly.coeff_monomial(r)
            if (cx != 0 and cx != 1) or (cr != 0 and not _above_one(cr)):
                return False
            strided = strided or cr != 0
        return strided

    def _columns_variant(self, dims: _Dims, parallel: bool) -> list[str]:
        """A column reduction (:meth:`_columns_fit`) as blocks of :data:`COLUMNS` columns,
        one block a thread: rows outer, the block's contiguous columns inner (``omp
        simd``), one accumulator per column. The rows variant walks each column down its
        rows, strided (gathers and scatters). Each column here adds its rows in order, the
        same on every run and thread count; the rows variant's ``simd`` reduction adds them
        in vector lanes, so the two may differ in the last bits."""
        em, t = self.em, self.t
        first, *rest = self.stages
        if t.accumulate_columns is not None:  # (one chain of additions per column)
            for i, red in enumerate(first.reds):
                acc_dt = t.accumulate_columns(t.compute(red.r.dtype))
                first.reds[i] = replace(red, acc_dt=acc_dt, T=t.ctype(acc_dt))
        x, r = dims.syms[0], first.dims.syms[0]
        xn, rn = dims.names[0], first.dims.names[0]
        cols, nrows = dims.sizes[0], first.dims.sizes[0]
        em.subs = {**self.outer_subs, **first.dims.subs}
        em.levels[r], em.levels[x] = 1, 2
        em.deepest = em.simd_level = 2
        em.emit([red.r.value for red in first.reds] + [s.value for s in first.st.stores])
        reds = [replace(red, acc=f"{red.acc}[{xn} - xb]") for red in first.reds]
        updates = []
        for red in reds:
            v = em.value(red.r.value, red.acc_dt)
            updates.append(red.info.update.format(acc=red.acc, v=v, idx="", pos=""))
        per_row, per_col = em.take_block(1), em.take_block(2)
        decls, clauses, after = em.take_simd_checks()
        simd = " ".join(["simd", *clauses])
        inner = _loop(xn, "xb", "xe", per_col + updates + self._stores(first.st), simd)
        block = [
            f"const int64_t xe = {t.spelling.imin.format(a=f'xb + {COLUMNS}', b=c_size(cols))};"
        ]
        for red in first.reds:
            block.append(f"{red.T} {red.acc}[{COLUMNS}];")
        init = [f"{red.acc} = {red.info.initial(red.acc_dt)};" for red in reds]
        block += _loop(xn, "xb", "xe", init)
        block += [f"// {', '.join(f'{r_.name} = {r_.op}' for r_ in first.st.reductions)}"]
        block += _loop(rn, "0", c_size(nrows), per_row + decls + inner + after)
        em.forget_from(1)
        for red in first.reds:
            em.memo[LocalRef(red.r.name, red.r.dtype)] = (red.name, 1)
        em.levels[x] = 1
        em.deepest, em.simd_level = 1, None
        em.subs = dict(self.outer_subs)
        last = [self._final(red, False) for red in reds]
        for si in rest:  # stores once per column
            em.emit([s.value for s in si.st.stores])
            last += em.take_block(1) + self._stores(si.st)
        em.forget_from(1)
        block += _loop(xn, "xb", "xe", last)
        pragma = "#pragma omp parallel for schedule(static)" + self.if_clause if parallel else None
        head = f"for (int64_t xb = 0; xb < {c_size(cols)}; xb += {COLUMNS}) {{"
        out = [f"// column blocks of up to {COLUMNS}: rows outer, the block's columns inner"]
        return out + ([pragma] if pragma else []) + [head, *_indent(block), "}"]

    def _prepare(self, st: Stage) -> _StageInfo:
        dims = self._dims(st.vars, st.sizes, self._index_exprs([st]))
        if st.vars and not dims.names:  # every inner range has size 1: keep one loop
            dims = _Dims([self.names.take("r")], [1], [], dims.subs)
        reds = []
        for r in st.reductions:
            info = self.t.reducer(r.op)
            acc_dt = self.t.accumulate(self.t.compute(r.value.dtype if info.arg else r.dtype))
            if r.op in ("any", "all"):
                acc_dt = BOOL
            name = self.names.take(r.name)
            take = self.names.take
            take(name + "_nan")
            reds.append(
                _Red(
                    r,
                    info,
                    name,
                    take(name + "_acc"),
                    "int" if acc_dt == BOOL else self.t.ctype(acc_dt),
                    acc_dt,
                    info.nan_flag and acc_dt.is_floating_point,
                    take(name + "_idx"),
                    take(name + "_part"),
                    take(name + "_ipart"),
                )
            )
        return _StageInfo(st, dims, reds)

    def _row_loop(
        self, outer: list[tuple[str, int]], rows: int, body: list[str], pragma: str | None
    ) -> list[str]:
        if not outer:
            return ["{", *_indent(body), "}"]
        if len(outer) == 1:
            return _loop(outer[0][0], "0", c_size(rows), body, pragma)
        return _loop("p", "0", c_size(rows), _decompose("p", outer) + body, pragma)

    def _rows_variant(self, outer: list[tuple[str, int]], rows: int, parallel: bool) -> list[str]:
        body: list[str] = []
        for si in self.stages:
            body += self._stage(si, None)
        self.em.forget_from(1)
        return self._row_loop(
            outer,
            rows,
            body,
            "parallel for schedule(static)" + self.if_clause if parallel else None,
        )

    def _split_variant(self, outer: list[tuple[str, int]], rows: int) -> list[str]:
        # partials double-buffered across rows
        slot = "(p & 1)" if not is_static(rows) or rows > 1 else "0"
        body: list[str] = []
        for si in self.stages:
            body += self._stage(si, slot)
        self.em.forget_from(1)
        decl = ["const int nt = omp_get_max_threads();"]
        partials = self.t.spelling.partials
        for si in self.stages:
            for red in si.reds:
                decl.append(partials.format(T=red.T, name=red.part, n="2 * nt * 16"))
                if red.info.arg:
                    decl.append(partials.format(T="int64_t", name=red.ipart, n="2 * nt * 16"))
        if len(outer) == 1:
            body = [f"const int64_t {outer[0][0]} = p;"] + body
        elif outer:
            body = _decompose("p", outer) + body
        region = ["const int tid = omp_get_thread_num(), nth = omp_get_num_threads();"]
        region += _loop("p", "0", c_size(rows), body) if outer else body
        return decl + ["#pragma omp parallel", "{", *_indent(region), "}"]

    def _stage(self, si: _StageInfo, slot: str | None) -> list[str]:
        """One stage for the current row. ``slot``: the split variant's partial slot
        (every thread takes a chunk of the stage's first inner dimension); None: the
        whole row runs on this thread."""
        em, st, dims = self.em, si.st, si.dims
        n = len(dims.names)
        em.subs = {**self.outer_subs, **dims.subs}
        for i, s in enumerate(dims.syms):
            em.levels[s] = 2 + i
        em.deepest = 1 + n
        em.simd_level = 1 + n if n else None
        em.emit([r.value for r in st.reductions] + [s.value for s in st.stores])
        what = ", ".join(f"{r.name} = {r.op}" for r in st.reductions) or "stores"
        over = f" over {' x '.join(map(str, dims.sizes))}" if n else ", once per row"
        out = [f"// {what}{over}"] + em.take_block(1)
        if not n:  # stores once per row
            stores = self._stores(st)
            return out + (["if (tid == 0) {", *_indent(stores), "}"] if slot else stores)
        decls, clauses, updates = [], [], []
        chunk_start = "lo" if slot else "0"
        if slot and n > 1:
            chunk_start = f"lo * {c_size(static(math.prod(dims.sizes[1:])))}"
        for red in si.reds:
            info = red.info
            if red.r.op in ("any", "all"):
                v = truth(em.value(red.r.value, None), self.t.compute(red.r.value.dtype))
            else:
                v = em.value(red.r.value, red.acc_dt)
            decls.append(f"{red.T} {red.acc} = {info.initial(red.acc_dt)};")
            pos = ""
            if info.arg:
                decls.append(f"int64_t {red.idx} = {chunk_start};")
                pos = print_index(em.index(self._arg_pos(st))[0], "c")
            if red.nan:
                decls.append(f"int {red.name}_nan = 0;")
                clauses.append(f"reduction(|:{red.name}_nan)")
                updates.append(f"{red.name}_nan |= {v} != {v};")
            if info.omp:
                clauses.append(f"reduction({info.omp}:{red.acc})")
            updates.append(info.update.format(acc=red.acc, v=v, idx=red.idx, pos=pos))
        simd = all(red.info.omp for red in si.reds)  # argmax/argmin: scalar loop
        nest = em.take_block(1 + n) + updates + self._stores(st)
        check_decls, check_clauses, check_after = em.take_simd_checks()
        decls += check_decls
        clauses += check_clauses
        for i in range(n - 1, -1, -1):
            lo, hi = ("lo", "hi") if slot and i == 0 else ("0", c_size(dims.sizes[i]))
            pragma = " ".join(["simd", *clauses]) if simd and i == n - 1 else None
            nest = _loop(
                dims.names[i], lo, hi, nest if i == n - 1 else em.take_block(2 + i) + nest, pragma
            )
        nest += check_after
        if slot is None:
            out += decls + nest + [self._final(red, red.nan) for red in si.reds]
        else:
            chunk = ["int64_t lo, hi;", self.t.spelling.chunk.format(n=c_size(dims.sizes[0]))]
            publish, mine = [], _slot(slot, "tid")
            for red in si.reds:
                val = f"{red.name}_nan ? NAN : {red.acc}" if red.nan else red.acc
                publish.append(f"{red.part}[{mine}] = {val};")
                if red.info.arg:
                    publish.append(f"{red.ipart}[{mine}] = {red.idx};")
            out += ["{", *_indent(chunk + decls + nest + publish), "}"]
            if si.reds:
                out += ["#pragma omp barrier"] + self._combine(si.reds, slot)
        em.forget_from(2)
        for red in si.reds:
            em.memo[LocalRef(red.r.name, red.r.dtype)] = (red.name, 1)
        return out

    def _final(self, red: _Red, nan: bool) -> str:
        r = red.r
        if red.info.arg:
            val = red.idx
        elif r.dtype == BOOL:
            val = f"{red.acc} != 0"
        else:
            val = f"{red.name}_nan ? NAN : {red.acc}" if nan else red.acc
            if r.dtype in self.t.half:
                val = self.t.half[r.dtype][1].format(x=val)
        return f"const {self.t.ctype(r.dtype)} {red.name} = {val};"

    def _combine(self, reds: list[_Red], slot: str) -> list[str]:
        """Fold the threads' partials in thread order (the same on every thread)."""
        out = []
        for red in reds:
            first, at = f"[{_slot(slot, '0')}]", f"[{_slot(slot, 't')}]"
            out.append(f"{red.T} {red.acc} = {red.part}{first};")
            if red.info.arg:
                out.append(f"int64_t {red.idx} = {red.ipart}{first};")
                step = red.info.update.format(
                    acc=red.acc, v=f"{red.part}{at}", idx=red.idx, pos=f"{red.ipart}{at}"
                )
            else:
                step = red.info.combine.format(acc=red.acc, p=f"{red.part}{at}", T=red.T)
            out += [f"for (int t = 1; t < nth; ++t) {step}", self._final(red, False)]
        return out


def render(target: EmitterTarget, kernel: Kernel) -> sdk.KernelSource:
    """``kernel`` as one function of ``target``'s language named after it, taking one
    pointer per buffer in ``kernel.args`` order (each tensor's ``data_ptr()``, from which
    the kernel's indices count), then one ``int64_t`` per size argument.

    ``meta``: ``nargs`` (pointers), ``nsizes`` (present when there are size arguments) and
    ``index_checks`` (present only when True: the kernel checks indirect indices and returns
    ``int64_t``, nonzero when one was out of range; other kernels are ``void``)."""
    r = _KernelRenderer(target, kernel)
    source = r.render()
    meta: dict = {"nargs": len(kernel.args)}
    if kernel.size_args:  # symbolic sizes: int64_t arguments after the pointers
        meta["nsizes"] = len(kernel.size_args)
    if r.em.has_checks:
        meta["index_checks"] = True
    return sdk.KernelSource(kernel.name, target.language, source, r.fn_name, meta=meta)


def truth(x: str, src: torch.dtype) -> str:
    """``x`` (of type ``src``) as a C truth value: itself for bool, else ``(x != 0)``."""
    return x if src == BOOL else f"({x} != 0)"

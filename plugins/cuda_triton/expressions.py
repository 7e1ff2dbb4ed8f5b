"""Expression emission for the Triton renderer: IR expressions, loads and stores as lines of a
kernel body, on top of a :class:`.planning.KernelPlan`.

Every expression node becomes one ``tmpN = ...`` line, memoised on the node (the common
subexpression elimination); each node knows the block axes it depends on (``x``, ``r`` or
none), which give its shape and the mask of its loads, and in a looped stage the lines
without ``r`` go before the loop (``pre``) and the others into it (``body``). Loads never
leave their buffer (indirect indices are asserted and clamped, unproven direct ones
clamped). :mod:`.reductions` and :mod:`.render` write kernel bodies with it.
"""

from __future__ import annotations

import math
import re

import sympy
import torch

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
    cast_to,
    tl_type,
)
from .planning import INT32_LIMIT, KernelPlan, StagePlan, unit_step

#: the integer ops :meth:`ExpressionWriter._narrow` computes in 32 bits (those with an
#: interval rule in ``ir.value_bounds``; ``cast`` from another integer)
_NARROW_OPS = frozenset(
    {"add", "sub", "mul", "neg", "maximum", "minimum", "floordiv", "remainder", "where", "cast"}
)


def _fits_32_bits(bounds: tuple[int, int] | None) -> bool:
    return bounds is not None and bounds[0] >= -INT32_LIMIT and bounds[1] <= INT32_LIMIT


def py_size(x: object) -> str:
    """A size as Triton (Python) source: a number, or an expression over size arguments."""
    return ir.print_size(x, "python")


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


#: the eviction hint of a streaming load until :func:`settle_evictions` decides it
_STREAM = "stream:"
_STREAM_RE = re.compile(r"eviction_policy='" + _STREAM + r"(\w+)'")


def settle_evictions(lines: list[str]) -> list[str]:
    """The body of one kernel function with each streaming load's eviction hint decided:
    ``evict_first`` on the last load of its buffer, ``evict_last`` on the loads before it
    (the buffer is read again in this kernel: Inductor's rule)."""
    if not any(_STREAM in line for line in lines):
        return lines  # (the hints off, or no loop)
    last: dict[str, int] = {}
    for i, line in enumerate(lines):
        for m in _STREAM_RE.finditer(line):
            last[m.group(1)] = i

    def settle(i: int, line: str) -> str:
        return _STREAM_RE.sub(
            lambda m: (
                "eviction_policy='evict_first'"
                if last[m.group(1)] == i
                else "eviction_policy='evict_last'"
            ),
            line,
        )

    return [settle(i, ln) if _STREAM in ln else ln for i, ln in enumerate(lines)]


def _negative_zero(node: ir.Const) -> bool:
    return (
        node.dtype.is_floating_point
        and node.value == 0
        and math.copysign(1.0, node.value) < 0
        and node.dtype.itemsize in (2, 4, 8)
    )


class ExpressionWriter(KernelPlan):
    """Writes the expressions, loads and stores of one kernel's bodies (see the module doc)."""

    def __init__(self, kernel: ir.Kernel, *, debug: bool = False) -> None:
        super().__init__(kernel)
        self.debug = debug
        self.asserts = False  # device-side index checks: compiled with asserts on
        self.clamped = 0  # direct loads whose bounds could not be proven: clamped
        self.helpers: set[str] = set()
        self._n = 0
        self._narrowed: dict[ir.Expr, bool] = {}  # int64 values computed in 32 bits (_narrow)

    def _deps(self, node: ir.Expr, memo: dict) -> frozenset[str]:
        """The block axes ``node`` depends on: ``x`` (rows), ``r`` (the inner ranges)."""
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
        """The name of ``node``'s value, of ``node``'s dtype."""
        name = self._emit(node)
        if not self._narrow(node):
            return name
        # (memoised where the 32-bit name is: a loop's names end with its stage)
        deps = self._deps(node, self.depmemo)
        memo = self.memo_r if "r" in deps else self.memo_x
        wide = memo.get(("wide", node))
        if wide is None:
            wide = memo[("wide", node)] = self._tmp()
            self._put(f"{wide} = {name}.to(tl.int64)", deps)
        return wide

    def _narrow(self, node: ir.Expr) -> bool:
        """Whether the int64 ``node`` is computed in 32 bits: in a kernel of 32-bit indices,
        where its value and every int64 value it is computed from fit (``ir.value_bounds``;
        a pooling window's rows and columns, floor divisions of an index). A GPU divides
        64-bit integers in many instructions, 32-bit ones in a few."""
        hit = self._narrowed.get(node)
        if hit is None:
            hit = self._narrowed[node] = (
                not self.int64
                and node.dtype == torch.int64
                and (
                    isinstance(node, (ir.Const, ir.IndexValue))
                    or (
                        isinstance(node, ir.Op)
                        and node.name in _NARROW_OPS
                        and all(
                            self._narrow(a)
                            for a in node.args[(1 if node.name == "where" else 0) :]
                            if a.dtype == torch.int64
                        )
                    )
                )
                and _fits_32_bits(ir.value_bounds(node, self.ranges))
            )
        return hit

    def _emit(self, node: ir.Expr) -> str:
        """The name of ``node``'s value: of int32 where :meth:`_narrow`, else of its dtype."""
        deps = self._deps(node, self.depmemo)
        memo = self.memo_r if "r" in deps else self.memo_x
        hit = memo.get(node)
        if hit is not None:
            return hit
        narrow = self._narrow(node)
        if isinstance(node, ir.Const):
            name = self._tmp()
            if _negative_zero(node):
                # tl.full(..., -0.0, ...) is +0.0 on a GPU (a zero fill): -0.0's bits
                bits = {2: "tl.int16", 4: "tl.int32", 8: "tl.int64"}[node.dtype.itemsize]
                low = -(2 ** (8 * node.dtype.itemsize - 1))
                self.consts.append(
                    f"{name} = tl.full({self.shape1}, {low}, {bits})"
                    f".to({tl_type(node.dtype)}, bitcast=True)"
                )
            else:
                dt = torch.int32 if narrow else node.dtype
                self.consts.append(
                    f"{name} = tl.full({self.shape1}, {_literal(node.value, node.dtype)}, "
                    f"{tl_type(dt)})"
                )
        elif isinstance(node, ir.LocalRef):
            name = self.local[node.name]
        elif isinstance(node, ir.IndexValue):
            name = self._tmp()
            dt = torch.int32 if narrow else node.dtype
            if deps:
                text = ir.print_index(node.expr, "python")
                self._put(f"{name} = ({text}).to({tl_type(dt)})", deps)
            else:
                self._put(
                    f"{name} = tl.full({self.shape1}, "
                    f"{ir.print_index(node.expr, 'python')}, {tl_type(dt)})",
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
            v = self._emit(e)  # (32 bits where narrowed: this kernel's indices are)
            edeps = self._deps(e, self.depmemo)
            n = ir.static(extent)  # an int, or a symbolic size (>= 2)
            known = ir.value_bounds(e, ranges) if ir.is_static(n) else None
            if ir.in_range(known, n):
                # computed in range over every loop value (a pooling window's row): no
                # check, no clamp
                if not re.fullmatch(r"\w+", v):
                    name = self._tmp()
                    self._put(f"{name} = {v}", edeps)
                    v = name
                subs[sym] = ir.var(v)
                ranges[ir.var(v)] = known
                continue
            mask = self._mask(edeps)
            ok = f"(0 <= {v}) & ({v} < {py_size(n)})"
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
            self._put(
                f"{clamped} = tl.minimum(tl.maximum({v}, 0), {py_size(ir.static(n - 1))})", edeps
            )
            subs[sym] = ir.var(clamped)
            ranges[ir.var(clamped)] = (0, ir.static(n - 1))
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
            text = f"tl.minimum(tl.maximum({text}, {py_size(lo)}), {py_size(hi)})"
            self.clamped += 1
        mask = self._mask(deps)
        if mask and not index.free_symbols:
            # one element for every point (a gathered load of an expanded scalar, sum's
            # gradient): the pointer a block, as the mask is
            text = f"tl.full({self._shape(deps)}, {text}, {self.itype})"
        ptr = self.ptr[node.buffer]
        hint = self._eviction(index, ptr) if self.looping and "r" in deps else ""
        if mask:
            self._put(f"{name} = tl.load({ptr} + {text}, {mask}, other=0{hint})", deps)
        else:
            self._put(f"{name} = tl.load({ptr} + {text}{hint})", deps)
        return name

    def _eviction(self, index: sympy.Expr, ptr: str) -> str:
        """The L2 eviction hint of a load inside a reduction loop that moves with the loop
        (:data:`.heuristics.EVICTION_HINTS`), as Inductor gives it: a load contiguous along
        one of the kernel's variables streams, so ``evict_first`` where it is the buffer's
        last load in the kernel and ``evict_last`` where a later one reads it again (both
        settled by :func:`settle_evictions`, once the kernel's body is whole); any other
        load (strided, gathered) ``evict_last``, as its lines are likely read again."""
        if not heuristics.EVICTION_HINTS:
            return ""
        plain = index if index.has(ir.FloorDiv, ir.Mod) else sympy.expand(index)
        if unit_step(plain, self.xsyms | self.rsyms) is not None:
            return f", eviction_policy='{_STREAM}{ptr}'"
        return ", eviction_policy='evict_last'"

    def _op(self, node: ir.Op) -> str:
        name = node.name
        args = [self._emit(a) for a in node.args]
        adt = [torch.int32 if self._narrow(a) else a.dtype for a in node.args]
        out_cast = None
        narrow = self._narrow(node)
        if narrow:  # the op of 64-bit ints, on 32-bit ones
            dt = torch.int32
            first = 1 if name == "where" else 0
            if first:
                args[0] = args[0] if adt[0] == torch.bool else f"({args[0]} != 0)"
            args[first:] = [
                a if d == dt else cast_to(dt, a, d) for a, d in zip(args[first:], adt[first:])
            ]
        elif name == "cast":
            dt = node.dtype
        elif name in LOGICAL_OPS:
            args = [a if d == torch.bool else f"({a} != 0)" for a, d in zip(args, adt)]
            dt = torch.bool
        elif name == "where":
            dt = node.dtype
            args[0] = args[0] if adt[0] == torch.bool else f"({args[0]} != 0)"
            args[1:] = [a if d == dt else cast_to(dt, a, d) for a, d in zip(args[1:], adt[1:])]
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
            args = [a if d == dt else cast_to(dt, a, d) for a, d in zip(args, adt)]
        if dt == torch.float64:
            table = CODE_FOR_OP_F64
        elif dt.is_floating_point:
            table = CODE_FOR_OP
        else:
            table = CODE_FOR_OP_INT
        fn = table.get(name)
        if fn is None:
            raise NotImplementedError(f"op {name} on {dt} has no Triton rendering")
        if name == "cast":
            text = cast_to(dt, args[0], adt[0])
        else:
            text = fn(dt, *args)
        for h in re.findall(r"\b(_[a-z_]+)\(", text):
            self._need(h)
        return cast_to(out_cast, text) if out_cast is not None else text

    def _need_named(self, text: str) -> None:
        """Need every helper ``text`` names (a reduction's combine or final form)."""
        for h in re.findall(r"\b(_[a-z_]+)\b", text):
            self._need(h)

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
        self.looping = False  # emitting the body of a reduction loop
        self.rfirst = "rbase"  # a lane's first inner index (split: its chunk's)

    def _xheader(self, lines: list[str], pid: str = "tl.program_id(0)") -> None:
        pid = f"{pid}.to(tl.int64)" if self.int64 else pid
        arange = "tl.arange(0, XBLOCK)" + ("[:, None]" if self.two_d else "")
        lines.append(f"xindex = {pid} * XBLOCK + {arange}")
        lines.append(f"xmask = xindex < {py_size(self.xnumel)}")
        self._decompose(lines, "xindex", self.xvars)

    def _decompose(self, lines: list[str], index: str, vs: list[tuple[str, int]]) -> None:
        stride = 1
        for i, (n, s) in reversed(list(enumerate(vs))):
            e = index if stride == 1 else f"({index} // {py_size(stride)})"
            lines.append(f"{n} = {e} % {py_size(s)}" if i else f"{n} = {e}")
            stride = ir.static(stride * s)

    def _stage_vars(self, st: StagePlan) -> list[tuple[str, int]]:
        return list(zip(st.vars, st.sizes))

    def _stores(self, st: StagePlan) -> None:
        for buf, idx, val in st.stores:
            self._store(buf, idx, val)

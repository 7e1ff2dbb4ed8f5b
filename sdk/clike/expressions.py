"""Expression emission of :mod:`sdk.clike`: the IR expressions of one kernel as ``const T tN
= ...;`` lines (CSE on the hashable IR nodes), each in the block of the outermost loop level
it depends on; loads clamped where their bounds are unproven, and indirect indices checked
(see :mod:`sdk.clike.emit`, "Index checks"). :mod:`sdk.clike.emit` places the blocks in its
loop nests.

The emitter sits below :class:`sdk.clike.CTarget` (whose :meth:`~sdk.clike.CTarget.render`
runs it), so it names what it asks of a target, :class:`EmitterTarget`, not the class.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import sympy
import torch

import sdk
from sdk.ir import (
    Const,
    Expr,
    IndexValue,
    Kernel,
    Load,
    LocalRef,
    Op,
    in_range,
    index_bounds,
    is_static,
    print_index,
    print_size,
    static,
    value_bounds,
    var,
    walk,
)

from .c import Reducer, Spelling

F32, I64 = torch.float32, torch.int64

#: Ops whose operands are not converted to the result's type first.
OWN_OPERAND_TYPES = frozenset({"cast", "where", "rand", "randn", *sdk.ir.PREDICATES})


class EmitterTarget(Protocol):
    """What the emitter asks of a target (:class:`sdk.clike.CTarget` answers it): how each op,
    reduction, type and literal is spelt, and the structural :class:`~sdk.clike.Spelling`."""

    @property
    def name(self) -> str: ...
    @property
    def language(self) -> str: ...
    @property
    def spelling(self) -> Spelling: ...
    @property
    def half(self) -> Mapping[torch.dtype, tuple[str, str]]: ...
    @property
    def accumulate(self) -> Callable[[torch.dtype], torch.dtype]: ...
    @property
    def accumulate_columns(self) -> Callable[[torch.dtype], torch.dtype] | None: ...
    def op(self, name: str) -> Callable[..., str]: ...
    def reducer(self, name: str) -> Reducer: ...
    def ctype(self, dtype: torch.dtype) -> str: ...
    def compute(self, dtype: torch.dtype) -> torch.dtype: ...
    def literal(self, value: object, dtype: torch.dtype) -> str: ...


def c_size(x: Any) -> str:
    """A size (an int, or an expression over the kernel's size arguments) as C."""
    return print_size(x, "c")


#: Identifiers a buffer, loop or kernel name must not take: C++ keywords, the names
#: the op table and the helpers call, and the renderer's own locals.
_RESERVED = frozenset(
    """auto bool break case char const continue default do double else enum extern float for goto
    if inline int long register restrict return short signed sizeof static struct switch typedef
    union unsigned void volatile while class namespace new delete template this operator private
    public protected virtual friend using typename true false nullptr std INFINITY NAN INT64_MIN
    fabs fmod pow atan2 copysign floor ceil trunc nearbyint sqrt exp exp2 expm1 log log2 log10
    log1p sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh erf erfc
    p t tid nth nt lo hi""".split()  # noqa: SIM905
)
_RESERVED |= {n + "f" for n in _RESERVED if n.islower() and len(n) > 2}


class Names:
    """Unique C identifiers."""

    def __init__(self) -> None:
        self.used: set[str] = set(_RESERVED)
        self.counter = 0

    def take(self, want: str) -> str:
        base = re.sub(r"\W", "_", want) or "v"
        if base[0].isdigit() or base.startswith("sdk_"):
            base = "v_" + base
        name, n = base, 1
        while name in self.used:
            name, n = f"{base}_{n}", n + 1
        self.used.add(name)
        return name

    def temp(self) -> str:
        while f"t{self.counter}" in self.used:
            self.counter += 1
        name = f"t{self.counter}"
        self.used.add(name)
        return name


class Emitter:
    """Emits the IR expressions of one kernel as ``const T tN = ...;`` lines,
    each into the block of the outermost loop level it depends on."""

    def __init__(
        self, target: EmitterTarget, kernel: Kernel, names: Names, bufs: dict[str, str]
    ) -> None:
        self.t = target
        self.names = names
        self.bufs = bufs
        self.written = {a.name for a in kernel.args if a.role != "in"}
        # elements reachable from each argument's data pointer (at its storage offset)
        self.extent = {a.name: a.layout.storage_size - a.layout.offset for a in kernel.args}
        self.levels: dict[sympy.Symbol, int] = {}  # loop variable -> level
        self.subs: dict[sympy.Symbol, sympy.Expr] = {}  # merged / renamed loop variables
        self.ranges: dict[sympy.Symbol, tuple[int, int]] = {}  # original variables' ranges
        self.deepest = 0
        self.memo: dict[Expr, tuple[str, int]] = {}
        self.converted: dict[tuple[Expr, torch.dtype | None], tuple[str, int]] = {}
        self.blocks: dict[int, list[str]] = defaultdict(list)
        # index checks (see the module doc): the level of the loop that is `omp simd`
        # (None: none is open), the checked bind values of the open scopes, and the
        # unsigned-max reductions that the simd loop must declare and test
        self.simd_level: int | None = None
        self.checked: dict[tuple[Expr, int], tuple[str, int]] = {}
        self.simd_checks: list[tuple[str, int, int]] = []  # (variable, extent, wrap)
        self.has_checks = False
        self.n_bad = 0

    # -- scopes
    def forget_from(self, level: int) -> None:
        """Leave the loops of ``level`` and deeper: their values are out of scope."""
        self.memo = {k: v for k, v in self.memo.items() if v[1] < level}
        self.converted = {k: v for k, v in self.converted.items() if v[1] < level}
        self.checked = {k: v for k, v in self.checked.items() if v[1] < level}
        assert not self.simd_checks, "index checks of a simd loop left behind"
        assert not any(self.blocks[lvl] for lvl in self.blocks if lvl >= level), "unplaced lines"

    def take_block(self, level: int) -> list[str]:
        return self.blocks.pop(level, [])

    def take_simd_checks(self) -> tuple[list[str], list[str], list[str]]:
        """For the simd loop just rendered: the declarations to put before it, its
        ``reduction`` clauses, and the test to put after it."""
        t = self.t.spelling
        decls, clauses, after = [], [], []
        for bad, n, wrap in self.simd_checks:
            decls.append(f"uint64_t {bad} = 0;")
            clauses.append(f"reduction(max:{bad})")
            after.append(
                f"if (__builtin_expect({bad} >= {t.ctor.format(T='uint64_t', x=c_size(n))}, 0)) "
                f"sdk_index_error(sdk_err, {t.ctor.format(T='int64_t', x=bad)}, {c_size(n)}, {wrap});"
            )
        self.simd_checks = []
        return decls, clauses, after

    # -- expressions
    def index(self, e: sympy.Expr) -> tuple[sympy.Expr, int]:
        e = e.xreplace(self.subs)
        return e, max((self.levels.get(s, 0) for s in e.free_symbols), default=0)

    def operand(self, node: Expr, want: torch.dtype | None) -> str:
        """``node``'s value as C, converted to dtype ``want`` (half types to float)."""
        s, _ = self.memo[node]
        d = node.dtype
        if d in self.t.half:
            s, d = self.t.half[d][0].format(x=s), F32
        if want is not None and d != want:
            s = self.t.op("cast")(s, dtype=want, src=d)
        return s

    def value(self, node: Expr, want: torch.dtype | None) -> str:
        """Like :meth:`operand`, but a conversion gets its own ``const`` line."""
        name, lvl = self.memo[node]
        code = self.operand(node, want)
        if code == name or isinstance(node, Const):
            return code
        key = (node, want)
        if key not in self.converted:
            self.converted[key] = (self._line(lvl, want or self.t.compute(node.dtype), code), lvl)
        return self.converted[key][0]

    def _line(self, level: int, dtype: torch.dtype, code: str) -> str:
        name = self.names.temp()
        self.blocks[level].append(f"const {self.t.ctype(dtype)} {name} = {code};")
        return name

    def emit(self, roots: Iterable[Expr]) -> None:
        for node in walk(list(roots)):
            if node not in self.memo:
                self.memo[node] = self._emit(node)

    def _emit(self, node: Expr) -> tuple[str, int]:
        if isinstance(node, Const):
            return self.t.literal(node.value, node.dtype), 0
        if isinstance(node, LocalRef):
            raise sdk.LoweringError(f"{self.t.name}: {node.name} is read before it is reduced")
        if isinstance(node, IndexValue):
            e, lvl = self.index(node.expr)
            code = print_index(e, "c")
            if node.dtype != I64:
                code = self.t.spelling.convert.format(T=self.t.ctype(node.dtype), x=code)
            return self._line(lvl, node.dtype, code), lvl
        if isinstance(node, Load):
            return self._load(node)
        if isinstance(node, Op):
            return self._op(node)
        raise sdk.LoweringError(f"{self.t.name}: cannot render {type(node).__name__}")

    def _load(self, node: Load) -> tuple[str, int]:
        lvl = 0
        subs = dict(self.subs)
        ranges = dict(self.ranges)
        for sym, value, extent in node.binds:
            _, vlvl = self.memo[value]
            lvl = max(lvl, vlvl)
            if not is_static(extent):  # a dimension of symbolic size (>= 2)
                vname = self._checked(value, extent, vlvl)
                ranges[sym] = (0, static(extent - 1))
            elif (known := self._proven(value, extent)) is not None:
                # computed in range over every loop value (a pooling window's row)
                vname = self.operand(value, I64)
                if not re.fullmatch(r"-?\w+", vname):
                    vname = self._line(vlvl, I64, vname)
                ranges[sym] = known
            elif isinstance(extent, (int, sympy.Integer)) and int(extent) >= 0:
                vname = self._checked(value, int(extent), vlvl)
                if int(extent) > 0:
                    ranges[sym] = (0, int(extent) - 1)
            else:
                vname = self.operand(value, I64)
                if not re.fullmatch(r"\w+", vname):
                    vname = self._line(vlvl, I64, vname)
            subs[sym] = sympy.Integer(vname) if vname.lstrip("-").isdigit() else var(vname)
        idx = node.index
        bounds = index_bounds(idx, ranges)
        idx, ilvl = self.index(idx.xreplace(subs))
        lvl = max(lvl, ilvl)
        code = print_index(idx, "c")
        size = self.extent[node.buffer]
        if node.buffer in self.written:
            lvl = self.deepest  # never hoisted above this kernel's stores
        if is_static(size) and size <= 0:
            # an empty buffer (only reached through a reported bind): read nothing
            return self._line(
                lvl, node.dtype, self.t.spelling.ctor.format(T=self.t.ctype(node.dtype), x="0")
            ), lvl
        if not in_range(bounds, size):
            code = f"sdk_clamp_index({code}, {print_size(size - 1, 'c')})"
        return self._line(lvl, node.dtype, f"{self.bufs[node.buffer]}[{code}]"), lvl

    def _proven(self, value: Expr, extent: Any) -> tuple[int, int] | None:
        """Bounds of bind ``value`` over the loop ranges where they prove it inside
        ``[0, extent)``: its load needs no check."""
        known = value_bounds(value, self.ranges)
        return known if in_range(known, extent) else None

    def _checked(self, value: Expr, n: Any, lvl: int) -> str:
        """The name of bind ``value`` clamped into ``[0, n)``; an index outside it is
        reported to the kernel's error slot (see the module doc)."""
        key = (value, n)
        if key in self.checked:
            return self.checked[key][0]
        v = self.operand(value, I64)
        if not re.fullmatch(r"-?\w+", v):
            v = self._line(lvl, I64, v)
        wrap = int(_wraps_negative(value, n))
        self.has_checks = True
        if n == 0:  # nothing is in range
            self.blocks[lvl].append(f"sdk_index_error(sdk_err, {v}, 0, {wrap});")
            name = "0"
        elif lvl == self.simd_level:  # in the simd loop: a reduction, tested after it
            bad = f"sdk_bad{self.n_bad}"
            self.n_bad += 1
            t = self.t.spelling
            self.blocks[lvl].append(
                f"{bad} = {t.umax.format(a=bad, b=t.ctor.format(T='uint64_t', x=v))};"
            )
            self.simd_checks.append((bad, n, wrap))
            name = self._line(lvl, I64, f"sdk_clamp_index({v}, {c_size(static(n - 1))})")
        else:
            name = self._line(lvl, I64, f"sdk_checked_index(sdk_err, {v}, {c_size(n)}, {wrap})")
        self.checked[key] = (name, lvl)
        return name

    def _op(self, node: Op) -> tuple[str, int]:
        lvl = max(self.memo[a][1] for a in node.args)
        compute = self.t.compute
        dtype = compute(node.dtype)
        if node.name == "where" and node.args[1].dtype == node.args[2].dtype == node.dtype:
            # a select moves bits: no conversion, also for bf16/fp16
            args = [self.memo[a][0] for a in node.args]
            code = self.t.op("where")(*args, dtype=node.dtype, src=node.dtype)
            return self._line(lvl, node.dtype, code), lvl
        if node.name in OWN_OPERAND_TYPES:
            src = compute(node.args[0].dtype) if node.name != "where" else dtype
            if node.name == "where":
                args = [self.operand(node.args[0], None)] + [
                    self.operand(a, dtype) for a in node.args[1:]
                ]
            elif node.name in ("rand", "randn"):
                args = [self.operand(a, I64) for a in node.args]
            else:
                args = [self.operand(a, None) for a in node.args]
                if len(node.args) == 2:  # compare in the promoted type
                    other = compute(node.args[1].dtype)
                    src = torch.promote_types(src, other)
                    args = [self.operand(a, src) for a in node.args]
        else:
            src = dtype
            second = None if node.name in ("lshift", "rshift") else dtype
            args = [self.operand(a, dtype if i == 0 else second) for i, a in enumerate(node.args)]
        code = self.t.op(node.name)(*args, dtype=dtype, src=src)
        if node.dtype in self.t.half:
            code = self.t.half[node.dtype][1].format(x=code)
        return self._line(lvl, node.dtype, code), lvl


def _wraps_negative(value: Expr, n: Any) -> bool:
    """Whether ``value`` is ``where(v < 0, v + n, v)``: the lowering's negative wrap (``n``
    a constant, or the value of a symbolic size)."""
    if not (isinstance(value, Op) and value.name == "where"):
        return False
    cond, neg, v = value.args
    if not (
        isinstance(cond, Op)
        and cond.name == "lt"
        and cond.args == (v, Const(0, v.dtype))
        and isinstance(neg, Op)
        and neg.name == "add"
        and neg.args[0] == v
    ):
        return False
    m = neg.args[1]
    if is_static(n):
        return m == Const(n, v.dtype)
    if isinstance(m, Op) and m.name == "cast":
        m = m.args[0]
    return isinstance(m, IndexValue) and m.expr == n

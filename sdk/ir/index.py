"""Index arithmetic: sympy over non-negative integer loop variables.

Views become index expressions built from ``+``, ``*``, integer constants and
two functions, :class:`FloorDiv` and :class:`Mod`, both defined for
non-negative operands (so C's ``/`` and ``%`` and Python's ``//`` and ``%``
agree); they and the symbols are defined in :mod:`.symbols` and exported from here.
:func:`print_index` renders an index for C-like or Python-like targets.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator, Mapping
from typing import Any

import sympy
import torch

from sdk._seams import private_torch

from .symbols import FloorDiv, Mod, size_var, var  # noqa: F401 - size_var, var: exported here

# -- symbolic sizes -------------------------------------------------------------------
#
# A graph compiled for symbolic sizes (``dynamic=True``, or a dimension Dynamo saw change)
# has sizes that are sympy expressions over *size symbols* (Dynamo's ``s0``, ``s1``, ...),
# each an integer >= 2 (Dynamo specializes sizes 0 and 1, and the guard checks it). Their
# values are known only when the compiled program runs: kernels take them as arguments.
# Decisions that change only speed (block sizes, fusion costs) read a symbol's *hint*, the
# size of the call that compiled the graph, through :func:`size_hint`; a decision that
# changes what is computed never does.

#: The smallest value a size symbol takes (sizes 0 and 1 are specialized by Dynamo).
MIN_SIZE = 2

_HINTS: contextvars.ContextVar[Mapping[sympy.Symbol, int] | None] = contextvars.ContextVar(
    "sdk_size_hints", default=None
)


def is_static(x: Any) -> bool:
    """True for a size known when compiling (an int, or a sympy integer)."""
    return isinstance(x, int) or (isinstance(x, sympy.Expr) and x.is_Integer)


def static(x: Any) -> Any:
    """``x`` as an int where it is a number; a symbolic size stays a sympy expression (a
    torch SymInt becomes one: ``int()`` of it would specialize on the traced size)."""
    if isinstance(x, sympy.Expr):
        return int(x) if x.is_Integer else x
    if isinstance(x, torch.SymInt):  # (only while the core traces: its adapter reads it)
        return private_torch().sym_size(x)
    return int(x)


def size_symbols(*values: Any) -> set[sympy.Symbol]:
    """The size symbols that ``values`` (sizes, tuples of sizes, expressions) use."""
    out: set[sympy.Symbol] = set()
    for v in values:
        if isinstance(v, (tuple, list)):
            out |= size_symbols(*v)
        elif isinstance(v, sympy.Expr):
            out |= {s for s in v.free_symbols if s.is_positive}
    return out


@contextlib.contextmanager
def size_hints(hints: Mapping[sympy.Symbol, int]) -> Iterator[None]:
    """Within: :func:`size_hint` reads the size symbols' values from ``hints``."""
    token = _HINTS.set(dict(hints))
    try:
        yield
    finally:
        _HINTS.reset(token)


def size_hint(x: Any) -> int:
    """An int for a size: itself if static, else its value for the compiling call (also of
    a ``torch.SymInt``, read without adding a guard).

    For heuristics only (block sizes, costs): a symbolic size takes other values at run time.
    """
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):  # a size during tracing (a plugin's decomposition)
        hint = private_torch().size_hint_of(x)
        if hint is None:
            raise KeyError(f"no hint for the size {x}")
        return hint
    if x.is_Integer:
        return int(x)
    hints = _HINTS.get() or {}
    missing = size_symbols(x) - set(hints)
    if missing:
        raise KeyError(f"no hint for size symbols {sorted(map(str, missing))}")
    return int(x.xreplace({s: sympy.Integer(v) for s, v in hints.items()}))


def numel_hint(sizes: Any) -> int:
    return math.prod(size_hint(s) for s in sizes)


def simplify_divmod(expr: sympy.Expr) -> sympy.Expr:
    """Fold ``c*k*FloorDiv(y, k) + c*Mod(y, k)`` back into ``c*y`` (views that split a dim).

    A reshape that merges dimensions leaves such pairs in linear indices; folding
    them gives back the affine index a renderer can vectorize. ``k`` and ``c`` may be
    size symbols (a reshape of ``[B, T, C]`` to ``[B*T, C]`` with ``T`` symbolic leaves
    ``C*T*FloorDiv(r, T) + C*Mod(r, T)``): the identity ``k*(y // k) + y % k == y`` holds
    for every ``k > 0``.
    """
    expr = sympy.expand(expr)
    while expr.has(Mod):
        coeffs: dict[sympy.Expr, sympy.Expr] = {}
        for term in sympy.Add.make_args(expr):
            c, rest = _divmod_factor(term)
            coeffs[rest] = coeffs.get(rest, 0) + c
        for rest, c2 in coeffs.items():
            if isinstance(rest, Mod):
                y, k = rest.args
                fd = FloorDiv(y, k)
                if fd in coeffs and sympy.expand(coeffs[fd] - c2 * k) == 0:
                    expr = sympy.expand(expr - c2 * rest - c2 * k * fd + c2 * y)
                    break
        else:
            break
    return expr


def _divmod_factor(term: sympy.Expr) -> tuple[sympy.Expr, sympy.Expr]:
    """``term`` as (coefficient, its one ``FloorDiv`` or ``Mod`` factor of a loop variable);
    a term with none or several: (its numeric coefficient, the rest). Factors over size
    symbols alone belong to the coefficient (a symbolic stride, ``(s - 1) // 64 + 1``
    blocks of a dimension, expanded into the term)."""
    factors = sympy.Mul.make_args(term)
    found = [f for f in factors if isinstance(f, (FloorDiv, Mod))]
    if len(found) > 1:
        found = [f for f in found if any(not s.is_positive for s in f.free_symbols)]
    if len(found) != 1:
        return term.as_coeff_Mul()
    return sympy.Mul(*[f for f in factors if f is not found[0]]), found[0]


def print_index(expr: sympy.Expr, style: str = "c") -> str:
    """Render ``expr``: ``style="c"`` uses ``/`` for FloorDiv, ``"python"`` uses ``//``."""
    div = "/" if style == "c" else "//"

    def go(e: sympy.Expr) -> str:
        if e.is_Integer:
            return str(int(e))
        if e.is_Symbol:
            return e.name
        if isinstance(e, FloorDiv):
            return f"({go(e.args[0])} {div} {go(e.args[1])})"
        if isinstance(e, Mod):
            return f"({go(e.args[0])} % {go(e.args[1])})"
        if e.is_Add:
            parts = [go(a) for a in sorted(e.args, key=sympy.default_sort_key)]
            return "(" + " + ".join(parts) + ")"
        if e.is_Mul:
            return "(" + " * ".join(go(a) for a in e.args) + ")"
        if e.is_Pow and e.exp.is_Integer and int(e.exp) > 0:
            return "(" + " * ".join([go(e.base)] * int(e.exp)) + ")"
        raise ValueError(f"cannot print index expression {e!r} ({type(e).__name__})")

    return go(sympy.expand(expr) if not expr.has(FloorDiv, Mod) else expr)


def print_size(x: Any, style: str = "python") -> str:
    """A size, stride or offset as source: a number, or its expression over size symbols."""
    return str(int(x)) if is_static(x) else print_index(x, style)


def print_sizes(xs: Any, style: str = "python") -> str:
    """A tuple of sizes as a Python tuple display (``(ks0, 16)``, ``(3,)``, ``()``)."""
    parts = [print_size(x, style) for x in xs]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def provably_nonneg(e: Any) -> bool:
    """True when ``e`` is >= 0 for every value of its size symbols (each >= MIN_SIZE);
    False when that is not known. Loop variables are >= 0."""
    if isinstance(e, int):
        return e >= 0
    e = sympy.sympify(e)
    if e.is_Integer:
        return int(e) >= 0
    for m in e.atoms(Mod):
        # x % k lies in [0, k): where e is linear in it, both ends decide (a size rounded
        # up to a multiple, s - s % 8 + 8, minus s is 8 - s % 8 >= 1)
        k = m.args[1]
        if k.is_Integer and int(k) > 0:
            t = sympy.Dummy("m", integer=True)
            at = sympy.expand(e.xreplace({m: t}))
            if at.is_polynomial(t) and sympy.degree(at, t) <= 1 and not at.has(Mod, FloorDiv):
                return provably_nonneg(at.subs(t, 0)) and provably_nonneg(at.subs(t, int(k) - 1))
    shift = {
        s: sympy.Symbol(f"_t_{s.name}", integer=True, nonnegative=True) + MIN_SIZE
        for s in size_symbols(e)
    }
    return bool(sympy.expand(e.xreplace(shift)).is_nonnegative)


def dominant_bounds(exprs: Any) -> list[sympy.Expr]:
    """The few of ``exprs`` (polynomials in the size symbols) that bound all the others for
    every value of the sizes: ``f`` bounds ``e`` where ``f - e`` has no negative coefficient.
    In first-seen order."""
    polys: dict[sympy.Expr, dict] = {}
    for e in exprs:
        e = sympy.expand(sympy.sympify(e))
        polys.setdefault(e, e.as_coefficients_dict())
    keep: list[tuple[sympy.Expr, dict]] = []
    for e, p in polys.items():
        if not any(_covers(q, p) for _, q in keep):
            keep = [(f, q) for f, q in keep if not _covers(p, q)] + [(e, p)]
    return [e for e, _ in keep]


def _covers(f: dict, e: dict) -> bool:
    """``f - e`` has no negative coefficient (so ``f >= e`` for positive sizes)."""
    return all(f.get(m, 0) >= e.get(m, 0) for m in {*f, *e})


def in_range(bounds: tuple[Any, Any] | None, size: Any) -> bool:
    """Do ``bounds`` (from :func:`index_bounds`) provably lie in ``[0, size)``?"""
    if bounds is None:
        return False
    lo, hi = bounds
    return provably_nonneg(lo) and provably_nonneg(sympy.sympify(size) - 1 - hi)


def index_bounds(
    e: sympy.Expr, ranges: dict[sympy.Symbol, tuple[Any, Any]]
) -> tuple[Any, Any] | None:
    """Inclusive bounds of index expression ``e``, or None if unknown.

    ``ranges`` gives each loop symbol's inclusive bounds (ints, or expressions over size
    symbols); a size symbol not in ``ranges`` is a constant of the run, its own bound; any
    other symbol without one makes the answer unknown. ``FloorDiv`` and ``Mod`` are bounded
    only over a non-negative dividend (C's ``/`` and ``%`` differ from floor semantics
    below 0). Bounds are ints where everything is static.
    """
    b = _bounds(sympy.sympify(e), ranges)
    if b is None:
        return None
    return static(b[0]), static(b[1])


def _bounds(e: sympy.Expr, ranges: dict) -> tuple[Any, Any] | None:
    if e.is_Integer:
        return int(e), int(e)
    if e.is_Symbol:
        r = ranges.get(e)
        if r is None and e.is_positive:  # a size symbol: fixed for the run
            return e, e
        return r
    if e.is_Add or e.is_Mul:
        parts = [_bounds(a, ranges) for a in e.args]
        if any(p is None for p in parts):
            return None
        lo, hi = parts[0]
        for plo, phi in parts[1:]:
            if e.is_Add:
                lo, hi = lo + plo, hi + phi
            elif all(is_static(x) for x in (lo, hi, plo, phi)):
                corners = (lo * plo, lo * phi, hi * plo, hi * phi)
                lo, hi = min(corners), max(corners)
            elif provably_nonneg(lo) and provably_nonneg(plo):
                lo, hi = lo * plo, hi * phi
            elif is_static(plo) and plo == phi and plo < 0 and provably_nonneg(lo):
                lo, hi = hi * plo, lo * plo  # a negative constant times a non-negative term
            elif is_static(lo) and lo == hi and lo < 0 and provably_nonneg(plo):
                lo, hi = phi * lo, plo * lo
            else:
                return None
        return lo, hi
    if isinstance(e, (FloorDiv, Mod)):
        d = e.args[1]
        a = _bounds(e.args[0], ranges)
        if a is None or not provably_nonneg(a[0]):  # C's / and % differ below 0
            return None
        if d.is_Integer and int(d) > 0:
            di = int(d)
            if isinstance(e, FloorDiv):
                if is_static(a[0]) and is_static(a[1]):
                    return int(a[0]) // di, int(a[1]) // di
                return FloorDiv(sympy.sympify(a[0]), d), FloorDiv(sympy.sympify(a[1]), d)
            if is_static(a[1]) and int(a[1]) < di:
                return a
            return 0, di - 1
        if d.is_positive and size_symbols(d) and not d.free_symbols - size_symbols(d):
            if isinstance(e, FloorDiv):
                return FloorDiv(sympy.sympify(a[0]), d), FloorDiv(sympy.sympify(a[1]), d)
            return 0, d - 1
    return None

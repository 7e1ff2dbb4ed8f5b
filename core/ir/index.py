"""Index arithmetic: sympy over non-negative integer loop variables.

Views become index expressions built from ``+``, ``*``, integer constants and
two functions, :class:`FloorDiv` and :class:`Mod`, both defined for
non-negative operands (so C's ``/`` and ``%`` and Python's ``//`` and ``%``
agree). :func:`print_index` renders an index for C-like or Python-like targets.
"""

from __future__ import annotations

import sympy


def var(name: str) -> sympy.Symbol:
    """A loop variable (or indirect index), integer and non-negative."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


class FloorDiv(sympy.Function):
    """``a // b`` for a >= 0, b > 0."""

    nargs = 2
    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if b == 1:
            return a
        if a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        if isinstance(a, FloorDiv) and b.is_Integer and a.args[1].is_Integer:
            return FloorDiv(a.args[0], a.args[1] * b)
        if b.is_Integer:
            # pull out terms that are multiples of b: (b*x + y) // b = x + y // b, y >= 0
            terms = sympy.Add.make_args(a)
            whole = [t for t in terms if _coeff(t) % int(b) == 0]
            if whole and all(t.is_nonnegative for t in terms):
                rest = sympy.Add(*[t for t in terms if t not in whole])
                return sympy.Add(*[t / b for t in whole]) + FloorDiv(rest, b)
        return None


class Mod(sympy.Function):
    """``a % b`` for a >= 0, b > 0."""

    nargs = 2
    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if b == 1 or a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) % int(b))
        if b.is_Integer:
            terms = sympy.Add.make_args(a)
            keep = [t for t in terms if _coeff(t) % int(b) != 0]
            if len(keep) != len(terms) and all(t.is_nonnegative for t in terms):
                return Mod(sympy.Add(*keep), b)
        return None


def _coeff(term: sympy.Expr) -> int:
    c, _ = term.as_coeff_Mul()
    return int(c) if c.is_Integer else 1


def simplify_divmod(expr: sympy.Expr) -> sympy.Expr:
    """Fold ``c*k*FloorDiv(y, k) + c*Mod(y, k)`` back into ``c*y`` (views that split a dim).

    A reshape that merges dimensions leaves such pairs in linear indices; folding
    them gives back the affine index a renderer can vectorize.
    """
    expr = sympy.expand(expr)
    while expr.has(Mod):
        coeffs: dict[sympy.Expr, sympy.Expr] = {}
        for term in sympy.Add.make_args(expr):
            c, rest = term.as_coeff_Mul()
            coeffs[rest] = coeffs.get(rest, 0) + c
        for rest, c2 in coeffs.items():
            if isinstance(rest, Mod):
                y, k = rest.args
                fd = FloorDiv(y, k)
                if coeffs.get(fd) == c2 * k:
                    expr = sympy.expand(expr - c2 * rest - c2 * k * fd + c2 * y)
                    break
        else:
            break
    return expr


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
        raise ValueError(f"cannot print index expression {e!r} ({type(e).__name__})")

    return go(sympy.expand(expr) if not expr.has(FloorDiv, Mod) else expr)


def index_bounds(
    e: sympy.Expr, ranges: dict[sympy.Symbol, tuple[int, int]]
) -> tuple[int, int] | None:
    """Inclusive integer bounds of index expression ``e``, or None if unknown.

    ``ranges`` gives each symbol's inclusive bounds; a symbol without one makes
    the answer unknown. ``FloorDiv`` and ``Mod`` are bounded only over a
    non-negative dividend (C's ``/`` and ``%`` differ from floor semantics below 0).
    """
    if e.is_Integer:
        return int(e), int(e)
    if e.is_Symbol:
        return ranges.get(e)
    if e.is_Add or e.is_Mul:
        parts = [index_bounds(a, ranges) for a in e.args]
        if any(p is None for p in parts):
            return None
        lo, hi = parts[0]
        for plo, phi in parts[1:]:
            if e.is_Add:
                lo, hi = lo + plo, hi + phi
            else:
                corners = (lo * plo, lo * phi, hi * plo, hi * phi)
                lo, hi = min(corners), max(corners)
        return lo, hi
    if isinstance(e, (FloorDiv, Mod)) and e.args[1].is_Integer and int(e.args[1]) > 0:
        a, d = index_bounds(e.args[0], ranges), int(e.args[1])
        if a is None or a[0] < 0:  # C's / and % differ from floor semantics here
            return None
        if isinstance(e, FloorDiv):
            return a[0] // d, a[1] // d
        return a if a[1] < d else (0, d - 1)
    return None

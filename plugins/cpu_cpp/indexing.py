"""Index analysis for the cpu_cpp renderer: merging loop dimensions, index bounds."""

from __future__ import annotations

import sympy

from sdk.ir import FloorDiv, Mod


def _linear_coeffs(e: sympy.Expr, pair: tuple[sympy.Symbol, ...]) -> dict | None:
    """Integer coefficients of ``pair`` in ``e``; None when ``e`` is not linear in them."""
    out = {v: 0 for v in pair}
    if not (e.free_symbols & set(pair)):
        return out
    for term in sympy.Add.make_args(sympy.expand(e)):
        if not (term.free_symbols & set(pair)):
            continue
        c, rest = term.as_coeff_Mul()
        if rest in out and c.is_Integer:
            out[rest] += int(c)
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
    dims = [(v, int(s)) for v, s in dims if s != 1]
    exprs = list({e.xreplace(subs) for e in exprs})
    i = len(dims) - 2
    while i >= 0:
        (a, _), (b, sb) = dims[i], dims[i + 1]
        ok = True
        for e in exprs:
            c = _linear_coeffs(e, (a, b))
            if c is None or c[a] != sb * c[b]:
                ok = False
                break
        if ok:
            subs[a] = sympy.Integer(0)
            exprs = list({e.xreplace({a: 0}) for e in exprs})
            dims[i + 1] = (b, dims[i][1] * sb)
            del dims[i]
        i -= 1
    return dims, subs


def index_bounds(
    e: sympy.Expr, ranges: dict[sympy.Symbol, tuple[int, int]]
) -> tuple[int, int] | None:
    """Inclusive integer bounds of index expression ``e``, or None if unknown."""
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

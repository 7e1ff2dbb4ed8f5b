"""Index analysis for the emitter: merging loop dimensions.

Index bounds are :func:`sdk.ir.index_bounds`, shared with every renderer.
"""

from __future__ import annotations

import sympy

from sdk.ir import static


def _linear_coeffs(e: sympy.Expr, pair: tuple[sympy.Symbol, ...]) -> dict | None:
    """Coefficients of ``pair`` in ``e`` (integers, or expressions over size symbols);
    None when ``e`` is not linear in them."""
    out: dict = {v: sympy.Integer(0) for v in pair}
    if not (e.free_symbols & set(pair)):
        return out
    for term in sympy.Add.make_args(sympy.expand(e)):
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
    exprs = list({e.xreplace(subs) for e in exprs})
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

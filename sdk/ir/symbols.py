"""The terms index expressions are built from: loop variables, size symbols, FloorDiv, Mod.

A module of their own, below both :mod:`.index` and the torch adapter: the adapter builds
these terms when it translates a ``torch.SymInt`` (``torch_private.sym_size``), and
:mod:`.index` calls that translation (in ``static`` and ``size_hint``). So the adapter
imports this module, :mod:`.index` imports the adapter, and neither imports the other back.
:mod:`.index` re-exports every name here: import them from there.
"""

from __future__ import annotations

import sympy


def var(name: str) -> sympy.Symbol:
    """A loop variable (or indirect index), integer and non-negative."""
    return sympy.Symbol(name, integer=True, nonnegative=True)


def size_var(name: str) -> sympy.Symbol:
    """A size symbol: an integer >= 2 known at run time."""
    return sympy.Symbol(name, integer=True, positive=True)


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
        q = _exact_quotient(a, b)
        if q is not None:  # (128*s0*s1) // (128*s1) = s0
            return q
        if not b.is_Integer and b.free_symbols:
            # a common factor of both sides goes: (x*x) // (2*x) = x // 2 (a view's size
            # as torch traces it, ((s0 // 4)**2) // (s0 // 4) halved)
            num, den = sympy.fraction(sympy.together(sympy.cancel(a / b)))
            if (
                den != b
                and (den.is_positive or (den.is_Integer and den > 0))
                and num.is_nonnegative
                and _integer_polynomial(num)
                and _integer_polynomial(den)
            ):
                return FloorDiv(num, den)
        if isinstance(a, FloorDiv) and b.is_Integer and a.args[1].is_Integer:
            return FloorDiv(a.args[0], a.args[1] * b)
        # pull out the terms b divides: (b*x + y) // b = x + y // b, y >= 0 (b a number or
        # a size symbol)
        terms = sympy.Add.make_args(a)
        quotients = [_term_quotient(t, b) for t in terms]
        if any(q is not None for q in quotients) and all(t.is_nonnegative for t in terms):
            rest = sympy.Add(*[t for t, q in zip(terms, quotients) if q is None])
            return sympy.Add(*[q for q in quotients if q is not None]) + FloorDiv(rest, b)
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
        if _exact_quotient(a, b) is not None:
            return sympy.Integer(0)
        # drop the terms b divides: (b*x + y) % b = y % b, y >= 0
        terms = sympy.Add.make_args(a)
        keep = [t for t in terms if _term_quotient(t, b) is None]
        if len(keep) != len(terms) and all(t.is_nonnegative for t in terms):
            return Mod(sympy.Add(*keep), b)
        return None


def _term_quotient(t: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
    """``t / b`` where ``b`` (a number, or an expression of size symbols) divides the term
    ``t`` for every value of the symbols, else None."""
    if b.is_Integer:
        return t / b if _coeff(t) % int(b) == 0 else None
    return _exact_quotient(t, b)


def _exact_quotient(a: sympy.Expr, b: sympy.Expr) -> sympy.Expr | None:
    """``a / b`` where ``b`` divides ``a`` for every value of the symbols (the quotient is a
    polynomial with integer coefficients), else None."""
    if b.is_Integer or not b.free_symbols:
        return None
    q = sympy.cancel(a / b)
    if sympy.fraction(q)[1] != 1 or not q.is_polynomial():
        return None
    if q.free_symbols and not all(
        c.is_Integer for c in sympy.Poly(q, *sorted(q.free_symbols, key=lambda s: s.name)).coeffs()
    ):
        return None
    return q


def _integer_polynomial(e: sympy.Expr) -> bool:
    """``e`` is a polynomial with integer coefficients (in its symbols and terms)."""
    if e.is_number:
        return bool(e.is_Integer)
    try:
        return all(c.is_Integer for c in sympy.Poly(e).coeffs())
    except (sympy.PolynomialError, sympy.polys.polyerrors.GeneratorsNeeded):
        return False


def _coeff(term: sympy.Expr) -> int:
    c, _ = term.as_coeff_Mul()
    return int(c) if c.is_Integer else 1

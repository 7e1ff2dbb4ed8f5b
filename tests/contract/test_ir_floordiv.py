"""``sdk.ir.FloorDiv`` cancels a factor common to both sides: torch traces a view's size as
``((s // 4)**2) // (s // 4)``, and its half as that over ``2 * (s // 4)``; equal sizes must
compare equal (a slice's traced length against the lowering's). Checked at every value."""

from __future__ import annotations

import itertools

import sympy

from sdk.ir.index import FloorDiv, Mod, size_var

S, T = size_var("s0"), size_var("s1")


def _value(e, s, t) -> int:
    return int(e.subs({S: s, T: t}))


def test_a_common_factor_cancels_and_the_value_is_unchanged():
    x = FloorDiv(S, 4)
    cases = [
        (x**2, 2 * x, FloorDiv(S, 8)),
        (x**2, x, x),
        (S * S, S, S),
        (3 * S + 3, 2 * S + 2, sympy.Integer(1)),
        (S * T + S, 2 * S, FloorDiv(T + 1, 2)),
    ]
    for a, b, want in cases:
        got = FloorDiv(a, b)
        assert got == want, (a, b, got)
        for s, t in itertools.product(range(4, 40), range(2, 9)):
            av, bv = _value(a, s, t), _value(b, s, t)
            if bv > 0:
                assert _value(got, s, t) == av // bv, (a, b, s, t)


def test_what_shares_no_factor_stays():
    assert isinstance(FloorDiv(S + 1, T), FloorDiv)
    assert isinstance(FloorDiv(S, 2 * T + 1), FloorDiv)
    assert isinstance(Mod(S * S, 2 * S), Mod)


def test_a_requirement_s_text_reads_back_as_itself():
    # the program's size requirements are stored as text (the whole-graph cache) and read
    # back without eval: rationals of the kernels' bounds, and floor divisions and
    # remainders of the lowering's
    from sdk.core.guards import parse_requires, requirement_text

    for e in (
        S**2 * T / 2 + 4 * S + 4096,
        1 - FloorDiv(S, 4),
        FloorDiv(S * T + 1, 8) / 2 + Mod(S + 3, T),
        FloorDiv(S + 1, 2) * FloorDiv(T, 3) - S,
    ):
        ((back, limit),) = parse_requires([(requirement_text(e), 7)])
        assert limit == 7 and sympy.expand(back - e) == 0, (e, requirement_text(e), back)

"""``core.lowering.views._clamps``: the ways a slice bound clamps into ``[0, n]`` where the
sizes alone do not say, each with the conditions (expressions ``<= 0``) a program then
requires of a call's sizes. Checked against Python's own slicing at many sizes."""

from __future__ import annotations

import itertools

import sympy

from sdk.core.lowering.views import _clamps

N, K = sympy.symbols("s0 s1", integer=True, positive=True)


def _holds(needs, at) -> bool:
    return all(int(e.subs(at)) <= 0 for e in needs)


def _python_bound(v: int, n: int) -> int:
    return range(n)[slice(v, None)].start if v < n else n  # Python's clamp of a start


def test_each_way_is_python_s_clamp_wherever_its_conditions_hold():
    # bounds: static negative (counted from the end once), symbolic (may be negative at a
    # call: counted from the end too, never "0 wherever it is <= 0")
    for v in (-3, -40, K, K - N, K - 2 * N, K + 5):
        ways = _clamps(v, N)
        for n, k in itertools.product(range(2, 12), range(2, 30)):
            at = {N: n, K: k}
            value = int(sympy.sympify(v).subs(at))
            want = _python_bound(value, n)
            for bound, needs in ways:
                if _holds(needs, at):
                    assert int(sympy.sympify(bound).subs(at)) == want, (v, n, k, bound, needs)

"""``python -m sdk run``'s timing line: a median over alternating rounds, the ratio's spread
over the rounds, and "within noise" where the spread holds 1."""

from __future__ import annotations

from sdk.tools.demo import _timing_line


def test_a_spread_that_holds_one_is_within_noise():
    compiled = [[10.0, 10.2], [12.0, 12.1], [9.0, 9.1]]
    eager = [[11.0, 11.1], [11.0, 11.2], [10.0, 10.1]]  # rounds: 0.92, 1.09, 0.90
    line = _timing_line(compiled, eager)
    assert "within noise" in line and "faster" not in line and "slower" not in line, line
    assert "median of 6 in 3 alternating rounds" in line and "rounds 0.90-1.09" in line, line


def test_a_spread_below_one_is_faster_and_above_one_slower():
    fast = _timing_line([[5.0], [5.5]], [[10.0], [10.5]])
    assert "1.9" in fast and "x faster" in fast and "within noise" not in fast, fast
    slow = _timing_line([[10.0], [10.5]], [[5.0], [5.5]])
    assert "x slower" in slow and "within noise" not in slow, slow

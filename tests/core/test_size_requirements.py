"""Size requirements of a program of symbolic sizes (``KernelSource.requires``).

A kernel compiled for symbolic sizes may be right only for some of them (the Triton plugin's
32-bit indices). It states the bounds as ``(expression over its size arguments, limit)``;
the program's per-call check reads the sizes from the inputs and refuses a call that breaks
one, which then runs a variant compiled for its sizes. The expressions are read without
``eval``: they come back from the whole-graph cache.
"""

from __future__ import annotations

import pytest
import sympy
import torch

from sdk.core.guards import TensorSpec, make_check, parse_requires
from sdk.ir import size_var

S0, S1 = size_var("s0"), size_var("s1")
ROWS = TensorSpec((S0, S1), (S1, 1), 0, torch.float32, torch.device("cpu"), True)


@pytest.mark.parametrize(
    "text",
    ["768*s0*s1 + 4096", "s0**2*s1 - s0", "(s0 + 7)/8 + s1", "-1 + 2*s0", "s0*(s1 - 1)"],
)
def test_size_arithmetic_parses_to_its_value(text):
    [(expr, limit)] = parse_requires([(text, 100)])
    assert limit == 100
    for s0, s1 in ((2, 3), (17, 1000)):
        want = eval(text, {}, {"s0": s0, "s1": s1})  # noqa: S307 - the test's own literals
        assert expr.subs({sympy.Symbol("s0", integer=True, positive=True): s0}).subs(
            {sympy.Symbol("s1", integer=True, positive=True): s1}
        ) == sympy.nsimplify(want)


@pytest.mark.parametrize(
    "bad",
    [
        ("__import__('os').system('true')", 1),
        ("s0.real", 1),
        ("s0 // s1.real", 1),
        ("s0 % -2", 1),  # (a floor division or remainder by a number that is not positive)
        ("s0 / s1", 1),
        ("s0 ** s1", 1),
        ("1.5 * s0", 1),
        ("s0 +", 1),
        ("s0", 1.0),
        ("s0", True),
        ("s0",),
    ],
)
def test_anything_but_size_arithmetic_is_refused_with_the_requirement_named(bad):
    with pytest.raises(ValueError, match="size requirement"):
        parse_requires([bad])


def test_floor_division_and_remainder_of_sizes_are_checked_per_call():
    """``1 - s1 // 4 <= 0`` (a slice's start inside a dimension of s1 // 4, as the lowering
    requires it) and ``s0 % 3 <= 1``."""
    requires = [("1 - (s1 // 4)", 0), ("(s0 % 3)", 1)]
    check = make_check((ROWS,), dynamo_guarded=False, kernel_read=frozenset(), requires=requires)
    assert check([torch.empty(3, 4)]) and check([torch.empty(4, 9)])
    assert not check([torch.empty(3, 3)])  # 3 // 4 = 0: the start past the end
    assert not check([torch.empty(5, 8)])  # 5 % 3 = 2


def test_a_divisor_of_sizes_must_be_positive_for_the_requirement_to_hold():
    """``1 - s0 // (s1 // 4) <= 0`` (Swin's backward divides by its padded windows' count,
    which is 0 for small images) and ``s0 % (s1 // 4) <= 0``: where a divisor is not
    positive the requirement does not hold (the call gets a program of its own sizes), and
    the check raises nothing."""
    requires = [("1 - ((s0) // ((s1) // (4)))", 0)]
    check = make_check((ROWS,), dynamo_guarded=False, kernel_read=frozenset(), requires=requires)
    assert check([torch.empty(8, 8)])  # 8 // 2 = 4
    assert not check([torch.empty(1, 8)])  # 1 // 2 = 0
    assert not check([torch.empty(8, 3)])  # a divisor of 3 // 4 = 0
    mod = make_check(
        (ROWS,), dynamo_guarded=False, kernel_read=frozenset(), requires=[("s0 % (s1 // 4)", 0)]
    )
    assert mod([torch.empty(6, 12)]) and not mod([torch.empty(7, 12)])
    assert not mod([torch.empty(6, 2)])


@pytest.mark.parametrize("dynamo_guarded", [False, True])
def test_the_per_call_check_refuses_sizes_past_a_requirement(dynamo_guarded):
    """``s0*s1 + 100 <= 1000`` and ``(s1 + 3)/4 <= 50``: both must hold (the second in
    integers: ``s1 + 3 <= 200``)."""
    requires = [("s0*s1 + 100", 1000), ("(s1 + 3)/4", 50)]
    check = make_check(
        (ROWS,), dynamo_guarded=dynamo_guarded, kernel_read=frozenset(), requires=requires
    )
    assert check([torch.empty(30, 30)])  # 1000 and 8.25
    assert not check([torch.empty(30, 31)])  # 1030
    assert check([torch.empty(2, 197)])  # 494 and 50
    assert not check([torch.empty(2, 198)])  # 50.25
    # without requirements the same inputs fit
    plain = make_check((ROWS,), dynamo_guarded=dynamo_guarded, kernel_read=frozenset())
    assert plain([torch.empty(30, 31)]) and plain([torch.empty(2, 198)])


def test_a_requirement_over_a_size_no_input_has_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"\['s9'\].*not the size of any input"):
        make_check((ROWS,), requires=[("s9 + 1", 10)])

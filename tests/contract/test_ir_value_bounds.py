"""``sdk.ir.value_bounds``: integer bounds of a computed value over the loop ranges, which
a renderer uses to drop the check of an indirect index. A bound that misses a value would
let a load leave its buffer, so random expressions are evaluated at every loop value and
each must lie inside the bounds given."""

from __future__ import annotations

import random

import pytest
import torch

from sdk import ir

I64, F32 = torch.int64, torch.float32
I, J = ir.var("i"), ir.var("j")
RANGES = {I: (0, 11), J: (0, 6)}


def _op(name, *args):
    return ir.Op(name, tuple(args), I64)


def _const(v):
    return ir.Const(v, I64)


def _eval(e, env):
    if isinstance(e, ir.Const):
        return e.value
    if isinstance(e, ir.IndexValue):
        return int(e.expr.subs(env))
    a = [_eval(x, env) for x in e.args]
    return {
        "add": lambda: a[0] + a[1],
        "sub": lambda: a[0] - a[1],
        "mul": lambda: a[0] * a[1],
        "neg": lambda: -a[0],
        "floordiv": lambda: a[0] // a[1],
        "remainder": lambda: a[0] % a[1],
        "maximum": lambda: max(a[0], a[1]),
        "minimum": lambda: min(a[0], a[1]),
        "where": lambda: a[1] if a[0] else a[2],
        "lt": lambda: a[0] < a[1],
        "cast": lambda: a[0],
    }[e.name]()


def _random_expr(rng: random.Random, depth: int):
    if depth == 0 or rng.random() < 0.25:
        pick = rng.random()
        if pick < 0.4:
            return ir.IndexValue(rng.choice([I, J, I + 2 * J - 3, ir.FloorDiv(I, 3)]))
        return _const(rng.randint(-5, 9))
    name = rng.choice(
        ["add", "sub", "mul", "neg", "floordiv", "remainder", "maximum", "minimum", "where"]
    )
    if name == "neg":
        return _op(name, _random_expr(rng, depth - 1))
    if name in ("floordiv", "remainder"):
        return _op(name, _random_expr(rng, depth - 1), _const(rng.randint(1, 4)))
    if name == "where":
        cond = ir.Op("lt", (_random_expr(rng, 1), _random_expr(rng, 1)), torch.bool)
        return _op(name, cond, _random_expr(rng, depth - 1), _random_expr(rng, depth - 1))
    return _op(name, _random_expr(rng, depth - 1), _random_expr(rng, depth - 1))


@pytest.mark.parametrize("seed", range(40))
def test_bounds_hold_every_value_the_expression_takes(seed):
    rng = random.Random(seed)
    e = _random_expr(rng, 4)
    b = ir.value_bounds(e, RANGES)
    assert b is not None, e  # only rules the function has
    values = [_eval(e, {I: i, J: j}) for i in range(12) for j in range(7)]
    assert b[0] <= min(values) and max(values) <= b[1], (e, b, min(values), max(values))


def test_a_pooling_window_row_is_proven_inside_the_pooled_rows():
    """max((i + 1 - 3) // 2 + 1, 0) .. min((i + 1) // 2 + 1, 56) - 1: the rows of a
    3x3/2 max pool's output that can hold input row i of 112, as its gradient computes."""
    at = ir.IndexValue(I + 1)
    first = _op(
        "maximum",
        _op("add", _op("floordiv", _op("sub", at, _const(3)), _const(2)), _const(1)),
        _const(0),
    )
    end = _op("minimum", _op("add", _op("floordiv", at, _const(2)), _const(1)), _const(56))
    row = _op("minimum", _op("add", first, _const(1)), _op("sub", end, _const(1)))
    assert ir.value_bounds(row, {I: (0, 111)}) == (0, 55)


def test_unknown_values_have_no_bounds():
    load = ir.Load("idx", I, I64)
    assert ir.value_bounds(_op("add", load, _const(1)), RANGES) is None
    assert ir.value_bounds(ir.IndexValue(ir.var("k")), RANGES) is None  # no range given
    assert ir.value_bounds(ir.Const(1.5, F32), RANGES) is None
    assert ir.value_bounds(_op("floordiv", ir.IndexValue(I), ir.IndexValue(J)), RANGES) is None
    narrow = ir.Op("cast", (ir.IndexValue(I * 100),), torch.int8)  # 1100 does not fit
    assert ir.value_bounds(narrow, RANGES) is None
    small = ir.Op("cast", (ir.IndexValue(I * 10),), torch.int8)  # up to 110: fits
    assert ir.value_bounds(small, RANGES) == (0, 110)
    wraps = ir.Op("add", (small, ir.Const(100, torch.int8)), torch.int8)  # up to 210: wraps
    assert ir.value_bounds(wraps, RANGES) is None
    for name in ("abs", "bitwise_not"):  # ops without an interval rule
        assert ir.value_bounds(ir.Op(name, (ir.IndexValue(I),), I64), RANGES) is None
    assert ir.value_bounds(_op("bitwise_and", ir.IndexValue(I), _const(3)), RANGES) is None

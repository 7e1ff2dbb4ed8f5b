"""``sdk.ir.merge_loops``: adjacent ranges merged where every index runs through both
contiguously. A merge that changed which element an iteration touches would read and
write the wrong elements silently, so random views are checked exhaustively: every
index of the merged kernel, walked in row-major order over its ranges, gives the
original kernel's sequence of addresses."""

from __future__ import annotations

import itertools
import random

import pytest
import sympy
import torch

from sdk import ir

F32 = torch.float32


def _walk(vars_, sizes, exprs):
    """Each expression's values over the ranges, in row-major order."""
    out = []
    for point in itertools.product(*(range(s) for s in sizes)):
        env = dict(zip(vars_, point))
        out.append(tuple(int(sympy.sympify(e).xreplace(env)) for e in exprs))
    return out


def _random_view(rng, sizes, vars_):
    """A strided index over ``vars_``: contiguous, permuted, broadcast or sliced dims."""
    order = list(range(len(sizes)))
    if rng.random() < 0.4:
        rng.shuffle(order)
    strides, stride = [0] * len(sizes), 1
    for d in reversed(order):
        strides[d] = 0 if rng.random() < 0.15 else stride
        stride *= sizes[d] + (1 if rng.random() < 0.2 else 0)  # a padded (sliced) row
    return sum((st * v for st, v in zip(strides, vars_)), sympy.Integer(rng.randrange(3)))


@pytest.mark.parametrize("seed", range(30))
def test_merged_kernels_touch_the_same_elements_in_the_same_order(seed):
    rng = random.Random(seed)
    outer = [rng.choice([1, 2, 3, 4]) for _ in range(rng.randrange(1, 4))]
    inner = [rng.choice([1, 2, 3, 5]) for _ in range(rng.randrange(0, 3))]
    xs = tuple(ir.var(f"x{i}") for i in range(len(outer)))
    rs = tuple(ir.var(f"r{i}") for i in range(len(inner)))
    lay = ir.Layout((1000,), (1,), 0, F32, "cpu")
    loads = [ir.Load("a", _random_view(rng, outer + inner, xs + rs), F32) for _ in range(2)]
    value = ir.Op("add", tuple(loads), F32)
    if inner:
        stages = [
            ir.Stage(rs, tuple(inner), [ir.Reduction("s", "sum", value, F32)], []),
            ir.Stage(
                (), (), [], [ir.Store("out", _random_view(rng, outer, xs), ir.LocalRef("s", F32))]
            ),
        ]
    else:
        stages = [ir.Stage((), (), [], [ir.Store("out", _random_view(rng, outer, xs), value)])]
    k = ir.Kernel(
        "k",
        xs,
        tuple(outer),
        stages,
        [ir.BufferArg("a", lay, "in"), ir.BufferArg("out", lay, "out")],
    )
    m = ir.merge_loops(k)

    def indices(kernel):
        st = kernel.stages
        loads_ = [
            n.index
            for n in ir.walk([st[0].reductions[0].value if inner else st[0].stores[0].value])
            if isinstance(n, ir.Load)
        ]
        store = st[-1].stores[0].index
        return kernel.vars, kernel.sizes, st[0].vars, st[0].sizes, loads_, store

    kv, ks, kr, krs, kl, kst = indices(k)
    mv, ms, mr, mrs, ml, mst = indices(m)
    assert len(mv) <= len(kv) and len(mr) <= len(kr)
    assert _walk(mv, ms, [mst]) == _walk(kv, ks, [kst])
    assert _walk(mv + mr, ms + mrs, ml) == _walk(kv + kr, ks + krs, kl)


def test_a_contiguous_nest_is_one_range_and_a_transpose_is_not_merged():
    i, j, k = ir.var("i"), ir.var("j"), ir.var("k")
    lay = ir.Layout((60,), (1,), 0, F32, "cpu")
    args = [ir.BufferArg("a", lay, "in"), ir.BufferArg("out", lay, "out")]

    def kernel(load_index):
        store = ir.Store("out", 20 * i + 5 * j + k, ir.Load("a", load_index, F32))
        return ir.Kernel("k", (i, j, k), (3, 4, 5), [ir.Stage((), (), [], [store])], args)

    merged = ir.merge_loops(kernel(20 * i + 5 * j + k))
    assert merged.sizes == (60,) and merged.stages[0].stores[0].index == k
    # a reads (j, i, k): i and j swap, so only j and k (contiguous in both) merge
    swapped = ir.merge_loops(kernel(15 * j + 5 * i + k))
    assert swapped.sizes == (3, 4, 5)
    # a broadcast along i: i stays its own range, j and k merge
    broadcast = ir.merge_loops(kernel(5 * j + k))
    assert broadcast.sizes == (3, 20)


def test_stages_of_one_inner_shape_merge_alike():
    # two reductions over the same (4, 6) inner shape: the first reads contiguously, the
    # second by a transpose; a renderer that gives both stages one set of variables needs
    # both merged alike, so neither is
    x, a, b, c, d = (ir.var(n) for n in "xabcd")
    lay = ir.Layout((100,), (1,), 0, F32, "cpu")
    s1 = ir.Stage((a, b), (4, 6), [ir.Reduction("s", "sum", ir.Load("p", 6 * a + b, F32), F32)], [])
    s2 = ir.Stage((c, d), (4, 6), [ir.Reduction("t", "sum", ir.Load("p", c + 4 * d, F32), F32)], [])
    s3 = ir.Stage(
        (),
        (),
        [],
        [ir.Store("o", x, ir.Op("add", (ir.LocalRef("s", F32), ir.LocalRef("t", F32)), F32))],
    )
    args = [ir.BufferArg("p", lay, "in"), ir.BufferArg("o", lay, "out")]
    k = ir.Kernel("k", (x,), (2,), [s1, s2, s3], args)
    m = ir.merge_loops(k)
    assert [st.sizes for st in m.stages[:2]] == [(4, 6), (4, 6)]
    s2.reductions[0] = ir.Reduction("t", "sum", ir.Load("p", 6 * c + d, F32), F32)
    m = ir.merge_loops(k)
    assert [st.sizes for st in m.stages[:2]] == [(24,), (24,)]

"""Index folds of ``sdk.ir.index.simplify_divmod``: a dimension split by a view and merged
back (``k*(y // k) + y % k == y``) is read with an affine index, without a division or a
remainder per element, at every size."""

from __future__ import annotations

import sympy

from sdk.ir import FloorDiv, Mod, size_var, var
from sdk.ir.index import simplify_divmod


def test_a_merged_dimension_counted_in_blocks_of_a_size_is_folded():
    """MobileViT's unfolded patches: ``[4*B, P, 64]`` summed by columns over ``4*B*P`` rows,
    with ``P = ((h - 1) // 64 + 1) * ((w - 1) // 64 + 1)`` blocks. The stride of the outer
    dimension, expanded, is four terms with two floor divisions of sizes each; they are the
    coefficient, not a second floor division of the row. Folded, the load is ``64*r + x``
    and cpu_cpp sums the columns in double (unfolded, in float: dynamic MobileViT's value
    bias gradient failed Dynamo's RMSE rule at 3x80)."""
    h, w, r, x = size_var("s100"), size_var("s4"), var("r0"), var("x0")
    blocks = (FloorDiv(h - 1, 64) + 1) * (FloorDiv(w - 1, 64) + 1)
    n = sympy.expand(blocks)
    index = x + 64 * blocks * FloorDiv(r, n) + 64 * Mod(r, n)
    assert simplify_divmod(index) == x + 64 * r
    kept = x + 64 * blocks * FloorDiv(r, n) + 32 * Mod(r, n)  # not a split dimension
    assert simplify_divmod(kept).has(Mod)
    for hv, wv, rv in ((65, 80, 5), (200, 64, 13), (129, 300, 40)):
        at = {h: hv, w: wv, r: rv, x: 7}
        assert simplify_divmod(index).xreplace(at) == index.xreplace(at)

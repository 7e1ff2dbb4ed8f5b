"""Accumulations through a permutation's indices, as gathers through its inverse.

A mixture-of-experts layer sorts its tokens by expert (``argsort``), inverts that order
(``inv[perm] = arange(n)``) and gathers rows by both. The backward of each gather is an
accumulating ``index_put``, which the lowering leaves to ATen's deterministic kernel: a
radix sort of the indices, bounds checks and a segmented sum, per call (issue 36: the sdk
never adds with atomics). Yet a permutation's indices are all distinct, so nothing is summed:

- ``index_put(x, [p], v, accumulate=True)`` with ``p`` a permutation of ``x``'s rows is
  ``x + v[inv]``, ``inv`` its inverse: a gather, which the generated kernel does (where
  ``p`` reaches only some rows, ``index_put(x, [p], x[p] + v)``: one write per row);
- with ``p // k`` as the index (the token of each of ``k`` routed copies, ``p`` a
  permutation of ``k * rows``), row ``t`` receives exactly ``k`` values,
  ``v[inv[t * k + j]]``: ``x`` plus their sum, added in order of ``j`` (as deterministic
  as before), in one pointwise kernel.

The inverse is the graph's own where it has one (HF's MoE layers compute it), else one
``index_put`` of ``arange`` through ``p`` that the rewrite adds.

Where a graph holds a permutation is known from its ops (:func:`permutation_length`): the
indices of a 1-d ``sort`` or ``randperm``, and an ``index_put`` of ``arange`` through one
(its inverse). A backward graph alone cannot tell: its indices are inputs (saved by the
forward), and the rewrite of ``p // k`` needs ``p``, which the forward may not save. So the
rewrite runs on AOTAutograd's joint graph, before the partition (where Inductor runs its
joint-graph passes: :func:`on_joint_graph`), and again as a core pass of each graph
(:func:`accumulate_over_permutations`, for graphs without a backward), which counts the
joint graph's rewrites that landed in its graph: ``sdk.explain`` reports both.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from sdk.plugin import CompileContext

from ..adapters.sizes import same_size
from ..adapters.torch_private import aten, prims
from ..lowering import ORIGINS, origins_of
from .needs import Needs

#: ``node.meta[REWRITTEN]``: the node stands for an accumulation the joint graph's pass
#: rewrote
REWRITTEN = "sdk_accumulate_over_permutations"

#: ``x[p // k] += v`` for a k up to this is k gathers added in order (one pointwise kernel);
#: a larger or symbolic k, a gather and a sum over k
ROUTED_MAX_K = 8

_SORTS = (aten.sort.default, aten.sort.stable)
_SAME_VALUES = (
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.clone.default,
    aten.alias.default,
)
_ARANGES = (aten.arange.default, aten.arange.start, aten.arange.start_step)
_ZEROS = (aten.zeros.default, aten.new_zeros.default, aten.zeros_like.default)


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _one_dim_ints(n: Any) -> bool:
    v = _val(n)
    return isinstance(v, torch.Tensor) and v.ndim == 1 and v.dtype in (torch.int64, torch.int32)


def _static(x: Any) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _arange_of(n: Any) -> Any:
    """``n``'s length if ``n`` is ``arange(length)`` (start 0, step 1), else None."""
    if not (isinstance(n, torch.fx.Node) and n.op == "call_function" and n.target in _ARANGES):
        return None
    # (a symbolic bound is a node of the graph: its value is the SymInt)
    args = [_val(a) if isinstance(a, torch.fx.Node) else a for a in n.args]
    if n.target is aten.arange.default:
        return args[0]
    start, end = args[0], args[1]
    step = args[2] if len(args) > 2 else n.kwargs.get("step", 1)
    return end if _static(start) == 0 and _static(step) == 1 else None


def permutation_length(n: Any, seen: dict[Any, Any] | None = None) -> Any:
    """The ``N`` such that node ``n`` holds a permutation of ``0..N-1`` (its values all
    distinct), from the ops that made it, or None where they do not show it."""
    if seen is None:
        seen = {}
    if n in seen:
        return seen[n]
    seen[n] = None
    found = _permutation_length(n, seen) if _one_dim_ints(n) else None
    seen[n] = found
    return found


def _permutation_length(n: torch.fx.Node, seen: dict[Any, Any]) -> Any:
    if n.op != "call_function":
        return None
    length = _val(n).shape[0]
    if n.target is operator.getitem and n.args[1] == 1:
        sort = n.args[0]
        if (
            isinstance(sort, torch.fx.Node)
            and sort.target in _SORTS
            and _val(sort.args[0]) is not None
            and _val(sort.args[0]).ndim == 1
        ):
            return length  # the indices of a 1-d sort
        return None
    if n.target is aten.randperm.default:
        return length
    if n.target in _SAME_VALUES and n.args and _one_dim_ints(n.args[0]):
        return permutation_length(n.args[0], seen)
    if n.target is prims.convert_element_type.default or n.target is aten._to_copy.default:
        src = n.args[0]
        inner = permutation_length(src, seen) if _one_dim_ints(src) else None
        # a narrowing conversion keeps the values distinct only where they all fit
        fits = _static(inner) is not None and inner <= torch.iinfo(_val(n).dtype).max + 1
        return inner if fits or _val(n).dtype == torch.int64 else None
    put = _index_of(n)
    if put is not None and not put[3]:
        _, index, values, _ = put
        inner = permutation_length(index, seen)
        # ``inv[p] = arange(N)`` over all N rows of ``inv``: p's inverse
        arange = _arange_of(values)
        whole = same_size(inner, length) and same_size(arange, length)
        return length if whole and same_size(_val(values).shape[0], length) else None
    return None


def _index_of(n: torch.fx.Node) -> tuple[Any, Any, Any, bool] | None:
    """``(x, index, values, accumulate)`` of an ``index_put`` over the first dim, else None."""
    if n.op != "call_function" or n.target is not aten.index_put.default or len(n.args) < 3:
        return None
    x, indices, values, *rest = n.args
    accumulate = rest[0] if rest else n.kwargs.get("accumulate", False)
    if not isinstance(indices, (list, tuple)) or len(indices) != 1:
        return None
    if not (_one_dim_ints(indices[0]) and isinstance(_val(values), torch.Tensor)):
        return None
    return x, indices[0], values, bool(accumulate)


def _floordiv(n: Any) -> tuple[Any, Any] | None:
    """``(p, k)`` where node ``n`` is ``p // k``, ``k`` a positive int or a graph's node of
    a symbolic size, else None."""
    if not (isinstance(n, torch.fx.Node) and n.op == "call_function"):
        return None
    floor = n.target is aten.div.Tensor_mode and n.kwargs.get("rounding_mode") == "floor"
    if not (floor or n.target is aten.floor_divide.default):
        return None
    p, k = n.args[0], n.args[1]
    if isinstance(_val(k), torch.SymInt):
        return p, k  # (a size: positive)
    return (p, k) if _static(k) is not None and k > 0 else None


def _is_zeros(n: Any) -> bool:
    if not (isinstance(n, torch.fx.Node) and n.op == "call_function"):
        return False
    if n.target in _ZEROS:
        return True
    if n.target in (aten.full.default, aten.new_full.default, aten.full_like.default):
        fill = n.args[2] if n.target is aten.new_full.default else n.args[1]
        return not isinstance(fill, torch.fx.Node) and fill == 0
    return False


def has_accumulation(graph: torch.fx.Graph) -> bool:
    return any(
        REWRITTEN in n.meta or ((a := _index_of(n)) is not None and a[3]) for n in graph.nodes
    )


def on_joint_graph(gm: torch.fx.GraphModule) -> int:
    """The rewrite over AOTAutograd's joint graph; each node standing for one is marked
    (``meta[REWRITTEN]``) for its graph's report."""
    return _rewrite(gm, mark=True)


def accumulate_over_permutations(
    gm: torch.fx.GraphModule, ctx: CompileContext | None = None, needs: Needs | None = None
) -> int:
    """Rewrite each accumulating ``index_put`` of ``gm`` whose index is a permutation, or a
    permutation floor-divided by ``k`` (see the module's text); returns how many, with
    those the joint graph's pass made that landed in ``gm``."""
    joint = sum(1 for n in gm.graph.nodes if REWRITTEN in n.meta)
    return joint + _rewrite(gm, mark=False)


def _rewrite(gm: torch.fx.GraphModule, mark: bool) -> int:
    count = 0
    seen: dict[Any, Any] = {}  # what permutation_length found, by node
    order = {n: i for i, n in enumerate(gm.graph.nodes)}  # (for _inverse)
    for n in list(gm.graph.nodes):
        found = _index_of(n)
        if found is None or not found[3]:
            continue
        x, index, values, _ = found
        if permutation_length(index, seen) is not None:
            out = _distinct(gm, n, x, index, values, seen, order)
        else:
            routed = _floordiv(index)
            out = None if routed is None else _routed(gm, n, x, *routed, values, seen, order)
        if out is not None:
            n.replace_all_uses_with(out)
            gm.graph.erase_node(n)
            count += 1
            if mark:
                out.meta[REWRITTEN] = True
    if count:
        gm.recompile()
    return count


def _call(
    gm: torch.fx.GraphModule,
    before: torch.fx.Node,
    target: Any,
    args: tuple,
    val: Any,
    **kwargs: Any,
) -> torch.fx.Node:
    with gm.graph.inserting_before(before):
        node = gm.graph.call_function(target, args, kwargs)
    node.meta.update(val=val, **{ORIGINS: origins_of(before)})
    return node


def _inverse(
    gm: torch.fx.GraphModule, before: torch.fx.Node, p: Any, seen: dict, order: dict
) -> Any:
    """A node of the graph holding the inverse of permutation ``p``: the graph's own
    (``inv[p] = arange(N)`` ahead of ``before``; or ``p`` is one, of ``q``: then ``q``),
    else one made before ``before`` (an ``index_put`` of ``arange`` through ``p``).
    ``order``: the graph's nodes' positions before the rewrite (a node the rewrite made is
    ahead of every node it rewrites later)."""
    length = permutation_length(p, seen)
    for user in p.users:
        put = _index_of(user)
        if (
            order.get(user, -1) < order[before]
            and put is not None
            and put[1] is p
            and same_size(permutation_length(user, seen), length)
        ):
            return user
    put = _index_of(p)
    if put is not None and not put[3] and permutation_length(put[1], seen) is not None:
        return put[1]
    pv = _val(p)
    size = (
        length
        if _static(length) is not None
        else _call(gm, before, aten.sym_size.int, (p, 0), length)
    )
    line = pv.new_empty(pv.shape)
    arange = _call(
        gm,
        before,
        aten.arange.start_step,
        (0, size, 1),
        line,
        dtype=pv.dtype,
        device=pv.device,
    )
    empty = _call(gm, before, aten.empty_like.default, (p,), line)
    inverse = _call(gm, before, aten.index_put.default, (empty, [p], arange), line)
    seen[inverse] = length
    return inverse


def _gather(gm: torch.fx.GraphModule, n: torch.fx.Node, values: Any, inverse: Any) -> torch.fx.Node:
    """``values[inverse]``: each row read from where the permutation put it."""
    vv = _val(values)
    return _call(gm, n, aten.index.Tensor, (values, [inverse]), vv.new_empty(vv.shape))


def _distinct(
    gm: torch.fx.GraphModule,
    n: torch.fx.Node,
    x: Any,
    index: Any,
    values: Any,
    seen: dict[Any, Any],
    order: dict[Any, int],
) -> torch.fx.Node:
    """``x[p] += v`` with ``p`` a permutation: ``x + v[inv]`` where ``p`` covers ``x``'s
    rows and ``v`` has ``x``'s shape (a gather, in the generated kernel); else one write
    per row. Returns the node that stands for ``n``."""
    xv, vv = _val(x), _val(values)
    zeros = _is_zeros(x)
    length = permutation_length(index, seen)
    whole = vv.ndim == xv.ndim and all(map(same_size, vv.shape, xv.shape))  # (no broadcast)
    if whole and same_size(xv.shape[0], length):
        out = _gather(gm, n, values, _inverse(gm, n, index, seen, order))
        if not zeros:
            out = _call(gm, n, aten.add.Tensor, (x, out), _val(n))
    else:
        if not zeros:
            picked = xv.new_empty((_val(index).shape[0], *xv.shape[1:]))
            read = _call(gm, n, aten.index.Tensor, (x, [index]), picked)
            values = _call(gm, n, aten.add.Tensor, (read, values), picked + vv)
        out = _call(gm, n, aten.index_put.default, (x, [index], values), _val(n))
    return out


def _routed(
    gm: torch.fx.GraphModule,
    n: torch.fx.Node,
    x: Any,
    perm: Any,
    k: Any,
    values: Any,
    seen: dict[Any, Any],
    order: dict[Any, int],
) -> torch.fx.Node | None:
    """``x[p // k] += v`` with ``p`` a permutation of ``k * rows``: ``x`` plus the sum over
    ``k`` of ``v`` read back in its unsorted order (``v[inv]``: row ``t``'s k copies are
    ``v[inv[t * k + j]]``), in fp32 for 16-bit values: the node that stands for ``n``;
    None where the sizes do not show it."""
    xv, vv = _val(x), _val(values)
    length = permutation_length(perm, seen)
    rows, kv = xv.shape[0], _val(k) if isinstance(k, torch.fx.Node) else k
    if not same_size(length, rows * kv):
        return None
    rest = tuple(xv.shape[1:])
    shape = (rows * kv, *rest)
    if vv.ndim != len(shape) or not all(map(same_size, vv.shape, shape)) or vv.dtype != xv.dtype:
        return None
    acc = torch.float32 if xv.dtype in (torch.float16, torch.bfloat16) else xv.dtype
    inverse = _inverse(gm, n, perm, seen, order)
    total_val = xv.new_empty(xv.shape, dtype=acc)
    if _static(k) is not None and k <= ROUTED_MAX_K:
        # k gathers added in order: one pointwise kernel, no (rows * k)-row temporary
        rows_of = _call(
            gm, n, aten.view.default, (inverse, [-1, k]), _val(inverse).new_empty((rows, k))
        )
        total = _call(gm, n, prims.convert_element_type.default, (x, acc), total_val)
        for j in range(k):
            col = _call(gm, n, aten.select.int, (rows_of, 1, j), _val(inverse).new_empty((rows,)))
            part = _call(gm, n, aten.index.Tensor, (values, [col]), xv.new_empty(xv.shape))
            part = _call(gm, n, prims.convert_element_type.default, (part, acc), total_val)
            total = _call(gm, n, aten.add.Tensor, (total, part), total_val)
    else:
        # the view's sizes: numbers, or the graph's nodes of x's symbolic sizes
        sizes = [
            d if _static(d) is not None else _call(gm, n, aten.sym_size.int, (x, i + 1), d)
            for i, d in enumerate(rest)
        ]
        back = _gather(gm, n, values, inverse)
        shaped = _call(
            gm, n, aten.view.default, (back, [-1, k, *sizes]), vv.new_empty((rows, kv, *rest))
        )
        summed = _call(gm, n, aten.sum.dim_IntList, (shaped, [1]), total_val, dtype=acc)
        total = _call(gm, n, aten.add.Tensor, (x, summed), total_val)
    out = total
    if acc != xv.dtype:
        out = _call(gm, n, prims.convert_element_type.default, (total, xv.dtype), _val(n))
    return out

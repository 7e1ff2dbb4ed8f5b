"""The kernel builder: one fused group -> one :class:`~sdk.core.ir.kernel.Kernel`.

:class:`_Builder` maps each member's loops onto the group's, inlines pointwise members
into their readers, orders reductions into stages and emits the stores; the fusion search
also runs it on a trial group to see whether a merge can be built at all
(:class:`_NotFusable`). The helpers below it finish the kernel: linear indices, the loop
order, the arguments, the size symbols and the kernel's name.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections import Counter
from collections.abc import Iterator
from typing import Any

import sympy
import torch

from sdk.plugin import Capability, CompileContext

from ..ir.expr import (
    TRANSCENDENTAL,
    Expr,
    IndexValue,
    Load,
    LocalRef,
    Op,
    loads,
    rewrite,
    subs_index,
    walk,
)
from ..ir.graph import Node
from ..ir.index import numel_hint, simplify_divmod, size_symbols, var
from ..ir.kernel import BufferArg, Kernel, Layout, Reduction, Stage, Store
from ..lowering import cast, reshape_reindex
from .groups import Group, _fits, _squeeze
from .inline import _value_at


class _NotFusable(Exception):
    pass


class Memo:
    """What a builder derives from one node and the group's loops alone, kept for every
    builder of one fusion search (its trial merges try the same nodes in groups over the
    same loops again and again): a node's mapping onto the loops where no other member
    decides it; the node's value under a mapping, and that value with the group's reads
    resolved; an index under a mapping; and a producer's value where a load reads it.
    Keyed by node name, which one graph's nodes do not share."""

    def __init__(self) -> None:
        self.mappings: dict[tuple, dict[sympy.Symbol, sympy.Expr]] = {}
        self.values: dict[tuple, Expr] = {}
        self.resolved: dict[tuple, Expr] = {}
        self.reads: dict[tuple, Expr] = {}
        self._loads: dict[str, tuple[Load, ...]] = {}
        self.indices: dict[tuple, tuple[sympy.Expr, ...]] = {}

    def loads(self, node: Node) -> tuple[Load, ...]:
        """The loads in ``node``'s value."""
        hit = self._loads.get(node.name)
        if hit is None:
            hit = self._loads[node.name] = tuple(loads(node.value))
        return hit

    def value_at(self, p: Node, ld: Load) -> Expr:
        key = (p.name, ld.index, ld.binds)
        hit = self.reads.get(key)
        if hit is None:
            hit = self.reads[key] = _value_at(p, ld)
        return hit


#: the dtypes whose round trips ``round_intermediates=False`` drops
_LOW_FLOATS = (torch.bfloat16, torch.float16)


def _unrounded(root: Expr, memo: dict[Expr, Expr]) -> Expr:
    """``root`` without its round trips through bf16 or fp16: a float32 value cast to one of
    them and back to float32 is the value itself. What a kernel stores keeps its last cast.
    ``memo``: what is rewritten already, shared by the roots of one kernel."""

    def fn(node: Expr) -> Expr | None:
        if isinstance(node, Op) and node.name == "cast" and node.dtype == torch.float32:
            (inner,) = node.args
            if (
                isinstance(inner, Op)
                and inner.name == "cast"
                and inner.dtype in _LOW_FLOATS
                and inner.args[0].dtype == torch.float32
            ):
                return rewrite(inner.args[0], fn, memo)
        return None

    return rewrite(root, fn, memo)


class _Builder:
    """Turns a group into one kernel, for the compile ``ctx`` (the plugin's capabilities);
    ``memo``: what it may share with the other builders of one fusion search."""

    def __init__(self, ctx: CompileContext, group: Group, memo: Memo | None = None) -> None:
        self.ctx, self.g = ctx, group
        self.memo = memo if memo is not None else Memo()
        self.xs = tuple(var(f"x{i}") for i in range(len(group.X)))
        self.rs = tuple(var(f"r{i}") for i in range(len(group.R)))
        self.members = {n.name: n for n in group.members}
        self._resolved: dict[str, Expr] = {}
        self._level: dict[str, int] = {}
        self._inlined: dict[tuple, Expr] = {}
        self._mapping_stack: set[str] = set()
        self._permuted: dict[str, dict[sympy.Symbol, sympy.Expr] | None] = {}

    def _mapping(self, node: Node) -> dict[sympy.Symbol, sympy.Expr]:
        """Node vars -> group vars (size-1 dims -> 0)."""
        key = (node.name, self.g.X, self.g.R)
        hit = self.memo.mappings.get(key)
        if hit is not None:
            return hit
        own = True  # decided by the node and the loops alone (not by other members)
        kind = _fits(node, self.g.X, self.g.R)
        if kind is None:
            raise _NotFusable(f"{node.name} does not fit the group's loops")
        if kind == "permuted":
            found = self._permuted_mapping(node)
            if found is None:
                raise _NotFusable(f"{node.name} is a transpose no member reads plainly")
            return found
        if kind == "red":
            coords = iter(self.xs + self.rs)
        else:
            target = self.g.X if kind == "outer" else self.g.X + self.g.R
            gvars = self.xs if kind == "outer" else self.xs + self.rs
            sq = _squeeze(node.sizes)
            plain = sq == target
            if Counter(sq) == Counter(target) and (
                not plain or _straddles(self.g.X, self.g.R, kind)
            ):
                # the group's dims in another order (a permute between members, as timm's
                # ConvNeXt block permutes NHWC back to NCHW), or in order with a size both
                # among the loops and the reduction (16 channels of a batch of 16: by
                # position, the batch dim could take the channel loop): mapped as the
                # members read each other, the kernel walks memory in order
                found = self._permuted_mapping(node)
                if found is not None:
                    return found
                if self._mapping_stack:
                    # asked while another member's mapping is being found (through the
                    # reads of this one): by position it may be the wrong one, and the
                    # asker would take it on; the asker tries its other reads instead
                    raise _NotFusable(f"{node.name}'s loops are not decided yet")
                own = False  # (another group's members may give one)
            if plain:
                coords = iter(gvars)
            else:
                # another shape of the same elements: unravel the group's index (a
                # one-to-one mapping, correct for any shape, but a permute's unravelled
                # index walks memory out of order: 2x slower kernels on an H200)
                coords = iter(reshape_reindex(sq, target)(gvars))
        mapping: dict[sympy.Symbol, sympy.Expr] = {}
        for v, s in zip(node.vars, node.sizes):
            mapping[v] = sympy.Integer(0) if s == 1 else next(coords)
        group_vars = coords
        if node.is_reduction:
            for v, s in zip(node.rvars, node.rsizes):
                mapping[v] = sympy.Integer(0) if s == 1 else next(group_vars)
        if own:
            self.memo.mappings[key] = mapping
        return mapping

    def _permuted_mapping(self, node: Node) -> dict[sympy.Symbol, sympy.Expr] | None:
        """Node vars -> group vars for a pointwise ``node`` whose dims are the group's in
        another order (a "permuted" fit, or the loops' sizes in another order), taken from
        how members read each other, and kept for the builder's later asks; None where no
        member's reads give one, or while resolving ``node`` itself."""
        if node.name in self._permuted:
            return self._permuted[node.name]
        if node.name in self._mapping_stack:
            return None
        outermost = not self._mapping_stack
        found: dict[sympy.Symbol, sympy.Expr] | None = None
        with contextlib.suppress(_NotFusable):
            found = self._mapping_from_readers(node)
        if found is not None or outermost:
            # (a miss while other nodes are being resolved may be only theirs: asked
            # again from the top, the nodes it reads may have their mappings by then)
            self._permuted[node.name] = found
        return found

    def _mapping_from_readers(self, node: Node) -> dict[sympy.Symbol, sympy.Expr]:
        """Node vars -> group vars, taken from a group member that reads ``node`` with
        every one of the group's loops in some position of the index (a transpose)."""
        if node.name in self._mapping_stack:
            raise _NotFusable(f"{node.name} is read only through itself")
        self._mapping_stack.add(node.name)
        try:
            wanted = set(self.xs + self.rs)
            for r in self.g.members:
                if r is node or node.name not in r.reads or r.name in self._mapping_stack:
                    continue
                try:
                    rm = self._mapping(r)
                except _NotFusable:
                    continue
                for ld in self.memo.loads(r):
                    if ld.buffer != node.name or not isinstance(ld.index, tuple) or ld.binds:
                        continue
                    idx = self._read_at(r, rm, ld.index)
                    used = [i for i, sz in zip(idx, node.sizes) if sz != 1]
                    if set(used) == wanted and len(used) == len(wanted):
                        return {
                            v: (sympy.Integer(0) if sz == 1 else i)
                            for v, i, sz in zip(node.vars, idx, node.sizes)
                        }
            found = self._mapping_from_reads(node)
            if found is not None:
                return found
        finally:
            self._mapping_stack.discard(node.name)
        raise _NotFusable(
            f"{node.name} is a transpose of the group's loops that no member reads plainly"
        )

    def _mapping_from_reads(self, node: Node) -> dict[sympy.Symbol, sympy.Expr] | None:
        """Node vars -> group vars, taken from what ``node`` reads: where it loads a
        buffer (a member, or one another member also loads) as the other side does, its
        var at each position (or of each stride, in a linear index) takes the group var
        the other side has there. A LayerNorm over dim 1 (``x - mean(x, 1)``): the
        normalization reads ``x`` as the reduction over the channels does, so its channel
        var is the reduction's loop. Any one-to-one mapping is correct (members are
        inlined at their readers' indices); this one walks memory as the group's other
        reads do. None where it does not cover every loop once."""
        own = [ld for ld in self.memo.loads(node) if not ld.binds]
        wanted = frozenset(self.xs + self.rs)
        node_vars = frozenset(node.vars)
        mapping: dict[sympy.Symbol, sympy.Expr] = {}

        def pairs(mine: Any, theirs: Any) -> list[tuple[Any, Any]]:
            """(node var, group var) matched by position, or by equal coefficient."""
            if isinstance(mine, tuple) and isinstance(theirs, tuple):
                return list(zip(mine, theirs)) if len(mine) == len(theirs) else []
            if isinstance(mine, tuple) or isinstance(theirs, tuple):
                return []
            a = _coefficients(sympy.sympify(mine), node_vars)
            b = _coefficients(sympy.sympify(theirs), wanted)
            if a is None or b is None:
                return []
            return [(v, g) for v, c in a for g, d in b if c == d]

        for ld in own:
            theirs: list[Any] = []
            p = self.members.get(ld.buffer)
            if p is not None and p is not node:
                if isinstance(ld.index, tuple):
                    with contextlib.suppress(_NotFusable):
                        theirs.append(tuple(self.store_index(p)))
            else:
                for r in self.g.members:
                    if r is node or ld.buffer not in r.reads or r.name in self._mapping_stack:
                        continue
                    if _fits(r, self.g.X, self.g.R) == "permuted":
                        continue  # its own mapping may come from this node's
                    try:
                        rm = self._mapping(r)
                    except _NotFusable:
                        continue
                    for other in self.memo.loads(r):
                        if other.buffer != ld.buffer or other.binds:
                            continue
                        if isinstance(other.index, tuple):
                            theirs.append(self._read_at(r, rm, other.index))
                        else:
                            theirs.append(sympy.expand(other.index.xreplace(rm)))
            for other in theirs:
                for v, g in pairs(ld.index, other):
                    v, g = sympy.sympify(v), sympy.sympify(g)
                    if v in node.vars and g in wanted and mapping.setdefault(v, g) != g:
                        return None  # read two ways: no one order
        moving = [v for v, sz in zip(node.vars, node.sizes) if sz != 1]
        if any(v not in mapping for v in moving) or {mapping[v] for v in moving} != wanted:
            return None
        if len(moving) != len(wanted):
            return None
        return {
            v: mapping[v] if sz != 1 else sympy.Integer(0) for v, sz in zip(node.vars, node.sizes)
        }

    def _read_at(
        self, r: Node, rm: dict[sympy.Symbol, sympy.Expr], index: tuple
    ) -> tuple[sympy.Expr, ...]:
        """``index``, a load in member ``r``, in the group's loops (``rm``: r's mapping)."""
        key = (r.name, tuple(rm.items()), index)
        hit = self.memo.indices.get(key)
        if hit is None:
            hit = tuple(sympy.expand(sympy.sympify(i).xreplace(rm)) for i in index)
            self.memo.indices[key] = hit
        return hit

    def store_index(self, node: Node) -> tuple[sympy.Expr, ...]:
        m = self._mapping(node)
        return tuple(m[v] for v in node.vars)

    def resolved(self, node: Node) -> Expr:
        """The node's value in group vars, with group-local reads inlined or LocalRef'd."""
        hit = self._resolved.get(node.name)
        if hit is not None:
            return hit
        # keyed by the node's mapping, whoever decided it, and by what its reads resolve
        # through: the members it reads (directly, or through the pointwise members it
        # inlines at its own indices) and the store index of each reduction among them
        mapping = self._mapping(node)
        mapped = (node.name, tuple(mapping.items()))
        expr = self.memo.values.get(mapped)
        if expr is None:
            expr = self.memo.values[mapped] = subs_index(node.value, mapping)
        try:
            reads = self._members_read(node)
            key = (mapped, reads, tuple(self._reduction_indices(reads)))
        except _NotFusable:
            key = None  # (raised again, where it applies, by the resolution below)
        hit = self.memo.resolved.get(key) if key is not None else None
        if hit is None:
            hit = self._resolve_reads(expr)
            if key is not None:
                self.memo.resolved[key] = hit
        self._resolved[node.name] = hit
        return hit

    def _members_read(self, node: Node) -> frozenset[str]:
        """The members ``node`` reads, directly or through the pointwise members it inlines."""
        seen: set[str] = set()
        todo = [node]
        while todo:
            for ld in self.memo.loads(todo.pop()):
                if ld.buffer in self.members and ld.buffer not in seen:
                    seen.add(ld.buffer)
                    if not self.members[ld.buffer].is_reduction:
                        todo.append(self.members[ld.buffer])
        return frozenset(seen)

    def _reduction_indices(self, names: frozenset[str]) -> Iterator[tuple]:
        for name in sorted(names):
            if self.members[name].is_reduction:
                yield name, self.store_index(self.members[name])

    def _resolve_reads(self, expr: Expr) -> Expr:
        def fn(e: Expr) -> Expr | None:
            if isinstance(e, Load) and isinstance(e.index, tuple) and e.buffer in self.members:
                p = self.members[e.buffer]
                if p.is_reduction:
                    if tuple(sympy.expand(i) for i in e.index) != tuple(
                        sympy.expand(i) for i in self.store_index(p)
                    ):
                        raise _NotFusable(f"reads the reduction {p.name} at another outer point")
                    return LocalRef(p.name, self.result_dtype(p))
                # inline: p's value at the reader's index, its own reads resolved too
                key = (p.name, e.index, e.binds)
                hit = self._inlined.get(key)
                if hit is None:
                    if e.binds and any(isinstance(x, IndexValue) for x in walk([p.value])):
                        raise _NotFusable(
                            f"{p.name} computes an index value and is read at a gathered index"
                        )
                    at = self.memo.value_at(p, e)
                    # rounded to p's dtype, exactly as if it had been stored and loaded
                    hit = self._inlined[key] = cast(self._resolve_reads(at), p.dtype)
                return hit
            return None

        return rewrite(expr, fn)

    def result_dtype(self, node: Node) -> torch.dtype:
        if node.reduce_op in ("argmax", "argmin"):
            return torch.int64
        if node.reduce_op in ("any", "all"):
            return torch.bool
        return node.value.dtype

    def levels(self) -> dict[str, int]:
        """Stage level of each reduction (0: needs no other reduction of the group)."""
        for n in self.g.members:
            if n.is_reduction:
                self._level_of(n)
            else:
                self.resolved(n)
        return dict(self._level)

    def _level_of(self, n: Node) -> int:
        if n.name in self._level:
            return self._level[n.name]
        refs = [r for r in walk([self.resolved(n)]) if isinstance(r, LocalRef)]
        lvl = 1 + max((self._level_of(self.members[r.name]) for r in refs), default=-1)
        self._level[n.name] = lvl
        return lvl

    def _needs(self, e: Expr) -> int:
        """Level after which ``e`` can be evaluated (-1: any time)."""
        refs = [r for r in walk([e]) if isinstance(r, LocalRef)]
        return max((self._level_of(self.members[r.name]) for r in refs), default=-1)

    def kernel(
        self, name: str, stored: set[str], layouts: dict[str, Layout], origins: tuple[str, ...]
    ) -> Kernel:
        self.levels()
        inner: dict[int, Stage] = {}
        outer: dict[int, Stage] = {}

        def inner_stage(lvl: int) -> Stage:
            return inner.setdefault(lvl, Stage(self.rs, self.g.R))

        def outer_stage(lvl: int) -> Stage:
            return outer.setdefault(lvl, Stage((), ()))

        exact = self.ctx.core_options.round_intermediates
        unrounded: dict[Expr, Expr] = {}  # (members share what they inline)

        def value_of(n: Node) -> Expr:
            return self.resolved(n) if exact else _unrounded(self.resolved(n), unrounded)

        for n in self.g.members:
            if n.is_reduction:
                lvl = self._level[n.name]
                value = value_of(n)
                inner_stage(lvl).reductions.append(
                    Reduction(n.name, n.reduce_op, value, self.result_dtype(n))
                )
                if n.name in stored:
                    ref = LocalRef(n.name, self.result_dtype(n))
                    outer_stage(lvl).stores.append(
                        Store(
                            n.name, layouts[n.name].linear(self.store_index(n)), n.store_value(ref)
                        )
                    )
            elif n.name in stored:
                value = n.store_value(value_of(n))
                kind = _fits(n, self.g.X, self.g.R)
                need = self._needs(value)
                if kind in ("inner", "permuted"):
                    stage = inner_stage(need + 1)
                else:
                    # a per-row value that needs no reduction (a BatchNorm weight cast to
                    # float) is stored after the first loop, not in a stage before it: the
                    # kernel's first stage then loops, as a split reduction's must
                    stage = outer_stage(max(need, 0) if self.g.R else need)
                stage.stores.append(
                    Store(n.name, layouts[n.name].linear(self.store_index(n)), value)
                )
        if self.ctx.has(Capability.STORE_THEN_LOAD):
            self._reuse_across_stages(inner, layouts)
        stages: list[Stage] = []
        top = max(list(inner) + list(outer) + [-1])
        for lvl in range(-1, top + 1):
            if lvl in inner:
                stages.append(inner[lvl])
            if lvl in outer:
                stages.append(outer[lvl])
        stages = [_linearize(st, layouts) for st in stages]
        written = {n.into: n.name for n in self.g.members if n.into is not None}
        if written:
            # the input a member writes in place is one argument, read and written: the
            # kernel reads it through the writer's buffer (the same memory and layout)
            stages = [_renamed_loads(st, written) for st in stages]
        args = _arguments(stages, layouts, stored)
        xs, sizes = _loop_order(self.xs, self.g.X, stages, layouts)
        return Kernel(name, xs, sizes, stages, args, origins, kernel_size_args(sizes, stages, args))

    def _reuse_across_stages(self, inner: dict[int, Stage], layouts: dict[str, Layout]) -> None:
        """Store an expensive value once and read it back instead of recomputing it.

        Softmax: stage 1 sums exp(x - max), stage 2 stores exp(x - max) / sum. When the
        plugin allows a kernel to load, later at the same outer point, what it stored
        (Capability.STORE_THEN_LOAD), stage 1 also stores exp(x - max) into the output
        and stage 2 divides what it loads back: one exp per element instead of two.
        Only where the output's dtype holds the value exactly (no extra rounding).
        """
        levels = sorted(inner)
        for prev, nxt in itertools.pairwise(levels):
            a, b = inner[prev], inner[nxt]
            computed = {e for r in a.reductions for e in walk([r.value])}
            written = [st.buffer for stage in inner.values() for st in stage.stores]
            for i, store in enumerate(b.stores):
                if written.count(store.buffer) != 1:
                    continue
                node = self.members[store.buffer]
                cands = [
                    e
                    for e in walk([store.value])
                    if e in computed
                    and e is not store.value
                    and e.dtype == layouts[store.buffer].dtype
                    and _expensive(e)
                    and _uses(e, self.rs)
                ]
                if not cands:
                    continue
                best = max(cands, key=lambda e: len(walk([e])))
                at = self.store_index(node)
                a.stores.append(Store(store.buffer, store.index, best))
                back = Load(store.buffer, at, best.dtype)
                b.stores[i] = Store(
                    store.buffer,
                    store.index,
                    rewrite(
                        store.value, lambda e, back=back, best=best: back if e == best else None
                    ),
                )


@functools.lru_cache(maxsize=4096)
def _straddles(X: tuple[int, ...], R: tuple[int, ...], kind: str) -> bool:
    """Does a pointwise member's dim of some size fit both a loop and a reduction dim of
    the group (``kind`` "inner": it spans both)? Its dims then map ambiguously by size."""
    return kind == "inner" and bool({s for s in X if s != 1} & {s for s in R if s != 1})


@functools.lru_cache(maxsize=4096)
def _coefficients(
    index: sympy.Expr, vars: frozenset[sympy.Symbol]
) -> tuple[tuple[sympy.Symbol, sympy.Expr], ...] | None:
    """A linear index's (var, coefficient) for each of ``vars`` it uses, where the
    coefficients are distinct (None where it is not linear in them, or two share one).
    Cached: a fusion search asks it of the same few indices thousands of times (a
    ResNet-50 training step: 7,186 calls, 26 distinct, 1.2 s of the 5.1 s search)."""
    expr = sympy.expand(index)
    out: dict[sympy.Symbol, sympy.Expr] = {}
    for v in sorted(vars, key=str):
        c = expr.coeff(v)
        if c == 0:
            continue
        if c.free_symbols & vars:
            return None
        out[v] = c
    if len(set(out.values())) != len(out):
        return None
    return tuple(out.items())


def _expensive(e: Expr) -> bool:
    """Whether ``e`` computes an op that costs far more than a load (``sdk.ir``'s table)."""
    return any(isinstance(n, Op) and n.name in TRANSCENDENTAL for n in walk([e]))


def _uses(e: Expr, syms: tuple) -> bool:
    """Does ``e`` read anything at an index that involves one of ``syms``?"""
    wanted = set(syms)
    for n in walk([e]):
        if isinstance(n, Load):
            index = n.index if isinstance(n.index, tuple) else (n.index,)
            if any(sympy.sympify(i).free_symbols & wanted for i in index):
                return True
        if isinstance(n, IndexValue) and n.expr.free_symbols & wanted:
            return True
    return False


def _linearize(stage: Stage, layouts: dict[str, Layout]) -> Stage:
    memo: dict = {}

    def fn(e: Expr) -> Expr | None:
        if isinstance(e, Load):
            # indices count from the argument's data pointer, which is at its offset
            base = layouts[e.buffer]
            index = base.linear(e.index) if isinstance(e.index, tuple) else e.index
            binds = tuple((s, rewrite(x, fn, memo), n) for s, x, n in e.binds)
            return Load(e.buffer, simplify_divmod(index - base.offset), e.dtype, binds)
        if isinstance(e, IndexValue):
            return IndexValue(simplify_divmod(e.expr), e.dtype)
        return None

    return Stage(
        stage.vars,
        stage.sizes,
        [Reduction(r.name, r.op, rewrite(r.value, fn, memo), r.dtype) for r in stage.reductions],
        [
            Store(
                s.buffer,
                simplify_divmod(s.index - layouts[s.buffer].offset),
                rewrite(s.value, fn, memo),
            )
            for s in stage.stores
        ],
    )


def _renamed_loads(stage: Stage, names: dict[str, str]) -> Stage:
    """``stage`` with its loads of buffer ``a`` reading buffer ``names[a]`` instead."""
    memo: dict = {}

    def fn(e: Expr) -> Expr | None:
        if isinstance(e, Load) and e.buffer in names:
            binds = tuple((s, rewrite(x, fn, memo), n) for s, x, n in e.binds)
            return Load(names[e.buffer], e.index, e.dtype, binds)
        return None

    return Stage(
        stage.vars,
        stage.sizes,
        [Reduction(r.name, r.op, rewrite(r.value, fn, memo), r.dtype) for r in stage.reductions],
        [Store(s.buffer, s.index, rewrite(s.value, fn, memo)) for s in stage.stores],
    )


def _loop_order(
    xs: tuple, sizes: tuple, stages: list[Stage], layouts: dict[str, Layout]
) -> tuple[tuple, tuple]:
    """The outer loops in the memory order of the kernel's largest access.

    Loops are logical (N, C, H, W); a kernel over a channels-last buffer walks it
    fastest along C, so consecutive iterations touch consecutive addresses. The
    access that decides is the largest buffer the kernel stores to (else loads
    from) whose index is affine in the outer loops; loops it does not use go
    outermost. Renderers see only a permuted ``Kernel.vars``.
    """
    if len(xs) < 2:
        return xs, sizes
    wanted = set(xs)
    candidates: list[tuple[int, int, sympy.Expr]] = []
    for st in stages:
        accesses = [(s.buffer, s.index, 1) for s in st.stores]
        for e in walk([r.value for r in st.reductions] + [s.value for s in st.stores]):
            if isinstance(e, Load) and not e.binds and not isinstance(e.index, tuple):
                accesses.append((e.buffer, e.index, 0))
        for buf, index, is_store in accesses:
            index = sympy.sympify(index)
            if index.free_symbols & wanted:
                candidates.append((numel_hint(layouts[buf].sizes), is_store, index))
    # the largest access whose index is affine in every loop decides: one that is not (a
    # reshape's or a padded window's div/mod: max-pooling reads its input so) says nothing
    # of the memory order, and the next largest, the output a pooling kernel stores in
    # channels-last, does
    for *_, index in sorted(candidates, key=lambda c: c[:2], reverse=True):
        coeffs = _affine_coefficients(sympy.expand(index), xs)
        if coeffs is None:
            continue
        big = max(abs(c) for c in coeffs) + 1
        order = sorted(range(len(xs)), key=lambda i: -(abs(coeffs[i]) or big))
        return tuple(xs[i] for i in order), tuple(sizes[i] for i in order)
    return xs, sizes


def _affine_coefficients(index: sympy.Expr, xs: tuple) -> list[int] | None:
    """The integer coefficient of each loop in ``index``, or None where it is not affine in
    one of them."""
    coeffs = []
    for x in xs:
        c = index.coeff(x)
        if not c.is_Integer or (index - c * x).has(x):
            return None
        coeffs.append(int(c))
    return coeffs


def _arguments(
    stages: list[Stage], layouts: dict[str, Layout], stored: set[str]
) -> list[BufferArg]:
    reads: list[str] = []
    writes: list[str] = []
    for st in stages:
        roots = [r.value for r in st.reductions] + [s.value for s in st.stores]
        for e in walk(roots):
            if isinstance(e, Load) and e.buffer not in reads:
                reads.append(e.buffer)
        for s in st.stores:
            if s.buffer not in writes:
                writes.append(s.buffer)
    args = [BufferArg(b, layouts[b], "inout" if b in writes else "in") for b in reads]
    args += [BufferArg(b, layouts[b], "out") for b in writes if b not in reads]
    return args


def kernel_size_args(sizes: tuple, stages: list[Stage], args: list) -> tuple:
    """The size symbols a kernel's ranges, indices and argument layouts use, by name."""
    exprs: list[Any] = [*sizes]
    for st in stages:
        exprs += [*st.sizes, *(s.index for s in st.stores)]
        exprs += [
            e.index
            for e in walk([r.value for r in st.reductions] + [s.value for s in st.stores])
            if isinstance(e, Load)
        ]
        exprs += [
            e.expr
            for e in walk([r.value for r in st.reductions] + [s.value for s in st.stores])
            if isinstance(e, IndexValue)
        ]
    for a in args:
        exprs += [*a.layout.sizes, *a.layout.strides, a.layout.offset]
    return tuple(sorted(size_symbols(*exprs), key=lambda s: s.name))


def kernel_name(g: Group, prefix: str = "k") -> str:
    """Readable: named after the ops it fuses."""
    ops = []
    for n in g.members:
        for o in n.origins:
            parts = o.split(": ", 1)[-1].split(".")
            short = parts[1] if len(parts) > 1 else parts[0]
            if short not in ops:
                ops.append(short)
    body = "_".join(ops[:4]) + ("_etc" if len(ops) > 4 else "")
    return f"{prefix}_{body}".replace("-", "_")[:60]

"""Inlining before fusion: cheap pointwise producers recomputed in their readers.

This runs once over the lowered nodes, before any group is formed (:func:`inline_producers`),
so fusion sees fewer buffers; the kernel builder reuses :func:`_value_at` to inline a group's
own members the same way (a producer's value at its reader's index, bounds checks kept).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import sympy
import torch

from ..ir.expr import (
    TRANSCENDENTAL,
    Expr,
    IndexValue,
    Load,
    Op,
    loads,
    rewrite,
    subs_index,
    walk,
)
from ..ir.graph import ExternNode, Node
from ..ir.index import numel_hint, size_hint
from ..lowering import cast

if TYPE_CHECKING:
    from sdk.plugin import KernelLimits

#: Largest expression (in nodes) recomputed per element where it is inlined.
_INLINE_MAX_NODES = 40
#: Most reads of a producer by its one, smaller reader for it to be inlined (a 3x3 window).
_INLINE_MAX_READS = 16
#: A producer is recomputed where it is gathered from when its readers read at most this
#: fraction of its elements.
_GATHER_RATIO = 8
#: Recompute a producer no narrower than what it reads (:func:`_narrow_reads`) in its readers.
RECOMPUTE_NARROW = True


def _transcendental(n: Node) -> bool:
    return any(isinstance(e, Op) and e.name in TRANSCENDENTAL for e in walk([n.value]))


def inline_producers(
    nodes: list[Node | ExternNode],
    keep: set[str],
    *,
    cheap_math: bool,
    limits: KernelLimits | None = None,
) -> list[Node | ExternNode]:
    """Recompute cheap pointwise nodes in their readers where storing them costs more.

    The producer must be cheap (at most ``_INLINE_MAX_NODES`` expression nodes), not a
    graph output and not read by a library call. Then it is inlined where:

    * it is a constant (the zeros nll's backward scatters into), read at any index;
    * it reads at most ``1/_GATHER_RATIO`` of what it stores (every load leaves out a
      loop of that many points: the scatter of one value per row into those zeros);
    * its readers visit at most ``1/_GATHER_RATIO`` of its points, also through a
      gathered index (the target's log-probability out of a log-softmax: recomputed
      from the logits and the row statistics, never stored);
    * every reader is larger and broadcasts it (BatchNorm's per-channel
      ``rsqrt(var + eps) * weight`` over (N, C, H, W): one pass instead of two
      kernels and a stored buffer, as Inductor inlines); with ``cheap_math`` False
      (a plugin without ``Preferences.cheap_transcendentals``) not when it computes a
      transcendental (``TRANSCENDENTAL``): a rotary embedding's cos/sin over
      (tokens, dims) would be recomputed for every head;
    * its one reader is a smaller window over it (max-pooling after BN + ReLU);
    * it is no narrower than what it reads (:func:`_narrow_reads`: a bf16 gradient cast to
      fp32, LayerNorm's normalized input) and read by several nodes: each reader reads no
      more recomputing it than loading it, and the store is saved.
      LayerNorm's backward then reads the bf16 gradient and input in its row kernel and
      again in its gamma and beta column sums, as Inductor's does, instead of storing two
      fp32 buffers for the column sums to read back.

    Loads at a linear index take only constants. A gathered load keeps its bounds check:
    the recomputed loads carry its bindings, or a probe load does (for a constant).
    Never where a reader would then read more buffers than the plugin's ``limits`` let one
    kernel take (counting the reader's own output).
    """
    nodes = _drop_dead(nodes, keep)
    computed = [n for n in nodes if isinstance(n, Node)]
    inliner = _Inliner(nodes, keep, cheap_math=cheap_math, limits=limits)
    # producers first, so a scatter whose zeros were inlined is itself recomputed where
    # read; then readers first, so broadcast chains collapse into their largest reader
    for p in computed:
        inliner.consider(p, all_rules=False)
    for p in reversed(computed):
        inliner.consider(p, all_rules=True)
    return [n for n in nodes if not (isinstance(n, Node) and n.name in inliner.dropped)]


class _Inliner:
    """What :func:`inline_producers` knows of the nodes as it inlines them: each buffer's
    readers, the buffers that must stay in memory, how each is read, what was inlined."""

    def __init__(
        self,
        nodes: list[Node | ExternNode],
        keep: set[str],
        *,
        cheap_math: bool,
        limits: KernelLimits | None,
    ) -> None:
        self.cheap_math = cheap_math
        self.limits = limits
        self.readers: dict[str, list[Node]] = {}
        self.pinned: set[str] = set(keep)  # must be in memory: outputs, what library calls read
        self.raw: set[str] = set()  # read at a linear index somewhere
        self.indirect: set[str] = set()  # read at a gathered index somewhere
        self.dropped: set[str] = set()
        for n in nodes:
            if isinstance(n, ExternNode):
                self.pinned |= n.reads
                continue
            self.classify(n)
            for ld in loads(n.value):
                lst = self.readers.setdefault(ld.buffer, [])
                if n not in lst:
                    lst.append(n)

    def classify(self, n: Node) -> None:
        for ld in loads(n.value):
            if not isinstance(ld.index, tuple):
                self.raw.add(ld.buffer)
            elif ld.binds:
                self.indirect.add(ld.buffer)

    def consider(self, p: Node, all_rules: bool) -> None:
        """Inline ``p`` into its readers if a rule allows it (``all_rules`` False: only a
        constant or an expanding producer)."""
        rs = self.readers.get(p.name, [])
        if (
            p.name in self.dropped
            or p.is_reduction
            or p.name in self.pinned
            or not rs
            or len(walk([p.value])) > _INLINE_MAX_NODES
        ):
            return
        if any(r.into is not None and r.into in p.reads for r in rs):
            return  # a write into a graph input reads it only where it writes (.mutation)
        indexed = any(isinstance(e, IndexValue) for e in walk([p.value]))
        # a constant (zeros that a scatter writes into): recomputing it reads nothing,
        # at any index; a gathered read of it keeps its bounds check through a probe
        constant = (
            not p.reads
            and not indexed
            and all(
                _probe(ld.binds) is not None
                for r in rs
                for ld in loads(r.value)
                if ld.buffer == p.name and ld.binds
            )
        )
        if not constant and (p.name in self.raw or (p.name in self.indirect and indexed)):
            return  # an index value cannot take a gathered index's bindings
        # it reads far less than it writes (a scatter of one value per row, once its
        # zeros are inlined): recomputing it where it is read costs a few cached loads,
        # storing it a full pass
        expanding = p.name not in self.indirect and _expanding(p)
        ok = constant or expanding
        if all_rules and not ok:
            ok = self.cheaper_recomputed(p, rs)
        if ok and self.within_limits(p, rs):
            self.inline(p, rs, constant)

    def cheaper_recomputed(self, p: Node, rs: list[Node]) -> bool:
        """The rules beyond a constant or an expanding producer: gathered from, broadcast
        into larger readers, or read through a small window."""
        reads = [sum(ld.buffer == p.name for ld in loads(r.value)) for r in rs]
        # a few elements gathered from it (the target's log-probability out of a
        # log-softmax over a vocabulary): recompute those instead of storing it all
        # (costs: symbolic sizes at the compiling call's values, ``size_hint``)
        pn = numel_hint(p.sizes)
        gather = all(_points(r) * k * _GATHER_RATIO <= pn for r, k in zip(rs, reads))
        broadcast = (
            p.name not in self.indirect
            and all(numel_hint(r.sizes) > pn for r in rs)
            and (self.cheap_math or not _transcendental(p))
        )
        # a window over it (max-pooling after BatchNorm + ReLU): recomputing a cheap
        # value a few times costs less than storing it and reading it back
        window = (
            p.name not in self.indirect
            and len(rs) == 1
            and not rs[0].is_reduction
            and numel_hint(rs[0].sizes) < pn
            and reads[0] <= _INLINE_MAX_READS
        )
        # no narrower than its reads, and read by several nodes: recomputing it reads no
        # more than loading it would, and its readers need not be one kernel to keep it out
        # of memory (a row kernel and a column sum cannot be). One reader is fusion's, which
        # the plugin may veto (sdk_can_fuse).
        narrow = (
            RECOMPUTE_NARROW
            and len(rs) > 1
            and p.name not in self.indirect
            and (self.cheap_math or not _transcendental(p))
            and _narrow_reads(p)
        )
        return gather or broadcast or window or narrow

    def within_limits(self, p: Node, rs: list[Node]) -> bool:
        """Whether every reader's kernel stays within the plugin's limits with ``p``'s reads."""
        if self.limits is None:
            return True
        for r in rs:
            n = len((r.reads - {p.name}) | p.reads)
            if self.limits.exceeded(n, 1, n + 1) is not None:
                return False
        return True

    def inline(self, p: Node, rs: list[Node], constant: bool) -> None:
        """Recompute ``p`` in each of its readers ``rs`` and drop it; nothing changes where a
        reader would still read it (a gathered read whose index is ``p`` itself, as an
        accumulating index_put's bounds check reads its indices: the probe that keeps the
        check reads ``p``)."""
        fn = _substitution(p, constant)
        values = [rewrite(r.value, fn) for r in rs]
        reads = [{ld.buffer for ld in loads(v)} for v in values]
        if any(p.name in rd for rd in reads):
            return
        for r, value, rd in zip(rs, values, reads):
            r.value, r.reads = value, rd
            r.origins.extend(o for o in p.origins if o not in r.origins)
            self.classify(r)
            for b in p.reads:
                lst = self.readers.setdefault(b, [])
                if r not in lst:
                    lst.append(r)
        for b in p.reads:
            if p in self.readers.get(b, []):
                self.readers[b].remove(p)
        self.dropped.add(p.name)


def _substitution(p: Node, constant: bool) -> Callable[[Expr], Expr | None]:
    """A :func:`rewrite` function that replaces each load of ``p`` by ``p``'s value there
    (one expression per distinct index)."""
    memo: dict[tuple, Expr] = {}

    def fn(e: Expr) -> Expr | None:
        if not (isinstance(e, Load) and e.buffer == p.name):
            return None
        key = (e.index, e.binds)
        hit = memo.get(key)
        if hit is None:
            if constant:
                hit = cast(p.value, p.dtype)
                probe = _probe(e.binds)
                if probe is not None:  # the value, once the bounds check has run
                    ran = Op("isnan", (cast(probe, torch.float32),), torch.bool)
                    hit = Op("where", (ran, hit, hit), p.dtype)
            else:
                # rounded to p's dtype, exactly as if it had been stored and loaded
                hit = cast(_value_at(p, e), p.dtype)
            memo[key] = hit
        return hit

    return fn


def _probe(binds: tuple) -> Load | None:
    """A load that runs the bounds checks of ``binds`` and reads an element that exists
    (one the first bound index was itself loaded from), or None if there is none."""
    if not binds:
        return None
    for _sym, value, _extent in binds:
        for ld in loads(value):
            if not ld.binds:
                return Load(ld.buffer, ld.index, ld.dtype, binds)
    return None


def _points(n: Node) -> int:
    """How many points ``n``'s loops visit (a reduction's inner loop included)."""
    return numel_hint(n.sizes) * numel_hint(n.rsizes)


def _expanding(p: Node) -> bool:
    """Does every load of ``p`` leave out one of its loops of at least ``_GATHER_RATIO``
    points (a broadcast read), so that it reads at most that fraction of what it stores?"""
    sizes = dict(zip(p.vars, p.sizes))
    lds = loads(p.value)
    return bool(lds) and all(_broadcast(ld, sizes) for ld in lds)


def _narrow_reads(p: Node) -> bool:
    """Do ``p``'s loads read at most as many bytes per point as ``p`` stores? A broadcast load
    (:func:`_broadcast`: a row's mean, a scalar) counts as none: it is read once per row or
    once in all, from the cache. Without a load at every point ``p`` is expanding instead
    (:func:`_expanding`)."""
    sizes = dict(zip(p.vars, p.sizes))
    nbytes, full = 0, False
    for ld in set(loads(p.value)):
        kind = _broadcast(ld, sizes)
        if kind is None:
            return False
        if not kind:
            nbytes += ld.dtype.itemsize
            full = True
    return full and nbytes <= p.dtype.itemsize


def _broadcast(ld: Load, sizes: dict[sympy.Symbol, object]) -> bool | None:
    """Does ``ld`` leave out one of the loops ``sizes`` of at least ``_GATHER_RATIO`` points?
    None for a gathered read (a bounds probe reads at a plain index)."""
    used = _index_symbols(ld)
    if used & {b[0] for b in ld.binds}:
        return None
    return any(size_hint(n) >= _GATHER_RATIO for v, n in sizes.items() if v not in used)


def _index_symbols(ld: Load) -> set[sympy.Symbol]:
    """The symbols ``ld``'s index uses (per-dimension or linear)."""
    if isinstance(ld.index, tuple):
        return set().union(*(sympy.sympify(i).free_symbols for i in ld.index))
    return set(ld.index.free_symbols)


def _value_at(p: Node, ld: Load) -> Expr:
    """``p``'s value where ``ld`` reads it (an index per dimension of ``p``). A gathered
    index's symbols reach the loads of ``p`` it is substituted into; each such load
    carries that binding (its value and extent), so the bounds check stays."""
    value = subs_index(p.value, dict(zip(p.vars, ld.index)))
    if not ld.binds:
        return value

    def fn(e: Expr) -> Expr | None:
        if not isinstance(e, Load):
            return None
        syms = _index_symbols(e)
        extra = tuple(b for b in ld.binds if b[0] in syms and b not in e.binds)
        return Load(e.buffer, e.index, e.dtype, e.binds + extra) if extra else None

    return rewrite(value, fn)


def _drop_dead(nodes: list[Node | ExternNode], keep: set[str]) -> list[Node | ExternNode]:
    """Computed nodes nothing reads and that are not kept (max-pooling's indices in
    inference), so they do not count as readers of what they read."""
    live = set(keep)
    out: list[Node | ExternNode] = []
    for n in reversed(nodes):
        if isinstance(n, Node) and n.name not in live:
            continue
        live |= n.reads
        out.append(n)
    return out[::-1]

"""The fusion scheduler: which lowered nodes share a kernel.

Every computed node starts as a group of its own. A group has an outer
iteration space ``X`` (the parallel loops) and, if it reduces, an inner space
``R``; size-1 dimensions are dropped from both. A node fits a group when it is
a reduction over ``(X, R)``, or pointwise over ``X`` (runs once per outer
point) or over ``X + R`` (runs inside the inner loop).

Candidates are pairs of groups that are connected (the second reads the
first: vertical fusion, which covers pointwise chains and reductions with
their prologue and epilogue) or read a common buffer (horizontal fusion of
siblings). Each is ranked by the bytes of memory traffic it saves, checked by
the core (compatible spaces, no cycle through a third group, every read of a
reduction result at the reader's own outer point, the plugin's capabilities)
and then put to the plugin's ``sdk_can_fuse`` veto. The best legal candidate
is merged and the search repeats. Ties break on graph order: deterministic.

Inside a group, pointwise nodes are inlined into their readers (recomputed,
never stored unless something outside the group or the graph's output needs
them) and reduction results become ``LocalRef`` s of later stages.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import sympy
import torch

from sdk.plugin import Capability, CompileContext, Support

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
from ..ir.graph import ExternNode, Node
from ..ir.index import numel_hint, simplify_divmod, size_hint, size_symbols, var
from ..ir.kernel import BufferArg, Kernel, Layout, Reduction, Stage, Store
from ..lowering import cast, reshape_reindex


@dataclass(frozen=True)
class FusionGroup:
    """What the plugin's ``sdk_can_fuse`` sees of a group (public, read-only)."""

    name: str
    origins: tuple[str, ...]
    sizes: tuple[int, ...]  # outer (parallel) iteration space, size-1 dims dropped
    reduction_sizes: tuple[int, ...]  # inner space; () for pointwise
    num_reductions: int
    num_nodes: int

    @property
    def is_reduction(self) -> bool:
        return self.num_reductions > 0


@dataclass(eq=False)
class Group:
    id: int
    members: list[Node]
    X: tuple[int, ...]
    R: tuple[int, ...]
    order: int  # position of the first member in the graph

    @property
    def names(self) -> set[str]:
        return {n.name for n in self.members}


@dataclass
class Decision:
    """One fusion the scheduler considered: for ``explain`` and the tests."""

    first: str
    second: str
    saved_bytes: int
    fused: bool
    reason: str = ""


def _squeeze(sizes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(s for s in sizes if s != 1)


def _space(node: Node) -> tuple[tuple[int, ...], tuple[int, ...]]:
    if node.is_reduction:
        return _squeeze(node.sizes), _squeeze(node.rsizes)
    return _squeeze(node.sizes), ()


def _fits(node: Node, X: tuple[int, ...], R: tuple[int, ...]) -> str | None:
    """'red', 'outer' or 'inner' when ``node`` fits a group over (X, R), else None."""
    if node.is_reduction:
        return "red" if _space(node) == (X, R) else None
    sq = _squeeze(node.sizes)
    if sq == X:
        return "outer"
    if R and sq == X + R:
        return "inner"
    # the same elements in another shape: a view merged or split dimensions
    if math.prod(sq) == math.prod(X):
        return "outer"
    if R and math.prod(sq) == math.prod(X) * math.prod(R) and _splits_at(sq, math.prod(X)):
        return "inner"
    if R and Counter(sq) == Counter(X + R):
        # the same dims in another order (a reduction over a leading dim reads its
        # producer transposed): the builder maps it through how the group reads it
        return "permuted"
    return None


def _splits_at(sizes: tuple[int, ...], n: int) -> bool:
    """Is ``n`` the product of a prefix of ``sizes`` (so the dims split there)?"""
    acc = 1
    for s in (1, *sizes):
        acc *= s
        if acc == n:
            return True
    return False


def _merged_space(a: Group, b: Group) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    for X, R in ((a.X, a.R), (b.X, b.R)):
        if all(_fits(n, X, R) for n in itertools.chain(a.members, b.members)):
            return X, R
    return None


#: Largest expression (in nodes) recomputed per element where it is inlined.
_INLINE_MAX_NODES = 40
#: Most reads of a producer by its one, smaller reader for it to be inlined (a 3x3 window).
_INLINE_MAX_READS = 16
#: A producer is recomputed where it is gathered from when its readers read at most this
#: fraction of its elements.
_GATHER_RATIO = 8


def _transcendental(n: Node) -> bool:
    return any(isinstance(e, Op) and e.name in TRANSCENDENTAL for e in walk([n.value]))


def inline_producers(
    nodes: list[Node | ExternNode], keep: set[str], *, cheap_math: bool
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
      (a plugin without ``Capability.CHEAP_TRANSCENDENTALS``) not when it computes a
      transcendental (``TRANSCENDENTAL``): a rotary embedding's cos/sin over
      (tokens, dims) would be recomputed for every head;
    * its one reader is a smaller window over it (max-pooling after BN + ReLU).

    Loads at a linear index take only constants. A gathered load keeps its bounds check:
    the recomputed loads carry its bindings, or a probe load does (for a constant).
    """
    nodes = _drop_dead(nodes, keep)
    computed = [n for n in nodes if isinstance(n, Node)]
    readers: dict[str, list[Node]] = {}
    pinned: set[str] = set(keep)  # must be in memory: outputs, what library calls read
    raw: set[str] = set()  # read at a linear index somewhere
    indirect: set[str] = set()  # read at a gathered index somewhere

    def classify(n: Node) -> None:
        for ld in loads(n.value):
            if not isinstance(ld.index, tuple):
                raw.add(ld.buffer)
            elif ld.binds:
                indirect.add(ld.buffer)

    for n in nodes:
        if isinstance(n, ExternNode):
            pinned |= n.reads
            continue
        classify(n)
        for ld in loads(n.value):
            lst = readers.setdefault(ld.buffer, [])
            if n not in lst:
                lst.append(n)
    dropped: set[str] = set()

    def consider(p: Node, all_rules: bool) -> None:
        rs = readers.get(p.name, [])
        if (
            p.name in dropped
            or p.is_reduction
            or p.name in pinned
            or not rs
            or len(walk([p.value])) > _INLINE_MAX_NODES
        ):
            return
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
        if not constant and (p.name in raw or (p.name in indirect and indexed)):
            return  # an index value cannot take a gathered index's bindings
        # it reads far less than it writes (a scatter of one value per row, once its
        # zeros are inlined): recomputing it where it is read costs a few cached loads,
        # storing it a full pass
        expanding = p.name not in indirect and _expanding(p)
        ok = constant or expanding
        if all_rules and not ok:
            reads = [sum(ld.buffer == p.name for ld in loads(r.value)) for r in rs]
            # a few elements gathered from it (the target's log-probability out of a
            # log-softmax over a vocabulary): recompute those instead of storing it all
            # (costs: symbolic sizes at the compiling call's values, ``size_hint``)
            pn = numel_hint(p.sizes)
            gather = all(_points(r) * k * _GATHER_RATIO <= pn for r, k in zip(rs, reads))
            broadcast = (
                p.name not in indirect
                and all(numel_hint(r.sizes) > pn for r in rs)
                and (cheap_math or not _transcendental(p))
            )
            # a window over it (max-pooling after BatchNorm + ReLU): recomputing a cheap
            # value a few times costs less than storing it and reading it back
            window = (
                p.name not in indirect
                and len(rs) == 1
                and not rs[0].is_reduction
                and numel_hint(rs[0].sizes) < pn
                and reads[0] <= _INLINE_MAX_READS
            )
            ok = gather or broadcast or window
        if not ok:
            return
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

        for r in rs:
            r.value = rewrite(r.value, fn)
            r.reads = {ld.buffer for ld in loads(r.value)}
            r.origins.extend(o for o in p.origins if o not in r.origins)
            classify(r)
            for b in p.reads:
                lst = readers.setdefault(b, [])
                if r not in lst:
                    lst.append(r)
        for b in p.reads:
            if p in readers.get(b, []):
                readers[b].remove(p)
        dropped.add(p.name)

    # producers first, so a scatter whose zeros were inlined is itself recomputed where
    # read; then readers first, so broadcast chains collapse into their largest reader
    for p in computed:
        consider(p, all_rules=False)
    for p in reversed(computed):
        consider(p, all_rules=True)
    return [n for n in nodes if not (isinstance(n, Node) and n.name in dropped)]


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
    if not lds:
        return False
    for ld in lds:
        used = _index_symbols(ld)
        if used & {b[0] for b in ld.binds}:
            return False  # a gathered read (a bounds probe reads at a plain index)
        if not any(size_hint(n) >= _GATHER_RATIO for v, n in sizes.items() if v not in used):
            return False
    return True


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


class Scheduler:
    def __init__(
        self,
        nodes: list[Node | ExternNode],
        ctx: CompileContext,
        hooks: Any,
        keep: set[str],
        fusion: bool = True,
    ) -> None:
        """``keep``: buffers that must be in memory (graph outputs)."""
        self.ctx, self.hooks, self.keep, self.fusion = ctx, hooks, set(keep), fusion
        if fusion:
            nodes = inline_producers(
                nodes, self.keep, cheap_math=ctx.has(Capability.CHEAP_TRANSCENDENTALS)
            )
        self.steps = nodes
        self.by_name: dict[str, Node] = {n.name: n for n in nodes if isinstance(n, Node)}
        #: buffer -> the computed nodes that read it
        self._readers: dict[str, list[Node]] = {}
        for n in self.by_name.values():
            for buf in n.reads:
                self._readers.setdefault(buf, []).append(n)
        self.index = {id(n): i for i, n in enumerate(nodes)}
        self.groups: list[Group] = [
            Group(i, [n], *_space(n), self.index[id(n)])
            for i, n in enumerate(x for x in nodes if isinstance(x, Node))
        ]
        self._ids = itertools.count(len(self.groups))
        self.decisions: list[Decision] = []
        self._refused: dict[tuple[int, int], str] = {}
        # buffers read raw (linear index) or by externs must be in memory
        self.raw_reads: set[str] = set()
        for n in nodes:
            if isinstance(n, ExternNode):
                self.raw_reads |= n.reads
            else:
                for ld in loads(n.value):
                    if not isinstance(ld.index, tuple):
                        self.raw_reads.add(ld.buffer)

    # -- the fusion loop ------------------------------------------------------

    def run(self) -> list[Group | ExternNode]:
        """Fuse greedily: the legal pair that saves the most bytes first, until none is left.

        The owner map, the group graph (``_succ``) and the candidate pairs are built
        once and updated at each merge from the merged group's own reads and readers;
        each equals what a rebuild from the members would give (the tests compare).
        """
        if not self.fusion:
            return self._ordered()
        owner = self._owner()
        self._succ = self._successors(owner)
        pairs = self._pairs(owner)
        by_id = {g.id: g for g in self.groups}
        while True:
            best = None
            for (ia, ib), saved in sorted(
                pairs.items(), key=lambda kv: (-kv[1], by_id[kv[0][0]].order, by_id[kv[0][1]].order)
            ):
                if (ia, ib) in self._refused:
                    continue
                a, b = by_id[ia], by_id[ib]
                why = self._legal(a, b, owner)
                if why is None:
                    verdicts = self.hooks.sdk_can_fuse(
                        ctx=self.ctx, first=self.public(a), second=self.public(b)
                    )
                    refusals = [v.reason for v in verdicts if isinstance(v, Support) and not v.ok]
                    if refusals:
                        why = f"refused by sdk:{self.ctx.plugin}: {'; '.join(refusals)}"
                if why is not None:
                    self._refused[(ia, ib)] = why
                    self.decisions.append(
                        Decision(self._label(a), self._label(b), saved, False, why)
                    )
                    continue
                best = (saved, a, b)
                break
            if best is None:
                break
            saved, a, b = best
            self.decisions.append(Decision(self._label(a), self._label(b), saved, True))
            g = self._merge(a, b)
            del by_id[a.id], by_id[b.id]
            by_id[g.id] = g
            for n in g.members:
                owner[n.name] = g
            self._contract(a, b, g)
            self._update_pairs(pairs, a, b, g, owner)
        return self._ordered()

    def _owner(self) -> dict[str, Group]:
        return {n.name: g for g in self.groups for n in g.members}

    def _saved(self, buf: str) -> int:
        """Bytes a vertical fusion over ``buf`` saves: its write and its read, or only the
        read where it must be in memory anyway."""
        nbytes = _nbytes(self.by_name[buf])
        return nbytes if buf in self.keep or buf in self.raw_reads else 2 * nbytes

    def _pairs(self, owner: dict[str, Group]) -> dict[tuple[int, int], int]:
        """Candidate pairs ``(first.id, second.id)`` (first earlier) -> bytes saved.

        Vertical: one reads what the other writes. Horizontal (1 byte, ranked after every
        vertical pair): both read a buffer no group writes (an input, an extern's result)
        that at most 8 groups read; a weight read everywhere makes no siblings.
        """
        pairs: dict[tuple[int, int], int] = {}
        for g in self.groups:
            self._vertical(pairs, g, owner)
        for buf in self._readers:
            if buf not in self.by_name:
                self._horizontal(pairs, buf, owner)
        return pairs

    def _vertical(
        self, pairs: dict[tuple[int, int], int], g: Group, owner: dict[str, Group]
    ) -> None:
        """Add the vertical pairs of ``g`` with the groups it reads."""
        for n in g.members:
            for buf in n.reads:
                a = owner.get(buf)
                if a is not None and a is not g:
                    self._link(pairs, a, g, buf)

    def _link(self, pairs: dict[tuple[int, int], int], a: Group, b: Group, buf: str) -> None:
        """Record that fusing ``a`` and ``b`` saves ``buf``'s traffic (the most of any buffer
        between them counts)."""
        key = (a.id, b.id) if a.order < b.order else (b.id, a.id)
        saved = self._saved(buf)
        if pairs.get(key, 0) < saved:
            pairs[key] = saved

    def _horizontal(
        self, pairs: dict[tuple[int, int], int], buf: str, owner: dict[str, Group]
    ) -> None:
        gs = list({id(g): g for g in (owner[n.name] for n in self._readers[buf])}.values())
        if len(gs) > 8:
            return
        for a, b in itertools.combinations(sorted(gs, key=lambda g: g.order), 2):
            pairs.setdefault((a.id, b.id), 1)

    def _update_pairs(
        self,
        pairs: dict[tuple[int, int], int],
        a: Group,
        b: Group,
        g: Group,
        owner: dict[str, Group],
    ) -> None:
        """``pairs`` after ``a`` and ``b`` became ``g``: the pairs of a and b go; g's vertical
        pairs (its reads, and its readers' reads of it) come first, then the horizontal
        pairs of every outside buffer g reads (fewer groups may read it now)."""
        gone = {a.id, b.id}
        for key in [k for k in pairs if k[0] in gone or k[1] in gone]:
            del pairs[key]
        self._vertical(pairs, g, owner)
        for n in g.members:
            for r in self._readers.get(n.name, ()):
                if owner[r.name] is not g:
                    self._link(pairs, g, owner[r.name], n.name)
        for buf in {buf for n in g.members for buf in n.reads if buf not in self.by_name}:
            self._horizontal(pairs, buf, owner)

    def _contract(self, a: Group, b: Group, g: Group) -> None:
        """The group graph with a and b merged into g (no edge from g to itself)."""
        succ = self._succ
        gone = {a.id, b.id}
        merged = (succ.pop(a.id, set()) | succ.pop(b.id, set())) - gone
        for s in succ.values():
            if s & gone:
                s -= gone
                s.add(g.id)
        if merged:
            succ[g.id] = merged

    def _legal(self, a: Group, b: Group, owner: dict[str, Group]) -> str | None:
        space = _merged_space(a, b)
        if space is None:
            return f"iteration spaces differ: {list(a.X)}x{list(a.R)} vs {list(b.X)}x{list(b.R)}"
        if self._path_through_other(a, b, owner):
            return "another kernel runs between them (fusing would form a cycle)"
        if not self.ctx.has(Capability.REDUCTIONS) and (a.R or b.R):
            return "the plugin does not declare the REDUCTIONS capability"
        members = a.members + b.members
        names = {n.name for n in members}
        for n in members:
            for ld in loads(n.value):
                if ld.buffer in names and not isinstance(ld.index, tuple):
                    return f"{n.name} reads {ld.buffer} through a computed address"
        trial = Group(
            -1, sorted(members, key=lambda n: self.index[id(n)]), *space, min(a.order, b.order)
        )
        try:
            levels = _Builder(self, trial).levels()
        except _NotFusable as exc:
            return str(exc)
        if max(levels.values(), default=0) > 0 and not self.ctx.has(Capability.MULTI_STAGE):
            return "needs several reduction stages; the plugin lacks MULTI_STAGE"
        return None

    def _successors(self, owner: dict[str, Group]) -> dict[Any, set[Any]]:
        succ: dict[Any, set[Any]] = {}
        for g in self.groups:
            for n in g.members:
                for buf in n.reads:
                    p = owner.get(buf)
                    if p is not None and p is not g:
                        succ.setdefault(p.id, set()).add(g.id)
        for p, gs in self._extern_edges(owner).items():
            succ.setdefault(p, set()).update(gs)
        return succ

    def _path_through_other(self, a: Group, b: Group, owner: dict[str, Group]) -> bool:
        """Does some group other than a and b lie on a path between them?"""
        succ = self._succ
        first, second = (a, b) if a.order < b.order else (b, a)
        stack = [s for s in succ.get(first.id, ()) if s != second.id]
        seen = set(stack)
        while stack:
            cur = stack.pop()
            if cur == second.id:
                return True
            for s in succ.get(cur, ()):
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return False

    def _extern_edges(self, owner: dict[str, Group]) -> dict[Any, set[Any]]:
        """Edges group -> extern -> group, with externs as pseudo-groups."""
        edges: dict[Any, set[Any]] = {}
        produced = {}
        for st in self.steps:
            if isinstance(st, ExternNode):
                key = ("extern", st.name)
                for buf in st.reads:
                    if buf in owner:
                        edges.setdefault(owner[buf].id, set()).add(key)
                    elif buf in produced:
                        edges.setdefault(produced[buf], set()).add(key)
                for out in st.outputs:
                    if out:
                        produced[out[0]] = key
        for g in self.groups:
            for n in g.members:
                for buf in n.reads:
                    if buf in produced:
                        edges.setdefault(produced[buf], set()).add(g.id)
        return edges

    def _merge(self, a: Group, b: Group) -> Group:
        X, R = _merged_space(a, b)
        members = sorted(a.members + b.members, key=lambda n: self.index[id(n)])
        g = Group(next(self._ids), members, X, R, min(a.order, b.order))
        self.groups = [x for x in self.groups if x is not a and x is not b] + [g]
        return g

    def _ordered(self) -> list[Group | ExternNode]:
        """Groups and externs in an order that respects every dependency."""
        owner = self._owner()
        items: list[Any] = list(self.groups) + [s for s in self.steps if isinstance(s, ExternNode)]
        produced_by: dict[str, Any] = dict(owner)
        for s in self.steps:
            if isinstance(s, ExternNode):
                for out in s.outputs:
                    if out:
                        produced_by[out[0]] = s
        deps: dict[int, set[int]] = {}
        for it in items:
            reads = (
                it.reads
                if isinstance(it, ExternNode)
                else set().union(*(n.reads for n in it.members))
            )
            deps[id(it)] = {
                id(produced_by[r]) for r in reads if r in produced_by and produced_by[r] is not it
            }
        pos = {id(it): (it.order if isinstance(it, Group) else self.index[id(it)]) for it in items}
        done: set[int] = set()
        out: list[Any] = []
        pending = sorted(items, key=lambda it: pos[id(it)])
        while pending:
            for i, it in enumerate(pending):
                if deps[id(it)] <= done:
                    out.append(it)
                    done.add(id(it))
                    del pending[i]
                    break
            else:  # pragma: no cover - the legality check prevents cycles
                raise RuntimeError("scheduler produced a dependency cycle")
        return out

    # -- views for plugins and reports --------------------------------------

    def public(self, g: Group) -> FusionGroup:
        return FusionGroup(
            name=self._label(g),
            origins=tuple(o for n in g.members for o in n.origins),
            sizes=g.X,
            reduction_sizes=g.R,
            num_reductions=sum(n.is_reduction for n in g.members),
            num_nodes=len(g.members),
        )

    def _label(self, g: Group) -> str:
        return "+".join(n.name for n in g.members)

    def stored(self, g: Group, owner: dict[str, Group] | None = None) -> set[str]:
        """Buffers of ``g`` that must be written to memory."""
        owner = owner or self._owner()
        need = set()
        for n in g.members:
            if n.name in self.keep or n.name in self.raw_reads:
                need.add(n.name)
        for other in self.groups:
            if other is g:
                continue
            for n in other.members:
                need |= n.reads & g.names
        return need


class _NotFusable(Exception):
    pass


class _Builder:
    """Turns a group into one kernel."""

    def __init__(self, sched: Scheduler, group: Group) -> None:
        self.s, self.g = sched, group
        self.xs = tuple(var(f"x{i}") for i in range(len(group.X)))
        self.rs = tuple(var(f"r{i}") for i in range(len(group.R)))
        self.members = {n.name: n for n in group.members}
        self._resolved: dict[str, Expr] = {}
        self._level: dict[str, int] = {}
        self._inlined: dict[tuple, Expr] = {}
        self._mapping_stack: set[str] = set()

    def _mapping(self, node: Node) -> dict[sympy.Symbol, sympy.Expr]:
        """Node vars -> group vars (size-1 dims -> 0)."""
        kind = _fits(node, self.g.X, self.g.R)
        if kind is None:
            raise _NotFusable(f"{node.name} does not fit the group's loops")
        if kind == "permuted":
            return self._mapping_from_readers(node)
        if kind == "red":
            coords = iter(self.xs + self.rs)
        else:
            target = self.g.X if kind == "outer" else self.g.X + self.g.R
            gvars = self.xs if kind == "outer" else self.xs + self.rs
            sq = _squeeze(node.sizes)
            if sq == target:
                coords = iter(gvars)
            else:  # another shape of the same elements: unravel the group's index
                coords = iter(reshape_reindex(sq, target)(gvars))
        mapping: dict[sympy.Symbol, sympy.Expr] = {}
        for v, s in zip(node.vars, node.sizes):
            mapping[v] = sympy.Integer(0) if s == 1 else next(coords)
        group_vars = coords
        if node.is_reduction:
            for v, s in zip(node.rvars, node.rsizes):
                mapping[v] = sympy.Integer(0) if s == 1 else next(group_vars)
        return mapping

    def _mapping_from_readers(self, node: Node) -> dict[sympy.Symbol, sympy.Expr]:
        """Node vars -> group vars, taken from a group member that reads ``node`` with
        every one of the group's loops in some position of the index (a transpose)."""
        if node.name in self._mapping_stack:
            raise _NotFusable(f"{node.name} is read only through itself")
        self._mapping_stack.add(node.name)
        try:
            wanted = set(self.xs + self.rs)
            for r in self.g.members:
                if r is node or node.name not in r.reads:
                    continue
                try:
                    rm = self._mapping(r)
                except _NotFusable:
                    continue
                for ld in loads(r.value):
                    if ld.buffer != node.name or not isinstance(ld.index, tuple) or ld.binds:
                        continue
                    idx = [sympy.expand(sympy.sympify(i).xreplace(rm)) for i in ld.index]
                    used = [i for i, sz in zip(idx, node.sizes) if sz != 1]
                    if set(used) == wanted and len(used) == len(wanted):
                        return {
                            v: (sympy.Integer(0) if sz == 1 else i)
                            for v, i, sz in zip(node.vars, idx, node.sizes)
                        }
        finally:
            self._mapping_stack.discard(node.name)
        raise _NotFusable(
            f"{node.name} is a transpose of the group's loops that no member reads plainly"
        )

    def store_index(self, node: Node) -> tuple[sympy.Expr, ...]:
        m = self._mapping(node)
        return tuple(m[v] for v in node.vars)

    def resolved(self, node: Node) -> Expr:
        """The node's value in group vars, with group-local reads inlined or LocalRef'd."""
        hit = self._resolved.get(node.name)
        if hit is not None:
            return hit
        expr = subs_index(node.value, self._mapping(node))
        expr = self._resolve_reads(expr)
        self._resolved[node.name] = expr
        return expr

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
                    at = _value_at(p, e)
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

        for n in self.g.members:
            if n.is_reduction:
                lvl = self._level[n.name]
                value = self.resolved(n)
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
                value = n.store_value(self.resolved(n))
                kind = _fits(n, self.g.X, self.g.R)
                need = self._needs(value)
                stage = (
                    inner_stage(need + 1) if kind in ("inner", "permuted") else outer_stage(need)
                )
                stage.stores.append(
                    Store(n.name, layouts[n.name].linear(self.store_index(n)), value)
                )
        if self.s.ctx.has(Capability.STORE_THEN_LOAD):
            self._reuse_across_stages(inner, layouts)
        stages: list[Stage] = []
        top = max(list(inner) + list(outer) + [-1])
        for lvl in range(-1, top + 1):
            if lvl in inner:
                stages.append(inner[lvl])
            if lvl in outer:
                stages.append(outer[lvl])
        stages = [_linearize(st, layouts) for st in stages]
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


_EXPENSIVE = frozenset(
    {
        "exp",
        "exp2",
        "expm1",
        "log",
        "log2",
        "log10",
        "log1p",
        "tanh",
        "sigmoid",
        "erf",
        "erfc",
        "pow",
        "sin",
        "cos",
        "tan",
        "asin",
        "acos",
        "atan",
        "sinh",
        "cosh",
        "asinh",
        "acosh",
        "atanh",
        "atan2",
        "sqrt",
        "rsqrt",
    }
)


def _expensive(e: Expr) -> bool:
    return any(isinstance(n, Op) and n.name in _EXPENSIVE for n in walk([e]))


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
    best: tuple[int, int, sympy.Expr] | None = None
    wanted = set(xs)
    for st in stages:
        accesses = [(s.buffer, s.index, 1) for s in st.stores]
        for e in walk([r.value for r in st.reductions] + [s.value for s in st.stores]):
            if isinstance(e, Load) and not e.binds and not isinstance(e.index, tuple):
                accesses.append((e.buffer, e.index, 0))
        for buf, index, is_store in accesses:
            index = sympy.sympify(index)
            if not index.free_symbols & wanted:
                continue
            key = (numel_hint(layouts[buf].sizes), is_store)
            if best is None or key > best[:2]:
                best = (*key, index)
    if best is None:
        return xs, sizes
    index = sympy.expand(best[2])
    coeffs = []
    for x in xs:
        c = index.coeff(x)
        if not c.is_Integer or (index - c * x).has(x):
            return xs, sizes  # not affine in this loop (a reshape's div/mod): keep
        coeffs.append(int(c))
    big = max(abs(c) for c in coeffs) + 1
    order = sorted(range(len(xs)), key=lambda i: -(abs(coeffs[i]) or big))
    if order == list(range(len(xs))):
        return xs, sizes
    return tuple(xs[i] for i in order), tuple(sizes[i] for i in order)


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


def _nbytes(node: Node) -> int:
    return numel_hint(node.sizes) * node.dtype.itemsize


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


__all__ = ["Decision", "FusionGroup", "Group", "Scheduler", "kernel_name"]

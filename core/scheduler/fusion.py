"""The fusion search: which groups merge, best saving first.

:class:`Scheduler` starts from one group per computed node (after :func:`inline_producers`),
ranks the candidate pairs by the bytes a merge saves, checks each (:meth:`Scheduler._legal`,
then the plugin's ``sdk_can_fuse``) and merges the best legal one until none is left. It
records every decision for ``explain`` and orders the groups and externs for the program.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import sympy

from sdk.plugin import Capability, CompileContext, KernelLimits, Support

from ..ir.expr import Expr, IndexValue, Load, loads, walk
from ..ir.graph import ExternNode, Node
from ..ir.index import numel_hint
from ..ir.kernel import FusionGroup
from .builder import Memo, _Builder, _NotFusable
from .groups import Decision, Group, _merged_space, _space
from .inline import inline_producers


class Scheduler:
    def __init__(
        self,
        nodes: list[Node | ExternNode],
        ctx: CompileContext,
        hooks: Any,
        keep: set[str],
        fusion: bool = True,
        copies: dict[str, str] | None = None,
    ) -> None:
        """``keep``: buffers that must be in memory (graph outputs); ``copies``: buffers
        made from another as the library call that makes that one returns (a host value's
        device copy, ``Lowerer.host``), which their readers read after that call."""
        self.ctx, self.hooks, self.keep, self.fusion = ctx, hooks, set(keep), fusion
        #: buffer -> the copies made of it right after the library call that returns it
        self._copies: dict[str, list[str]] = {}
        for copy, source in (copies or {}).items():
            self._copies.setdefault(source, []).append(copy)
        self.limits = kernel_limits(ctx, hooks)
        #: whether the plugin has an sdk_can_fuse to ask (else no views are built for it)
        self._asks = getattr(hooks, "implements", lambda hook: True)("sdk_can_fuse")
        if fusion:
            nodes = inline_producers(
                nodes,
                self.keep,
                cheap_math=ctx.preferences.cheap_transcendentals,
                limits=self.limits,
            )
        self.steps = nodes
        self.by_name: dict[str, Node] = {n.name: n for n in nodes if isinstance(n, Node)}
        #: buffer -> the computed nodes that read it
        self._readers: dict[str, list[Node]] = {}
        for n in self.by_name.values():
            for buf in n.reads:
                self._readers.setdefault(buf, []).append(n)
        self.index = {id(n): i for i, n in enumerate(nodes)}
        #: graph input -> the steps that write it in place (``into``: core/lowering/mutation)
        self.writers: dict[str, list[Node | ExternNode]] = {}
        for n in nodes:
            if n.into is not None:
                self.writers.setdefault(n.into, []).append(n)
        self.groups: list[Group] = [
            Group(i, [n], *_space(n), self.index[id(n)])
            for i, n in enumerate(x for x in nodes if isinstance(x, Node))
        ]
        self._ids = itertools.count(len(self.groups))
        #: the candidate pairs by rank, as (-bytes saved, first order, second order, first
        #: id, second id); an entry is pushed whenever a pair is added or saves more
        self._heap: list[tuple[int, int, int, int, int]] = []
        self.decisions: list[Decision] = []
        self._refused: dict[tuple[int, int], str] = {}
        #: group id -> its public view (a group never changes; a merge makes a new one)
        self._views: dict[int, FusionGroup] = {}
        #: the last merge _legal allowed, and the builder that resolved it
        self._trial: tuple[Group, _Builder] | None = None
        #: shared by every builder of this search (a trial's work on its nodes, kept)
        self._memo = Memo()
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
        while self._heap:
            # the best pair: most bytes saved, then graph order (entries for pairs merged
            # away, refused, or saving more since are passed over)
            neg, _, _, ia, ib = heapq.heappop(self._heap)
            saved = pairs.get((ia, ib))
            if saved != -neg or (ia, ib) in self._refused:
                continue
            a, b = by_id[ia], by_id[ib]
            why, by = self._legal(a, b, owner), "core"
            if why is None:
                why, by = self._verdict(a, b), "plugin"
            if why is not None:
                self._refused[(ia, ib)] = why
                self.decisions.append(
                    Decision(self._label(a), self._label(b), saved, False, why, by)
                )
                continue
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
        vertical pair): both read a buffer that at most 8 groups other than its writer read
        (an input, an extern's result, or a buffer they cannot fuse with the writer of:
        LayerNorm's gamma and beta column sums of the gradient its row kernel writes); a
        weight read everywhere makes no siblings.
        """
        pairs: dict[tuple[int, int], int] = {}
        for g in self.groups:
            self._vertical(pairs, g, owner)
        for buf in self._readers:
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
        first, second = (a, b) if a.order < b.order else (b, a)
        key = (first.id, second.id)
        saved = self._saved(buf)
        if pairs.get(key, 0) < saved:
            pairs[key] = saved
            heapq.heappush(self._heap, (-saved, first.order, second.order, *key))

    def _horizontal(
        self, pairs: dict[tuple[int, int], int], buf: str, owner: dict[str, Group]
    ) -> None:
        writer = owner.get(buf)
        gs = list(
            {
                id(g): g for g in (owner[n.name] for n in self._readers[buf]) if g is not writer
            }.values()
        )
        if len(gs) > 8:
            return
        for a, b in itertools.combinations(sorted(gs, key=lambda g: g.order), 2):
            if (a.id, b.id) not in pairs:
                pairs[(a.id, b.id)] = 1
                heapq.heappush(self._heap, (-1, a.order, b.order, a.id, b.id))

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
        pairs of every buffer g reads (fewer groups may read it now)."""
        gone = {a.id, b.id}
        for key in [k for k in pairs if k[0] in gone or k[1] in gone]:
            del pairs[key]
        self._vertical(pairs, g, owner)
        for n in g.members:
            for r in self._readers.get(n.name, ()):
                if owner[r.name] is not g:
                    self._link(pairs, g, owner[r.name], n.name)
        for buf in {buf for n in g.members for buf in n.reads}:
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
            for ld in self._memo.loads(n):
                if ld.buffer in names and not isinstance(ld.index, tuple):
                    return f"{n.name} reads {ld.buffer} through a computed address"
        trial = Group(
            -1, sorted(members, key=lambda n: self.index[id(n)]), *space, min(a.order, b.order)
        )
        builder = _Builder(self.ctx, trial, self._memo)
        try:
            levels = builder.levels()
        except _NotFusable as exc:
            return str(exc)
        if max(levels.values(), default=0) > 0 and not self.ctx.has(Capability.MULTI_STAGE):
            return "needs several reduction stages; the plugin lacks MULTI_STAGE"
        why = _write_hazard(trial, builder)
        if why is not None:
            return why
        self._trial = (trial, builder)
        return None

    def _verdict(self, a: Group, b: Group) -> str | None:
        """The plugin's say on a fusion the core found legal (the last one :meth:`_legal`
        allowed): its kernel limits, then its ``sdk_can_fuse`` vetoes. None: it may fuse."""
        if self.limits is None and not self._asks:
            return None
        assert self._trial is not None
        merged = self._view(*self._trial)
        if self.limits is not None:
            over = self.limits.exceeded(len(merged.inputs), len(merged.outputs), merged.buffers)
            if over is not None:
                return f"the fused kernel would take {over} (sdk:{self.ctx.plugin}'s sdk_kernel_limits)"
        if not self._asks:
            return None
        verdicts = self.hooks.sdk_can_fuse(
            ctx=self.ctx, first=self.public(a), second=self.public(b), merged=merged
        )
        refusals = [v.reason for v in verdicts if isinstance(v, Support) and not v.ok]
        if refusals:
            return f"refused by sdk:{self.ctx.plugin}: {'; '.join(refusals)}"
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
        for p, gs in self._write_after_read(owner).items():
            succ.setdefault(p, set()).update(gs)
        return succ

    def _write_after_read(self, owner: dict[str, Group]) -> dict[Any, set[Any]]:
        """Edges reader -> writer for each graph input written in place: every other
        step that reads the input runs before the step that writes it (groups by id,
        library calls as ``("extern", name)``)."""
        edges: dict[Any, set[Any]] = {}

        def key(step: Node | ExternNode) -> Any:
            return ("extern", step.name) if isinstance(step, ExternNode) else owner[step.name].id

        extern_readers: dict[str, list[ExternNode]] = {}
        for st in self.steps:
            if isinstance(st, ExternNode):
                for buf in st.reads & self.writers.keys():
                    extern_readers.setdefault(buf, []).append(st)
        for buf, writers in self.writers.items():
            readers = [*self._readers.get(buf, ()), *extern_readers.get(buf, ())]
            for w in writers:
                for r in readers:
                    if r is not w and key(r) != key(w):
                        edges.setdefault(key(r), set()).add(key(w))
        return edges

    def _path_through_other(self, a: Group, b: Group, owner: dict[str, Group]) -> bool:
        """Does some group or library call other than a and b lie on a path between them,
        either way? A merged group's ``order`` is its first member's, so the later one by
        order may still feed the earlier (through a library call that reads one and is read
        by a later member of the other)."""
        return self._reaches(a, b) or self._reaches(b, a)

    def _reaches(self, src: Group, dst: Group) -> bool:
        """Is there a path src -> (something other than dst) -> ... -> dst?"""
        succ = self._succ
        stack = [s for s in succ.get(src.id, ()) if s != dst.id]
        seen = set(stack)
        while stack:
            cur = stack.pop()
            if cur == dst.id:
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
                for buf in self._made_by(st):
                    produced[buf] = key
        for g in self.groups:
            for n in g.members:
                for buf in n.reads:
                    if buf in produced:
                        edges.setdefault(produced[buf], set()).add(g.id)
        return edges

    def _made_by(self, step: ExternNode) -> list[str]:
        """The buffers a library call makes: its outputs, and their copies (``copies``)."""
        return [b for out in step.outputs if out for b in (out[0], *self._copies.get(out[0], ()))]

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
                for buf in self._made_by(s):
                    produced_by[buf] = s
        deps: dict[int, set[int]] = {}
        readers_of: dict[str, list[Any]] = {}  # (of the inputs written in place)
        for it in items:
            reads = (
                it.reads
                if isinstance(it, ExternNode)
                else set().union(*(n.reads for n in it.members))
            )
            deps[id(it)] = {
                id(produced_by[r]) for r in reads if r in produced_by and produced_by[r] is not it
            }
            for buf in reads & self.writers.keys():
                readers_of.setdefault(buf, []).append(it)
        # a step that writes a graph input in place runs after every other reader of it
        for buf, writers in self.writers.items():
            readers = readers_of.get(buf, [])
            for w in writers:
                wi = owner[w.name] if isinstance(w, Node) else w
                deps[id(wi)] |= {id(r) for r in readers if r is not wi}
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
        """``g`` as the plugin sees it, its inputs and outputs those of its own kernel."""
        view = self._views.get(g.id)
        if view is None:
            view = self._views[g.id] = self._view(g, _Builder(self.ctx, g, self._memo))
        return view

    def _view(self, g: Group, builder: _Builder) -> FusionGroup:
        """The public view of ``g`` (a group, or a trial merge that ``builder`` resolved).

        Outputs: the members something outside the group reads (another group, a library
        call, the graph's outputs), as :meth:`stored` finds them. Inputs: the buffers the
        kernel's stored values and reductions load once the group's own members are
        inlined or kept in registers, which is what its ``Kernel.args`` read."""
        names = g.names
        outputs = [
            n.name
            for n in g.members
            if n.name in self.keep
            or n.name in self.raw_reads
            or any(r.name not in names for r in self._readers.get(n.name, ()))
        ]
        kept = set(outputs)
        along = False
        try:
            roots: list[Expr] = [
                builder.resolved(n) for n in g.members if n.is_reduction or n.name in kept
            ]
            inputs = sorted(_loaded(roots))
            along = _gathers_along(roots, set(builder.rs))
        except _NotFusable:  # pragma: no cover - a group the search made always builds
            inputs = sorted({buf for n in g.members for buf in n.reads} - names)
        return FusionGroup(
            name=self._label(g),
            origins=tuple(o for n in g.members for o in n.origins),
            sizes=g.X,
            reduction_sizes=g.R,
            num_reductions=sum(n.is_reduction for n in g.members),
            num_nodes=len(g.members),
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            gathers_along_reduction=along,
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


def _write_hazard(g: Group, builder: _Builder) -> str | None:
    """Why one kernel for ``g`` could read a graph input that it also writes at another
    element than the one it writes (one program's store racing another's load), or None.
    Every read of such an input, inlined members' included, must be of the element the
    kernel's writer stores, at a plain index."""
    for w in g.members:
        if w.into is None:
            continue
        target = sympy.expand(w.layout.linear(builder.store_index(w)))
        for n in g.members:
            for ld in loads(builder.resolved(n)):
                if ld.buffer != w.into:
                    continue
                index = sympy.sympify(ld.index) if not isinstance(ld.index, tuple) else None
                if ld.binds or index is None or sympy.expand(index - target) != 0:
                    return (
                        f"{n.name} reads input {w.into} at other elements than {w.name} "
                        "writes into it"
                    )
    return None


def _gathers_along(roots: list[Expr], rvars: set[sympy.Symbol]) -> bool:
    """Does a load of ``roots`` take an index computed from values that change along the
    reduction loops ``rvars`` (a pooling window's backward summed over the points it
    writes)? A gather whose index is the same along the reduction (an embedding's row,
    summed over its features) is not one."""
    if not rvars:
        return False
    for ld in _walk_loads(roots):
        for _sym, value, _extent in ld.binds:
            if _index_symbols([value]) & rvars:
                return True
    return False


def _walk_loads(roots: list[Expr]) -> list[Load]:
    """The loads of the expressions (each shared subexpression visited once)."""
    seen: set[int] = set()
    out: list[Load] = []
    stack = list(roots)
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, Load):
            out.append(e)
        stack.extend(e.children())
    return out


def _index_symbols(exprs: list[Expr]) -> set[sympy.Symbol]:
    """The loop variables the expressions' values depend on: in index values and in the
    indices of their loads."""
    out: set[sympy.Symbol] = set()
    for e in walk(exprs):
        if isinstance(e, IndexValue):
            out |= e.expr.free_symbols
        elif isinstance(e, Load):
            index = e.index if isinstance(e.index, tuple) else (e.index,)
            for i in index:
                out |= sympy.sympify(i).free_symbols
    return out


def _loaded(roots: list[Expr]) -> set[str]:
    """The buffers the expressions load."""
    return {ld.buffer for ld in _walk_loads(roots)}


def kernel_limits(ctx: CompileContext, hooks: Any) -> KernelLimits | None:
    """The plugin's ``sdk_kernel_limits`` answer, checked."""
    limits = hooks.sdk_kernel_limits(ctx=ctx)
    if limits is not None and not isinstance(limits, KernelLimits):
        raise TypeError(
            f"sdk:{ctx.plugin} sdk_kernel_limits returned {type(limits).__name__}; return "
            "an sdk.KernelLimits (or None for no limit)"
        )
    return limits


def _nbytes(node: Node) -> int:
    return numel_hint(node.sizes) * node.dtype.itemsize

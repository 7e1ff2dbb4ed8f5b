"""Memory planning for one program: allocations, reuse of dead buffers, in-place kernels.

Walking the program in order, each buffer a kernel writes is

* written *in place* over an input of the same kernel when that input is a
  temporary that dies here, has the same layout, and every load of it reads
  exactly the element being stored (a pointwise kernel), or else
* carved from a dead temporary of the same dtype and storage size, or else
* freshly allocated.

A library call whose in-place form does what its functional form does to a copy of its
first argument (``IN_PLACE_FORMS``) runs in place over that argument when it is a
temporary dying at the call, read through that argument alone, in the output's layout:
its output is that buffer, and the copy is skipped.

Graph inputs and buffers that are (or back) outputs are never reused. A kernel that writes
a graph input in place (core/lowering/mutation.py) writes into the input itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import sympy

from .ir.expr import Load, walk
from .ir.graph import ExternNode, StorageView
from .ir.kernel import Kernel, Layout
from .lowering import COLLECTIVE_OPS, IN_PLACE_FORMS


@dataclass(frozen=True)
class Alias:
    """``dst`` is ``src``'s tensor (in place, or the same view of a reused buffer)."""

    dst: str
    src: str


@dataclass(frozen=True)
class Carve:
    """``dst`` is a view of the dead buffer ``src`` (a pooled root, at offset 0)."""

    dst: str
    src: str
    layout: Layout


@dataclass(frozen=True)
class Allocate:
    """``dst`` gets memory of its own (a flat buffer viewed at the layout's offset)."""

    dst: str
    layout: Layout


@dataclass(frozen=True)
class Free:
    buffer: str


Entry = Alias | Carve | Allocate | Free


@dataclass
class MemoryPlan:
    before: dict[int, list[Entry]] = field(default_factory=dict)  # step -> entries
    after: dict[int, list[Entry]] = field(default_factory=dict)
    reused: int = 0
    in_place: int = 0
    allocated: int = 0
    #: step -> the in-place op an extern runs instead of its functional one
    extern_in_place: dict[int, Any] = field(default_factory=dict)


def step_reads(step: Any) -> set[str]:
    if isinstance(step, Kernel):
        return {a.name for a in step.args if a.role == "in"}
    return set(step.reads)


def step_writes(step: Any) -> list[str]:
    if isinstance(step, Kernel):
        return [a.name for a in step.args if a.role != "in"]  # "inout": written, read back
    return [o[0] for o in step.outputs if o]


def _buffers(x: Any) -> set[str]:
    if isinstance(x, StorageView):
        return {x.buffer}
    if isinstance(x, (list, tuple)):
        return set().union(*(_buffers(y) for y in x))
    if isinstance(x, dict):
        return _buffers(list(x.values()))
    return set()


def _in_place_ok(k: Kernel, src: str, dst: str) -> bool:
    if k.is_reduction or len(k.stages) != 1 or k.stages[0].vars:
        return False
    stores = [s for s in k.stages[0].stores if s.buffer == dst]
    if len(stores) != 1 or len(k.stages[0].stores) != 1:
        return False
    target = sympy.expand(stores[0].index)
    for e in walk([s.value for s in k.stages[0].stores]):
        if isinstance(e, Load) and e.buffer == src and (e.binds or sympy.expand(e.index) != target):
            return False
    return True


def _last_uses(program: list[Kernel | ExternNode]) -> dict[str, int]:
    """Buffer -> the index of the last step that reads or writes it."""
    last_use: dict[str, int] = {}
    for i, step in enumerate(program):
        for b in step_reads(step) | set(step_writes(step)):
            last_use[b] = i
    return last_use


def _recyclable(program: list[Kernel | ExternNode], keep: set[str], inputs: set[str]) -> set[str]:
    """The buffers whose memory may serve another once they die."""
    # only buffers our kernels write are ours to recycle: an extern's output
    # may alias one of its inputs
    ours = {b for step in program if isinstance(step, Kernel) for b in step_writes(step)}
    # an op run through the fallback may return a view of what it reads, and a collective
    # may read its inputs until its wait: never recycle those
    pinned = {
        b
        for step in program
        if isinstance(step, ExternNode)
        and (step.fallback_reason is not None or step.target in COLLECTIVE_OPS)
        for b in step.reads
    }
    return ours - keep - inputs - pinned


@dataclass
class _Planner:
    """The walk of :func:`plan_memory`: what it knows of the program, and what it has decided
    so far (``alias_of``: a buffer that backs another, in place or reused, must live as long
    as it; ``pool``: dead roots by (dtype, storage size, device))."""

    layouts: dict[str, Layout]
    keep: set[str]
    written: dict[str, str]
    last_use: dict[str, int]
    recyclable: set[str]
    plan: MemoryPlan = field(default_factory=MemoryPlan)
    alias_of: dict[str, str] = field(default_factory=dict)
    pool: dict[tuple, list[str]] = field(default_factory=dict)

    def key(self, name: str) -> tuple:
        lay = self.layouts[name]
        return (lay.dtype, lay.storage_size, lay.device)

    def dies_at(self, name: str, i: int) -> bool:
        return name in self.recyclable and self.last_use.get(name) == i

    def extern_target(self, step: ExternNode, i: int) -> str | None:
        """The buffer the extern at step ``i`` may update in place (IN_PLACE_FORMS), if any."""
        if (
            step.target not in IN_PLACE_FORMS
            or step.fallback_reason is not None
            or step.multi_output
            or len(step.outputs) != 1
            or not step.outputs[0]
            or not step.args
            or not isinstance(step.args[0], StorageView)
        ):
            return None
        first, (dst, lay) = step.args[0], step.outputs[0]
        src = first.buffer
        if not (self.dies_at(src, i) and first.layout == self.layouts[src] == lay):
            return None
        if src in _buffers(step.args[1:]) | _buffers(step.kwargs):
            return None  # an operand overlapping what the op writes
        if dst in self.keep and src in self.alias_of:
            return None  # outputs get memory of their own, as kernels' do
        return src

    def place_extern(self, step: ExternNode, i: int, lines: list[Entry]) -> None:
        """Run the extern at step ``i`` in place over its dying first argument, where it can."""
        if (src := self.extern_target(step, i)) is None:
            return
        dst = step.outputs[0][0]
        self.alias_of[dst] = src
        lines.append(Alias(dst, src))
        self.plan.extern_in_place[i] = IN_PLACE_FORMS[step.target]
        self.plan.in_place += 1

    def place_kernel(self, step: Kernel, i: int, lines: list[Entry]) -> None:
        """Memory for each buffer the kernel at step ``i`` writes: the written graph input,
        a dying input in place, a pooled dead buffer, or a fresh allocation."""
        dying = [a.name for a in step.args if a.role == "in" and self.dies_at(a.name, i)]
        for dst in step_writes(step):
            if dst in self.written:  # the input's own memory (their layouts are one)
                lines.append(Alias(dst, self.written[dst]))
                continue
            lay = self.layouts[dst]
            src = next(
                (
                    s
                    for s in dying
                    if self.layouts[s] == lay
                    and dst not in self.keep
                    and _in_place_ok(step, s, dst)
                ),
                None,
            )
            if src is not None:
                dying.remove(src)
                self.alias_of[dst] = src
                lines.append(Alias(dst, src))
                self.plan.in_place += 1
                continue
            cands = self.pool.get(self.key(dst)) if dst not in self.keep else None
            if cands:
                src = cands.pop()
                self.alias_of[dst] = src
                if self.layouts[src] == lay:  # the same view: no new tensor needed
                    lines.append(Alias(dst, src))
                else:  # pooled roots have offset 0: the increment is the offset
                    lines.append(Carve(dst, src, lay))
                self.plan.reused += 1
            else:
                lines.append(Allocate(dst, lay))
                self.plan.allocated += 1

    def release(self, step: Kernel | ExternNode, i: int, after: list[Entry]) -> None:
        """Pool (or free, at a nonzero offset) each buffer that dies at step ``i``."""
        for b in sorted(step_reads(step) | set(step_writes(step))):
            if self.dies_at(b, i) and b not in self.alias_of.values():
                if self.layouts[b].offset == 0:  # (a symbolic offset is not 0)
                    self.pool.setdefault(self.key(b), []).append(b)
                else:
                    after.append(Free(b))


def plan_memory(
    program: list[Kernel | ExternNode],
    layouts: dict[str, Layout],
    keep: set[str],
    inputs: set[str],
    written: dict[str, str] | None = None,
) -> MemoryPlan:
    """``written``: buffer -> the graph input it is (a kernel writing that input in place:
    core/lowering/mutation.py)."""
    written = written or {}
    keep = keep | set(written)
    planner = _Planner(
        layouts, keep, written, _last_uses(program), _recyclable(program, keep, inputs)
    )
    plan = planner.plan
    for i, step in enumerate(program):
        lines = plan.before.setdefault(i, [])
        if isinstance(step, ExternNode):
            planner.place_extern(step, i, lines)
        if isinstance(step, Kernel):
            planner.place_kernel(step, i, lines)
        planner.release(step, i, plan.after.setdefault(i, []))
    return plan

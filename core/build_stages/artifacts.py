"""What passes between the build stages of one ATen graph variant (:mod:`core.build_stages`):
one dataclass per artifact, each holding the artifact before it, and a one-line
``summary()`` of itself (the ``TORCH_LOGS=+sdk`` line of the stage that made it)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch.fx

from sdk.ir.graph import ExternNode
from sdk.ir.kernel import Kernel, Layout
from sdk.plugin import KernelSource
from sdk.report import (
    ExternReport,
    FallbackReport,
    HookFault,
    KernelChoiceReport,
    KernelReport,
    PassReport,
)

from ..lowering import Lowerer
from ..passes import Plan
from ..scheduler import Decision, Scheduler
from ..wrapper import Wrapper


class PluginFailure(RuntimeError):
    """The plugin could not produce the graph's kernels: the pipeline falls back."""


@dataclass
class Graph:
    """The ATen graph of one variant, as the build is asked for it; after the ``passes``
    stage, rewritten by the graph passes. ``refused``: ATen node name -> why it runs in
    ATen (a kernel of it alone is over the plugin's limits: the ``schedule`` stage's
    verdict, for which the ``lower`` stage runs again)."""

    gm: torch.fx.GraphModule
    specs: tuple
    #: the plugin's own functions for library calls, by call node (``sdk_extern``)
    vendor: dict[str, tuple[str, Callable]]
    plan: Plan | None
    #: when the variant's compile began (``time.perf_counter()``): the automatic budget's base
    start: float
    #: whether activations are channels-last (decided on the graph before the passes)
    layout: tuple[bool, str] | None = None
    refused: dict[str, str] = field(default_factory=dict)
    passes: list[PassReport] = field(default_factory=list)
    #: the plugin's hooks that raised and were left out (its passes, its kernel choices)
    faults: list[HookFault] = field(default_factory=list)

    def summary(self) -> str:
        return ", ".join(str(r) for r in self.passes) or "none"


@dataclass
class Lowered:
    """The graph lowered to loop IR, with how each output is produced (``outputs``, see
    :func:`core.build_stages.lower.plan_outputs`), the buffers that must be stored
    (``keep``) and every buffer's layout."""

    graph: Graph
    lowerer: Lowerer
    outputs: list[tuple]
    keep: set[str]
    layouts: dict[str, Layout]

    def summary(self) -> str:
        L = self.lowerer
        return (
            f"{len(self.graph.gm.graph.nodes)} FX nodes -> {len(L.nodes)} IR nodes, "
            f"{len(L.externs)} library calls, {len(L.fallbacks)} fallbacks, {len(L.views)} views"
        )


@dataclass
class Scheduled:
    """The IR scheduled into kernels and library calls, in program order."""

    lowered: Lowered
    scheduler: Scheduler
    steps: list[Kernel | ExternNode]

    @property
    def kernels(self) -> list[Kernel]:
        return [k for k in self.steps if isinstance(k, Kernel)]

    def summary(self) -> str:
        decisions = self.scheduler.decisions
        fused = sum(d.fused for d in decisions)
        return (
            f"{len(self.steps)} steps, {len(self.kernels)} kernels, {fused} fusions made, "
            f"{len(decisions) - fused} refused"
        )


@dataclass
class Rendered:
    """Each kernel's source, as the plugin rendered it (one per kernel, in order)."""

    scheduled: Scheduled
    kernels: list[Kernel]
    sources: list[KernelSource]

    def summary(self) -> str:
        return f"{len(self.sources)} kernels rendered"


@dataclass
class Compiled:
    """The plugin's callables of the sources (after the ``measure`` stage: the chosen
    candidates' where the plugin offered choices)."""

    rendered: Rendered
    sources: list[KernelSource]
    fns: list[Callable]
    #: what ``sdk_compile_kernels`` took (the measuring's per-kernel estimate)
    seconds: float
    choices: list[KernelChoiceReport] = field(default_factory=list)
    tuning: str = ""

    def summary(self) -> str:
        return f"{len(self.fns)} kernels compiled" + (f"; {self.tuning}" if self.tuning else "")


@dataclass
class ProgramParts:
    """What the build of one variant reports (:func:`core.stages.build.fill` copies it into
    the graph's :class:`~sdk.GraphReport`), and what a cache hit restores."""

    kernels: list[KernelReport] = field(default_factory=list)
    externs: list[ExternReport] = field(default_factory=list)
    fallbacks: list[FallbackReport] = field(default_factory=list)
    views: set[str] = field(default_factory=set)
    decisions: list[Decision] = field(default_factory=list)
    runner: str = ""  # GraphReport.runner
    python_launches: tuple[str, ...] = ()  # GraphReport.python_launches
    program: str = ""  # GraphReport.program
    cache: str = ""  # GraphReport.cache
    #: a program from the whole-graph cache: what building it took when it was stored
    cold_seconds: float = 0.0
    key: str | None = None  # the program's key in the whole-graph cache, where it is there
    hook_faults: list[HookFault] = field(default_factory=list)  # observers, passes that raised
    passes: list[PassReport] = field(default_factory=list)  # GraphReport.passes
    choices: list[KernelChoiceReport] = field(default_factory=list)  # GraphReport.choices
    tuning: str = ""  # GraphReport.tuning
    #: each build stage's time, in the order they ran (GraphReport.build_stages; empty on
    #: a hit of the whole-graph cache: nothing was built)
    stage_seconds: dict[str, float] = field(default_factory=dict)
    #: a forward graph's outputs' strides told to AOTAutograd (None: eager's; empty: none
    #: told), stored with the program and told again on a hit
    output_strides: list[tuple[int, ...] | None] = field(default_factory=list)


@dataclass
class Program:
    """The variant's program: its steps (:class:`~core.wrapper.Wrapper`), the callable that
    runs them, and what its build reports."""

    compiled: Compiled
    wrapper: Wrapper
    fn: Callable
    parts: ProgramParts

    def summary(self) -> str:
        return f"{len(self.wrapper.steps)} steps, runner {self.parts.runner}"


@dataclass(frozen=True)
class Again:
    """A stage's answer that an earlier stage (``stage``) runs again, on ``artifact``."""

    stage: str
    artifact: Any
    why: str

    def summary(self) -> str:
        return f"again from {self.stage}: {self.why}"


def kernel_io(k: Kernel) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The buffers kernel ``k`` reads and those it writes."""
    return (
        tuple(a.name for a in k.args if a.role in ("in", "inout")),
        tuple(a.name for a in k.args if a.role in ("out", "inout")),
    )


#: (for the walk, ``tests/walk.py``: every artifact a build stage takes or makes)
ARTIFACTS: tuple[type, ...] = (Graph, Lowered, Scheduled, Rendered, Compiled, Program, Again)

__all__ = [
    "ARTIFACTS",
    "Again",
    "Compiled",
    "Graph",
    "Lowered",
    "PluginFailure",
    "Program",
    "ProgramParts",
    "Rendered",
    "Scheduled",
    "kernel_io",
]

"""The build of one ATen graph variant, as a table of named stages over typed artifacts
(Triton's ``add_stages`` in spirit).

=========  ==============================  ======================================
stage      takes -> makes                  what it does
=========  ==============================  ======================================
passes     Graph -> Graph                  the graph passes (:mod:`.rewrite`)
lower      Graph -> Lowered                ATen -> loop IR (:mod:`.lower`)
schedule   Lowered -> Scheduled | Again    fusion into kernels (:mod:`.schedule`)
render     Scheduled -> Rendered           the plugin's sources (:mod:`.render`)
compile    Rendered -> Compiled            the plugin's callables (:mod:`.compile`)
measure    Compiled -> Compiled            kernel choices timed (:mod:`.measure`)
program    Compiled -> Program             the wrapper that runs them (:mod:`.assemble`)
=========  ==============================  ======================================

:func:`run`, the driver, owns the order: it hands each stage the artifact the one before
made, checks the types the table names, and after each stage calls the inspection hook with
the stage's name, its artifact and the seconds it took. A stage calls nothing of the driver
nor of :mod:`core.program` (which calls the driver); a stage that needs an earlier one run
again answers :class:`~.artifacts.Again` (the ``schedule`` stage, when a kernel of one op is
over the plugin's limits) and the driver goes back. The built-in inspector logs each stage
(``TORCH_LOGS=+sdk``: name, one-line summary, time) and keeps its time for ``sdk.explain``
(``GraphReport.build_stages``); :func:`inspecting` adds one for the calling context.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from sdk.plugin import CompileContext

from ..session import CompileSession
from . import assemble, compile, lower, measure, render, rewrite, schedule
from .artifacts import (
    ARTIFACTS,
    Again,
    Compiled,
    Graph,
    Lowered,
    PluginFailure,
    Program,
    ProgramParts,
    Rendered,
    Scheduled,
)

_log = logging.getLogger(__name__)

#: what the inspection hook is called with after each stage: (stage name, the artifact it
#: made (an :class:`Again` where it asked for an earlier stage again), seconds)
Inspector = Callable[[str, Any, float], None]


@dataclass(frozen=True)
class Stage:
    """One named stage: ``run(session, ctx, artifact)`` takes a ``takes`` and makes a
    ``makes`` (or an :class:`Again`)."""

    name: str
    run: Callable[[CompileSession, CompileContext, Any], Any]
    takes: type
    makes: type


STAGES: tuple[Stage, ...] = (
    Stage("passes", rewrite.run, Graph, Graph),
    Stage("lower", lower.run, Graph, Lowered),
    Stage("schedule", schedule.run, Lowered, Scheduled),
    Stage("render", render.run, Scheduled, Rendered),
    Stage("compile", compile.run, Rendered, Compiled),
    Stage("measure", measure.run, Compiled, Compiled),
    Stage("program", assemble.run, Compiled, Program),
)

_inspectors: contextvars.ContextVar[tuple[Inspector, ...]] = contextvars.ContextVar(
    "sdk_build_inspectors", default=()
)


@contextlib.contextmanager
def inspecting(inspector: Inspector) -> Iterator[None]:
    """``inspector`` called after each build stage of the compiles in this context (this
    thread's: a backward graph compiled later in autograd's thread is not seen)."""
    token = _inspectors.set((*_inspectors.get(), inspector))
    try:
        yield
    finally:
        _inspectors.reset(token)


class StageLog:
    """The built-in inspector: each stage's line at DEBUG (``TORCH_LOGS=+sdk``) and its time,
    added up in :attr:`seconds` (a stage run again counts twice)."""

    def __init__(self, graph_name: str) -> None:
        self.graph_name = graph_name
        self.seconds: dict[str, float] = {}

    def __call__(self, stage: str, artifact: Any, seconds: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + seconds
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("%s %s: %s (%.3fs)", stage, self.graph_name, artifact.summary(), seconds)


def inspect(inspectors: tuple[Inspector, ...], stage: str, artifact: Any, seconds: float) -> None:
    """The inspection hook: each of ``inspectors`` is handed what ``stage`` made, after it
    (an observer: it reads the artifact and changes nothing)."""
    for inspector in inspectors:
        inspector(stage, artifact, seconds)


def run(
    session: CompileSession,
    ctx: CompileContext,
    graph: Graph,
    stages: tuple[Stage, ...] = STAGES,
) -> Program:
    """``graph`` through ``stages``, in order; the last stage's artifact, its
    ``parts.stage_seconds`` filled in."""
    log = StageLog(ctx.graph_name)
    inspectors = (log, *_inspectors.get())
    names = [s.name for s in stages]
    artifact: Any = graph
    i = 0
    while i < len(stages):
        stage = stages[i]
        if not isinstance(artifact, stage.takes):
            raise TypeError(
                f"build stage {stage.name} takes a {stage.takes.__name__}, "
                f"was handed a {type(artifact).__name__}"
            )
        start = time.perf_counter()
        made = stage.run(session, ctx, artifact)
        took = time.perf_counter() - start
        inspect(inspectors, stage.name, made, took)
        if isinstance(made, Again):
            if made.stage not in names[:i]:
                raise ValueError(f"build stage {stage.name} asked for {made.stage!r} again")
            i, artifact = names.index(made.stage), made.artifact
            continue
        if not isinstance(made, stage.makes):
            raise TypeError(
                f"build stage {stage.name} makes a {stage.makes.__name__}, "
                f"made a {type(made).__name__}"
            )
        i, artifact = i + 1, made
    artifact.parts.stage_seconds = dict(log.seconds)
    return artifact


__all__ = [
    "ARTIFACTS",
    "STAGES",
    "Again",
    "Compiled",
    "Graph",
    "Inspector",
    "Lowered",
    "PluginFailure",
    "Program",
    "ProgramParts",
    "Rendered",
    "Scheduled",
    "Stage",
    "inspect",
    "inspecting",
    "run",
]

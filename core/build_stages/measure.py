"""The ``measure`` stage: where the plugin offers candidates for a kernel
(``sdk_kernel_choices``), each timed within the ``tune_budget_s`` budget and the fastest kept
(:mod:`core.tune`)."""

from __future__ import annotations

import dataclasses
import time

from sdk.plugin import CompileContext

from .. import tune
from ..session import CompileSession
from .artifacts import Compiled


def run(session: CompileSession, ctx: CompileContext, compiled: Compiled) -> Compiled:
    rendered = compiled.rendered
    graph = rendered.scheduled.lowered.graph
    sources, fns, choices, tuning = tune.choose(
        session,
        ctx,
        rendered.kernels,
        compiled.sources,
        compiled.fns,
        time.perf_counter() - graph.start,
        graph.faults,
        compiled.seconds,
    )
    return dataclasses.replace(compiled, sources=sources, fns=fns, choices=choices, tuning=tuning)

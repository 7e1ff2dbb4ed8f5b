"""The partition stage: an ATen graph split between the plugins of a chain
(:mod:`core.chain`: claims, partitions, each compiled by the build stage or by a graph-level
plugin), or left whole (None) where one plugin takes it."""

from __future__ import annotations

import logging
import time

from .. import chain, logs
from ..session import CompileSession
from .job import Built, Job

_log = logging.getLogger(__name__)


def run(session: CompileSession, job: Job) -> Built | None:
    """``job``'s graph split and its partitions compiled, or None (one plugin takes it)."""
    times: dict[str, float] = {}
    with logs.stage(_log, "partition", job.ctx.graph_name, times=times) as detail:
        split = chain.compile_partitioned(
            session, job.ctx, job.gm, job.example_inputs, job.parameters
        )
        detail.append("not split" if split is None else f"{len(split[1].partitions)} partitions")
    if split is None:
        return None
    program, report = split
    report.stage_seconds.update(times)
    job.recipe.refused = "the graph is split between the plugins of a chain"
    report.warm = "off: split between the plugins of a chain"
    return Built(job.ctx, job.gm, program, report, time.perf_counter())

"""The ``passes`` stage: the graph rewritten by the graph passes (the core's, as the plugin
chose them, and the plugin's own: :mod:`core.passes`), after the activations' layout is
decided on the graph as AOTAutograd made it (its size counts)."""

from __future__ import annotations

import dataclasses

from sdk.plugin import CompileContext

from .. import passes
from ..lowering import channels_last_wanted
from ..session import CompileSession
from .artifacts import Graph


def run(session: CompileSession, ctx: CompileContext, graph: Graph) -> Graph:
    layout = channels_last_wanted(graph.gm, ctx)
    if graph.plan is None:
        return dataclasses.replace(graph, layout=layout)
    gm, ran, faults = passes.run(graph.plan, graph.gm, ctx, session.registry)
    return dataclasses.replace(graph, gm=gm, layout=layout, passes=ran, faults=faults)

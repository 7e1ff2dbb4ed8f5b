"""What the AOT stage knows of one Dynamo graph, for the compile of each ATen graph it makes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Capture:
    """One Dynamo graph's pass through the AOT stage: made by :func:`core.stages.aot.run`
    and handed to the compile of each ATen graph AOTAutograd makes of it (the backward
    too, later, in autograd's thread) through the AOT compilers' closures. Per-graph state
    lives here, never on the session (which a chain's peers and partitions share)."""

    #: the Dynamo graph's number (its graphs are ``g<id>_forward``, ...)
    graph_id: int
    #: AOTAutograd's cache for this Dynamo graph (:mod:`core.warm`): the key's tag, or None
    cache_tag: str | None
    #: what its reports say of that cache (``"on"``, ``"off: <why>"``)
    warm: str
    #: when the AOT stage handed the Dynamo graph to AOTAutograd (``time.perf_counter()``)
    captured: float
    #: AOTAutograd's time until the first ATen graph reached the core (None before, or
    #: once a report took it: :meth:`take_aot_seconds`)
    aot_seconds: float | None = None

    def take_aot_seconds(self) -> float | None:
        """:attr:`aot_seconds`, for the first report that asks (then None)."""
        took, self.aot_seconds = self.aot_seconds, None
        return took

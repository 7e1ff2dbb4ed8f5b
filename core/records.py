"""What the SDK compiled for each Dynamo graph, found again by running it (``sdk.explain``).

Each Dynamo graph the backend compiles gets a :class:`DynamoGraph`: the plugin, the resolved
options, why Dynamo ended the graph (a graph break's reason) and the reports of the ATen graphs
compiled for it (forward, backward or inference, a chain's partitions; a backward compiled
later lands there too). The callable handed back to Dynamo is wrapped by :func:`runs_as`,
which, while :func:`watching` is open in the calling context, notes the record each time the
graph runs. So ``explain`` finds the reports of exactly the graphs Dynamo runs for its inputs
(its own guards choose them) by running the function once, without compiling anything.

No registry holds the records: each lives as long as the compiled callable Dynamo keeps
(``torch._dynamo.reset()`` or the function's collection frees them).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sdk.report import GraphBreak, GraphReport

_serials = itertools.count()


@dataclass(eq=False)
class DynamoGraph:
    """One Dynamo graph compiled by an SDK backend."""

    plugin: str
    options: Mapping[str, Any]  # resolved (defaults, the mode's, the user's)
    registry: Any = None  # the plugins it was compiled with (core.registry.Registry)
    graph_break: GraphBreak | None = None
    reports: list[GraphReport] = field(default_factory=list)
    serial: int = field(default_factory=lambda: next(_serials))


def next_serial() -> int:
    """The serial the next record gets: records from here on were compiled after this call."""
    return next(_serials)


#: the lists the records that run land in, in this context (see :func:`watching`)
_watchers: contextvars.ContextVar[tuple[list[DynamoGraph], ...]] = contextvars.ContextVar(
    "sdk_watchers", default=()
)
#: how many :func:`watching` blocks are open in any thread: the run's only test when none is
_open = 0
_lock = threading.Lock()


def runs_as(record: DynamoGraph, compiled: Callable) -> Callable:
    """``compiled`` (what the backend hands Dynamo), noting ``record`` where it runs while a
    :func:`watching` block is open in the caller's context."""

    def run(*args: Any) -> Any:
        if _open:
            for sink in _watchers.get():
                sink.append(record)
        return compiled(*args)

    return run


@contextlib.contextmanager
def watching() -> Iterator[list[DynamoGraph]]:
    """The records of the SDK's Dynamo graphs that run inside the block (this context only),
    in the order they first ran, each once."""
    global _open
    ran: list[DynamoGraph] = []
    token = _watchers.set((*_watchers.get(), ran))
    with _lock:
        _open += 1
    try:
        yield ran
    finally:
        with _lock:
            _open -= 1
        _watchers.reset(token)
        seen: set[int] = set()
        ran[:] = [r for r in ran if not (id(r) in seen or seen.add(id(r)))]


def breaks_of(
    seen: list[GraphBreak],
    dynamo_reasons: Mapping[str, int],
    sites: Sequence[tuple[str, Sequence[str]]] = (),
) -> list[GraphBreak]:
    """The graph breaks of a run: ``seen``, those of the graphs that ended at one (with the
    user's line), then those Dynamo counted that ended no graph the SDK compiled
    (``dynamo_reasons``: Dynamo's counts by reason while the run compiled; a break before
    which Dynamo had nothing to compile is one), each at the innermost line of the user's
    stack Dynamo logged for it (``sites``: (reason, stack) in the order logged,
    :func:`~core.adapters.dynamo.locate_graph_breaks`). A graph that ended at a break with
    Dynamo's raw code for a reason (``step_unsupported``: the next step could not be traced)
    takes the reason logged with that line in its stack, counted once."""
    left = Counter(dynamo_reasons)
    pending = list(sites)

    def take(match: Callable[[str, Sequence[str]], bool]) -> tuple[str, str] | None:
        for i, (r, frames) in enumerate(pending):
            if left[r] > 0 and match(r, frames):
                del pending[i]
                left[r] -= 1
                return r, frames[-1] if frames else ""
        return None

    out = []
    for b in seen:
        if left[b.reason] > 0:
            if take(lambda r, frames, b=b: r == b.reason and b.where in frames) is None:
                left[b.reason] -= 1
        else:
            logged = take(lambda r, frames, b=b: b.where in frames)
            if logged is not None:
                b = GraphBreak(*logged)
        out.append(b)
    for reason in list(left):
        while left[reason] > 0:
            got = take(lambda r, frames, reason=reason: r == reason)
            if got is None:
                out += [GraphBreak(reason)] * left[reason]
                left[reason] = 0
            else:
                out.append(GraphBreak(*got))
    return out


class BreakWatch:
    """The graph breaks Dynamo counts and logs from its making on (:meth:`breaks`)."""

    def __init__(self) -> None:
        from .adapters import torch_private as tp

        tp.locate_graph_breaks()
        self._mark, self._before = tp.graph_break_mark(), tp.graph_break_reasons()

    def breaks(self, seen: list[GraphBreak], counted: bool = True) -> list[GraphBreak]:
        """:func:`breaks_of` over what Dynamo counted and logged since (``counted`` False:
        ``seen`` alone, with no break Dynamo counted)."""
        from .adapters import torch_private as tp

        before = self._before
        reasons = {
            k: n - before.get(k, 0)
            for k, n in tp.graph_break_reasons().items()
            if counted and n > before.get(k, 0)
        }
        return breaks_of(seen, reasons, tp.graph_break_sites(self._mark))

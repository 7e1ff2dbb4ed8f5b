"""The SDK's log lines, for ``TORCH_LOGS=sdk`` (``core/adapters/logs.py`` registers the name).

INFO: one line per compiled graph (:func:`graph_line`, from the :class:`~sdk.GraphReport`
that ``sdk.explain`` shows): the plugin, its kernels and library calls, the fallbacks with
their reasons, the caches, the partitions of a chain. DEBUG (``+sdk``): one line per stage of
each graph's compile (:func:`stage`), with the time it took (the same time the graph's
report keeps in ``stage_seconds``, for its top-level stages).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterator

from sdk.report import GraphReport


def graph_line(report: GraphReport) -> str:
    """The one line ``TORCH_LOGS=sdk`` prints for ``report``'s graph."""
    parts = [_body(report)]
    if report.fallbacks:
        parts.append(_fallbacks(report))
    if report.chain_failures:
        parts.append(f"compiled by sdk:{report.plugin} after {'; '.join(report.chain_failures)}")
    if report.cache:
        parts.append(_graph_cache(report.cache))
    if report.warm == "hit":
        parts.append("warm start (AOTAutograd's cache hit)")
    if report.sizes != "static":
        parts.append(f"sizes {report.sizes}")
    if report.wrappers:
        parts.append(f"wrapped by {', '.join(report.wrappers)}")
    if report.hook_faults:
        parts.append(f"{_n(len(report.hook_faults), 'hook fault')} (sdk.explain names them)")
    parts.append(f"compiled in {report.compile_seconds:.2f}s")
    return f"graph {report.name} [{report.kind}] " + ", ".join(parts)


def _body(report: GraphReport) -> str:
    if report.partitions:
        shown = ", ".join(
            f"{p.name} {_who(p.plugin)}"
            + (f" -> {_who(p.compiled_by)}" if p.compiled_by != p.plugin else "")
            + f" ({_n(len(p.nodes), 'op')}"
            + (f", cache {p.cache}" if p.cache else "")
            + ")"
            for p in report.partitions
        )
        return (
            f"split by the chain of sdk:{report.plugin} into "
            f"{_n(len(report.partitions), 'partition')}: {shown}"
        )
    built = report.kernels or report.externs or report.fallbacks
    if report.sizes.startswith("per shape") and not built:
        return f"by sdk:{report.plugin}: compiled at each new shape's first call"
    return (
        f"by sdk:{report.plugin}: {_n(len(report.kernels), 'kernel')}, "
        f"{_n(len(report.externs), 'library call')}"
    )


def _fallbacks(report: GraphReport) -> str:
    """The fallbacks, one entry per op and reason (a graph may run one op through ATen at
    many nodes, for the same reason)."""
    counts = Counter((f.op, f.reason) for f in report.fallbacks)
    listed = "; ".join(
        f"{op}{f' x{n}' if n > 1 else ''} ({reason})" for (op, reason), n in counts.items()
    )
    return f"{_n(len(report.fallbacks), 'fallback')}: {listed}"


def _graph_cache(state: str) -> str:
    if state == "hit":
        return "graph cache hit"
    if state == "stored":
        return "graph cache miss (stored)"
    if state.startswith("off") or state == "per shape":
        return f"graph cache {state}"
    return f"graph cache miss ({state})"


def _who(plugin: str) -> str:
    return plugin if plugin == "aten" else f"sdk:{plugin}"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


@contextlib.contextmanager
def stage(
    log: logging.Logger, name: str, graph: str, times: dict[str, float] | None = None
) -> Iterator[list[str]]:
    """Times the block, one stage of ``graph``'s compile, and logs a DEBUG line with what
    the block adds to the list it is given (nothing when the block raises). ``times``: a
    report's ``stage_seconds``, to which the block's time is added under ``name`` (one
    timing for both: ``sdk.explain`` shows what ``TORCH_LOGS=+sdk`` logs)."""
    detail: list[str] = []
    start = time.perf_counter()
    yield detail
    took = time.perf_counter() - start
    if times is not None:
        times[name] = times.get(name, 0.0) + took
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s %s: %s (%.3fs)", name, graph, ", ".join(detail) or "done", took)

"""The wrap stage: a compiled graph's program with the run-time fallback around it (ATen
takes over a program that fails when run) and the wrapper plugins the options name; its
report published to ``sdk.explain``'s collectors, the log and the observers."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from sdk.errors import OptionError, SDKError, describe
from sdk.plugin import CompileContext, PluginKind
from sdk.report import GraphReport

from .. import fallback, logs
from .. import options as opts
from ..crosscheck import RunnerMismatch
from ..registry import Registry, observe, strict
from ..session import CompileSession
from ..wrapper import inputs_written
from .job import Built

_log = logging.getLogger(__name__)


def finish(session: CompileSession, built: Built) -> Callable:
    """``built``'s program with the run-time fallback and (unless it is a chain's partition)
    the wrapper plugins; its report published (explain's collectors, the log, observers)."""
    ctx, program, report, recipe = built.ctx, built.program, built.report, built.recipe
    if session.options.fallback and not session.options.debug:
        program = _RunTimeFallback(program, built.gm, report, ctx, session.registry)
        if recipe is not None:
            recipe.fallback = program
    compiled = program
    if built.wrap:
        with logs.stage(_log, "wrap", ctx.graph_name, times=report.stage_seconds) as detail:
            compiled = _wrap(session, ctx, program, report)
            detail.append(f"wrapped by {', '.join(report.wrappers) or 'no wrapper plugin'}")
        if ctx.graph_kind != "backward":
            report.graph_break = session.graph_break
            took = built.capture.take_aot_seconds() if built.capture else None
            if took is not None:  # (the first graph AOTAutograd made)
                report.stage_seconds["aot"] = took
    report.compile_seconds += time.perf_counter() - built.start
    for sink in session.sinks:
        sink.append(report)
    if _log.isEnabledFor(logging.INFO):  # TORCH_LOGS=sdk
        _log.info("%s", logs.graph_line(report))
    observe(session.registry, ctx, report.hook_faults, "sdk_on_graph_compiled", report=report)
    return compiled


def _wrap(
    session: CompileSession, ctx: CompileContext, program: Callable, report: GraphReport
) -> Callable:
    names = []
    for name in opts.wrapper_names(session.options.wrappers, session.registry.records):
        rec = session.registry.record(name) if name in session.registry.records else None
        why = session.registry.status(name) if rec else "not installed"
        fits = (
            rec is not None
            and why is None
            and rec.info.kind == PluginKind.WRAPPER
            and ctx.device_type in rec.info.device_types
        )
        if fits:
            names.append(name)
        elif session.explicit_wrappers:
            raise OptionError(
                f"wrapper {name!r} cannot wrap a {ctx.device_type} graph of sdk:{ctx.plugin}: "
                + (why or f"it is not a wrapper plugin for {ctx.device_type}")
                + "; drop it from options['wrappers']"
            )
    for name in names:
        program = _wrap_with(session, name, ctx, program, report)
    return program


def _wrap_with(
    session: CompileSession, name: str, ctx: CompileContext, program: Callable, report: GraphReport
) -> Callable:
    """``program`` wrapped by wrapper plugin ``name``; if its hook raises, unwrapped
    (a wrapper changes how a graph runs, not what it computes), with the fault in the
    report, unless strict mode asks for the error."""
    try:
        wrapped = session.registry.caller("sdk_wrap_compiled", [name])(ctx=ctx, compiled=program)
    except SDKError:
        raise
    except Exception as exc:  # noqa: BLE001 - a wrapper's fault is its own
        report.hook_faults.append(
            session.registry.fault(name, "sdk_wrap_compiled", exc, strict(ctx))
        )
        return program
    report.wrappers += (name,)
    return wrapped


class _RunTimeFallback:
    """A compiled graph whose program, if it fails when run, gives way to ATen.

    A call that raised runs again through the op-level fallback, unless the program had
    begun writing inputs in place (core/lowering/mutation.py): then its error propagates
    and later calls run through ATen. If ATen raises as well, the
    inputs were at fault (an index out of range): the program's error propagates and the
    program stays. Otherwise the program failed where eager does not, and the graph runs through
    ATen from then on, with the reason in its report. Out-of-memory errors propagate.
    ``options["fallback"] = False`` or ``debug`` make the program's error propagate instead.
    """

    _boxed_call = True

    def __init__(
        self,
        program: Callable,
        gm: torch.fx.GraphModule,
        report: GraphReport,
        ctx: CompileContext,
        reg: Registry,
    ) -> None:
        self._program, self._gm, self._report, self._ctx, self._reg = program, gm, report, ctx, reg
        self._eager: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        if self._eager is None:
            try:
                return self._program(*args)  # as the caller called it: no per-call copy
            except (torch.OutOfMemoryError, RunnerMismatch):
                raise  # (a mismatch of runner='check' is the SDK's defect: never hidden)
            except Exception as exc:  # noqa: BLE001 - see the class doc
                return self._give_way(exc, _unboxed(args))
        return self._eager(_unboxed(args))

    def _give_way(self, exc: Exception, args: list[Any]) -> Any:
        reason = (
            f"the compiled program raised when run: {describe(exc)}; "
            "ATen runs this graph from now on"
        )

        written = inputs_written()
        gm = self._gm if isinstance(self._gm, torch.fx.GraphModule) else self._gm()
        run, reports = fallback.whole_graph(gm, reason)
        if written:
            # it had begun writing inputs in place (BatchNorm's running statistics, an
            # optimizer's state): a rerun would write them twice. This call fails, naming
            # what it changed; later calls run through ATen
            exc.add_note(
                f"sdk:{self._ctx.plugin} graph {self._ctx.graph_name} failed after it had "
                f"written {_named(gm, written)} in place (new values), the rest of the graph "
                "did not run, and it was not run again through ATen (that would write them "
                "twice); later calls run through ATen"
            )
            self._switch(run, reports, reason)
            raise exc
        try:
            out = run(args)
        except Exception:  # noqa: BLE001 - eager fails too: the inputs are at fault
            raise exc from None
        self._switch(run, reports, reason)
        return out

    def _switch(self, run: Callable, reports: list, reason: str) -> None:
        """Run the graph through ATen from now on, and say so in its report."""
        _log.warning("sdk:%s graph %s: %s", self._ctx.plugin, self._ctx.graph_name, reason)
        self._eager = run
        r = self._report
        r.kernels.clear()
        r.externs.clear()
        r.fusion_refusals.clear()
        r.core_fusion_refusals.clear()
        r.passes.clear()  # (ATen runs the graph as AOTAutograd made it)
        r.fallbacks[:] = reports
        r.notes.append(reason)
        for f in reports:
            observe(self._reg, self._ctx, r.hook_faults, "sdk_on_fallback", op=f.op, reason=reason)


def _named(gm: torch.fx.GraphModule, positions: tuple[int, ...]) -> str:
    """Graph inputs by position, as a user can find them: their place among the graph's
    inputs (AOTAutograd's order: parameters and buffers first), name, shape and dtype."""
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    parts = []
    for k in positions:
        val = inputs[k].meta.get("val") if k < len(inputs) else None
        what = (
            f" {tuple(val.shape)} {str(val.dtype).removeprefix('torch.')}"
            if isinstance(val, torch.Tensor)
            else ""
        )
        parts.append(f"#{k} ({inputs[k].name if k < len(inputs) else '?'}{what})")
    return ("graph input " if len(parts) == 1 else "graph inputs ") + ", ".join(parts)


def _unboxed(args: tuple) -> list[Any]:
    """A graph's inputs as one list, however they were passed (AOTAutograd's boxed
    convention passes them as one list)."""
    return args[0] if len(args) == 1 and type(args[0]) is list else list(args)

"""Measured kernel choices (hook API 6): the plugin offers, the core measures and keeps.

After a graph's kernels are compiled, the kernels whose device time matters most are offered
to the plugin's ``sdk_kernel_choices``: ranked by the memory they move (the core's estimate
from their argument layouts: every buffer's elements times its item size), largest first,
kernels under :data:`MIN_BYTES` and of symbolic sizes left out. For each kernel the plugin
answers for, the core compiles its alternatives (``sdk_compile_kernels``), runs the rendered
kernel and each alternative on buffers it allocates from the kernel's argument layouts (on the
layouts' device; floats random, integers and booleans zero) and times them with the wall clock
and the plugin's ``synchronize`` (:func:`_time`: the best of a few rounds of calls). Before
it is timed, an alternative's results are compared with the rendered kernel's on the same
inputs (:func:`_differs`): one that computes something else is left out, with why. The
fastest is kept: its source replaces the rendered one in the program, so that the whole-graph
cache stores it and a later process (a cache hit, a warm start) compiles it and measures
nothing. The choice also goes into :data:`NAMESPACE` of the SDK's disk cache, keyed on the
plugin's ``sdk_cache_key`` (its compiler, device model), the sources and the labels: the same
kernel in another graph (or a program rebuilt after its entry went) is not measured again.

The budget (``tune_budget_s``; :func:`budget`) bounds the time measuring takes per compiled
graph variant, compiling the alternatives included. A kernel's measuring starts only where
its predicted cost fits in what is left: the most a kernel's measuring took so far, and at
least what its alternatives would take to compile at the rate the graph's kernels compiled
(``sdk_compile_kernels``'s time per kernel); its alternatives are timed only until the budget
runs out. Nothing here names a device: the buffers go where the layouts say, and
the plugin's ``synchronize`` is the only device call.

Not yet (issue 40): the choice between a library call and a generated kernel with its
epilogue fused (``mm`` then a pointwise kernel, against one generated GEMM kernel doing
both). A variant there replaces a *segment* of the program (the library call, its output
buffer and the kernel reading it) with one kernel over the segment's outside buffers, so it
must be chosen before the wrapper plans memory, as here. The plan: a hook offering, for a
library call and the kernel fused after it, :class:`sdk.KernelVariant` s over the segment's
outside buffers (the call's inputs, then the kernel's other arguments, then its outputs);
the core times the segment as scheduled (the library function, then the kernel, on its own
buffers and an intermediate) against each variant with :func:`_time`, and where a variant
wins rewrites the program's step list (the intermediate gone) before the wrapper is
written; the whole-graph cache then stores the rewritten program, and the report lists the
choice with the kernels'.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from sdk._diskcache import DiskCache, stable_hash
from sdk.errors import SDKError, describe
from sdk.plugin import CompileContext, CoreOptions, KernelChoices, KernelSource
from sdk.report import HookFault, KernelChoiceReport

from .adapters import torch_private as tp
from .ir.index import is_static
from .ir.kernel import Kernel
from .session import CompileSession

_log = logging.getLogger(__name__)

HOOK = "sdk_kernel_choices"
#: the disk cache's namespace of measured choices
NAMESPACE = "kernel-choices"
#: kernels that move less memory than this are not offered (launch time dominates them)
MIN_BYTES = 1 << 20
#: the automatic budget: this share of the graph's compile so far ... (0 until the cold
#: compile bound of issue 40, at most 1.2x, is measured on a GPU: measuring is opt-in, by
#: ``tune_budget_s`` or ``autotune``)
AUTO_SHARE = 0.0
#: ... at most this many seconds
AUTO_MAX_S = 10.0
#: the automatic budget with ``autotune`` (``mode="max-autotune"``)
AUTOTUNE_S = 120.0
#: one round of timed calls lasts about this long (calls between two synchronizations) ...
ROUND_S = 0.002
#: ... with at most this many calls; the best of this many rounds is a candidate's time
MAX_REPS = 100
ROUNDS = 3
#: a kernel's measuring is predicted to take at least this long (compiling its alternatives
#: and timing them: 0.14-1.4 s per kernel on an H200 with Triton), so that a budget smaller
#: than one kernel's measuring starts none: the amortized compile time of a graph's kernels,
#: compiled in parallel, predicted 0.01 s and one kernel then took 0.94 s
PRIOR_MEASURE_S = 0.25


def budget(options: CoreOptions, spent: float) -> float:
    """Seconds this graph variant may spend measuring: the ``tune_budget_s`` option, or
    automatically :data:`AUTO_SHARE` of ``spent`` (the variant's compile so far, so that a
    cold compile takes at most about that share more), at most :data:`AUTO_MAX_S`;
    :data:`AUTOTUNE_S` with ``autotune``."""
    if options.tune_budget_s is not None:
        return float(options.tune_budget_s)
    if options.autotune:
        return AUTOTUNE_S
    return min(AUTO_MAX_S, AUTO_SHARE * spent)


def moved_bytes(k: Kernel) -> int | None:
    """The memory kernel ``k`` moves, estimated from its arguments' layouts (each buffer
    read or written once), or None for a kernel of symbolic sizes."""
    if k.size_args:
        return None
    total = 0
    for a in k.args:
        n = a.layout.numel
        if not is_static(n):
            return None
        total += int(n) * a.layout.dtype.itemsize
    return total


def choose(
    session: CompileSession,
    ctx: CompileContext,
    kernels: list[Kernel],
    sources: list[KernelSource],
    fns: list[Callable],
    spent: float,
    faults: list[HookFault],
    compile_seconds: float = 0.0,
) -> tuple[list[KernelSource], list[Callable], list[KernelChoiceReport], str]:
    """The sources and compiled kernels to run (the measured-fastest where the plugin offered
    choices), the reports of what was measured, and a one-line summary ("" when nothing was
    offered). ``spent``: the graph variant's compile time so far (the automatic budget's
    base); ``faults``: where a fault of the hook goes; ``compile_seconds``: what compiling
    the graph's kernels took (``sdk_compile_kernels``), from which a kernel's alternatives'
    compile is predicted (see :func:`_predicted`)."""
    limit = budget(ctx.core_options, spent)
    if limit <= 0 or not kernels or not session.hooks.implements(HOOK):
        return sources, fns, [], ""
    sizes = {i: moved_bytes(k) for i, k in enumerate(kernels)}
    ranked = sorted(
        (i for i, b in sizes.items() if b is not None and b >= MIN_BYTES),
        key=lambda i: -(sizes[i] or 0),
    )
    if not ranked:
        return sources, fns, [], ""
    sources, fns = list(sources), list(fns)
    reports: list[KernelChoiceReport] = []
    start = time.perf_counter()
    deadline = start + limit
    plugin_key = _plugin_key(session, ctx)
    left, dearest = 0, 0.0  # kernels not offered; the most one kernel's measuring took
    per_source = compile_seconds / len(kernels)
    for n, i in enumerate(ranked):
        if time.perf_counter() >= deadline:
            left = len(ranked) - n
            break
        k, src = kernels[i], sources[i]
        choices = _ask(session, ctx, k, src, faults)
        if choices is None or not choices.alternatives:
            continue
        key = _key(plugin_key, ctx, src, choices)
        report, chosen = _cached(session, ctx, key, k, choices, sizes[i] or 0)
        if report is None:
            now = time.perf_counter()
            predicted = max(dearest, per_source * len(choices.alternatives), PRIOR_MEASURE_S)
            if now + predicted > deadline:
                left = len(ranked) - n  # (it would not fit: neither would the rest, likely)
                break
            with tp.real_mode():  # (the compile runs under AOTAutograd's fake mode)
                report, chosen = _measure(session, ctx, k, fns[i], choices, sizes[i] or 0, deadline)
            dearest = max(dearest, time.perf_counter() - now)
            if key is not None and _complete(report):
                times = [[lab, s] for lab, s in report.times]
                DiskCache(NAMESPACE).put(
                    key, json.dumps({"chosen": report.chosen, "times": times}).encode()
                )
        if chosen is not None:
            sources[i], fns[i] = chosen
        reports.append(report)
    took = time.perf_counter() - start
    if not reports and not left:
        return sources, fns, [], ""
    measured = sum(not r.reused for r in reports)
    summary = (
        f"{measured} kernels measured, {len(reports) - measured} reused, in {took:.2f}s of a "
        f"{limit:.2f}s budget"
    )
    if left:
        summary += f"; {left} kernels not measured: the budget would not cover them"
    return sources, fns, reports, summary


def _complete(report: KernelChoiceReport) -> bool:
    """Whether ``report`` compared every candidate it could (none left for the budget or the
    memory, the rendered kernel timed): a choice to remember."""
    timed = dict(report.times)
    return timed.get(report.chosen) is not None and not any(
        "budget" in why or "memory" in why for _lab, why in report.errors
    )


def _ask(
    session: CompileSession,
    ctx: CompileContext,
    k: Kernel,
    src: KernelSource,
    faults: list[HookFault],
) -> KernelChoices | None:
    """The plugin's choices for kernel ``k``; a hook that raises or answers something else is
    a fault of the plugin's (strict mode raises), and the kernel keeps its source."""
    try:
        choices = session.hooks.sdk_kernel_choices(ctx=ctx, kernel=k, source=src)
        if choices is not None and not isinstance(choices, KernelChoices):
            raise TypeError(
                f"{HOOK} answered a {type(choices).__name__} for kernel {k.name}; return an "
                "sdk.KernelChoices, or None to keep the rendered kernel"
            )
    except SDKError:
        raise
    except Exception as exc:  # noqa: BLE001 - the plugin's fault: the kernel stays as rendered
        cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
        faults.append(session.registry.fault(ctx.plugin, HOOK, cause, ctx.core_options.strict))
        return None
    return choices


def _plugin_key(session: CompileSession, ctx: CompileContext) -> str | None:
    """The plugin's ``sdk_cache_key``, where the cache is on and the plugin answers one."""
    if not ctx.core_options.cache:
        return None
    try:
        return session.hooks.sdk_cache_key(ctx=ctx)
    except Exception:  # noqa: BLE001 - then the choices are not cached (the program neither)
        return None


def _digest(src: KernelSource) -> str:
    meta = json.dumps(src.meta, sort_keys=True, default=repr)
    return stable_hash("kernel-source", src.language, src.entry, src.source, meta)


def _key(
    plugin_key: str | None, ctx: CompileContext, src: KernelSource, choices: KernelChoices
) -> str | None:
    if plugin_key is None:
        return None
    alts = tuple((a.label, _digest(a.source)) for a in choices.alternatives)
    return stable_hash(
        NAMESPACE, ctx.plugin, plugin_key, ctx.device_type, _digest(src), choices.default, alts
    )


def _cached(
    session: CompileSession,
    ctx: CompileContext,
    key: str | None,
    k: Kernel,
    choices: KernelChoices,
    size: int,
) -> tuple[KernelChoiceReport | None, tuple[KernelSource, Callable] | None]:
    """A choice measured before (the disk cache), compiled; (None, None) where there is none
    or it cannot be used."""
    if key is None:
        return None, None
    data = DiskCache(NAMESPACE).get(key)
    if data is None:
        return None, None
    try:
        doc = json.loads(data)
        chosen = doc["chosen"]
        times = tuple((str(lab), None if s is None else float(s)) for lab, s in doc["times"])
    except (ValueError, KeyError, TypeError):
        return None, None
    report = KernelChoiceReport(k.name, chosen, times, size, reused=True)
    if chosen == choices.default:
        return report, None
    alt = next((a for a in choices.alternatives if a.label == chosen), None)
    if alt is None:
        return None, None
    try:
        fns = session.hooks.sdk_compile_kernels(ctx=ctx, sources=[alt.source])
        if fns is None or len(fns) != 1:
            return None, None
    except SDKError:
        raise
    except Exception:  # noqa: BLE001 - measured again
        return None, None
    return report, (alt.source, fns[0])


def _measure(
    session: CompileSession,
    ctx: CompileContext,
    k: Kernel,
    fn: Callable,
    choices: KernelChoices,
    size: int,
    deadline: float,
) -> tuple[KernelChoiceReport, tuple[KernelSource, Callable] | None]:
    """Compile the alternatives, time them and the rendered kernel (``fn``), and say which
    is fastest (None: the rendered kernel)."""
    alts = list(choices.alternatives)
    errors: list[tuple[str, str]] = []
    compiled: list[Callable | None] = [None] * len(alts)
    try:
        got = session.hooks.sdk_compile_kernels(ctx=ctx, sources=[a.source for a in alts])
        if got is None or len(got) != len(alts):
            raise RuntimeError(
                f"sdk_compile_kernels returned {0 if got is None else len(got)} callables "
                f"for {len(alts)} alternatives"
            )
        compiled = list(got)
    except SDKError:
        raise
    except Exception as exc:  # noqa: BLE001 - the alternatives are left out, with why
        errors += [(a.label, f"compile failed: {describe(exc, one_line=True)}") for a in alts]
    sync = choices.synchronize or _no_sync
    times: list[tuple[str, float | None]] = []
    try:
        bench = _Bench(k, sync)
    except torch.OutOfMemoryError as exc:
        why = f"no memory for its buffers: {describe(exc, one_line=True)}"
        return KernelChoiceReport(k.name, choices.default, (), size, errors=(("*", why),)), None
    try:
        try:
            expected = bench.results(fn)
            times.append((choices.default, bench.time(fn)))
        except Exception as exc:  # noqa: BLE001 - nothing to compare with: keep it
            why = f"failed on the core's buffers: {describe(exc, one_line=True)}"
            errors.append((choices.default, why))
            return KernelChoiceReport(
                k.name, choices.default, ((choices.default, None),), size, errors=tuple(errors)
            ), None
        for a, afn in zip(alts, compiled, strict=True):
            if afn is None:
                times.append((a.label, None))
                continue
            if time.perf_counter() >= deadline:
                times.append((a.label, None))
                errors.append((a.label, "not timed: the budget was spent"))
                continue
            try:
                differs = _differs(bench.results(afn), expected, k)
                if differs:
                    times.append((a.label, None))
                    errors.append((a.label, f"left out: {differs}"))
                    continue
                times.append((a.label, bench.time(afn)))
            except Exception as exc:  # noqa: BLE001 - left out, with why
                times.append((a.label, None))
                errors.append((a.label, f"failed: {describe(exc, one_line=True)}"))
    finally:
        del bench
    timed = [(s, n) for n, (_lab, s) in enumerate(times) if s is not None]
    best = min(timed)[1]
    label = times[best][0]
    report = KernelChoiceReport(k.name, label, tuple(times), size, errors=tuple(errors))
    if best == 0:
        return report, None
    a = alts[best - 1]
    afn = compiled[best - 1]
    assert afn is not None
    return report, (a.source, afn)


def _no_sync() -> None:
    return None


class _Bench:
    """The buffers kernel ``k``'s candidates run on: the first values (:func:`_buffers`),
    and working copies that each run starts from, so every candidate sees the same inputs
    (those it writes in place included)."""

    def __init__(self, k: Kernel, sync: Callable[[], Any]) -> None:
        self.first = _buffers(k)
        self.work = [t.clone() for t in self.first]
        self.written = [i for i, a in enumerate(k.args) if a.role in ("out", "inout")]
        self.sync = sync

    def results(self, fn: Callable) -> list[torch.Tensor]:
        """What one call of ``fn`` from the first values writes."""
        for w, f in zip(self.work, self.first, strict=True):
            w.copy_(f)
        fn(*self.work)
        self.sync()
        return [self.work[i].clone() for i in self.written]

    def time(self, fn: Callable) -> float:
        return _time(fn, self.work, self.sync)


def _differs(got: list[torch.Tensor], want: list[torch.Tensor], k: Kernel) -> str | None:
    """Why a candidate's results are not the rendered kernel's (None: they agree, up to the
    rounding another order of a reduction gives: a relative tolerance of the buffer's largest
    magnitude, 2% in 16-bit floats, 0.1% in wider ones; integers and booleans exactly)."""
    for g, w, i in zip(got, want, [a for a in k.args if a.role in ("out", "inout")], strict=True):
        if not (g.dtype.is_floating_point or g.dtype.is_complex):
            if not torch.equal(g, w):
                return f"its {i.name} differs from the rendered kernel's"
            continue
        if g.dtype.is_complex:
            g, w = torch.view_as_real(g), torch.view_as_real(w)
        g64, w64 = g.to(torch.float64), w.to(torch.float64)  # (float8 has no arithmetic)
        nan_g, nan_w = g64.isnan(), w64.isnan()
        if not torch.equal(nan_g, nan_w):
            return f"its {i.name} has NaNs where the rendered kernel's has none, or the reverse"
        finite = w64.isfinite() & g64.isfinite()
        if not torch.equal(g64[~finite & ~nan_w], w64[~finite & ~nan_w]):
            return f"its {i.name} has other infinities than the rendered kernel's"
        if not finite.any():
            continue
        rtol = 2e-2 if g.dtype.itemsize <= 2 else 1e-3
        scale = w64[finite].abs().max().item()
        worst = (g64[finite] - w64[finite]).abs().max().item()
        if worst > rtol * max(scale, 1e-30):
            return (
                f"its {i.name} differs from the rendered kernel's by up to {worst:.3g} "
                f"(values up to {scale:.3g})"
            )
    return None


def _buffers(k: Kernel) -> list[torch.Tensor]:
    """One buffer per argument of ``k``, as its layout says (element 0 at ``data_ptr()``, the
    storage to the last element its layout reaches), on the layout's device: floating point
    values random, the rest zero (an integer buffer indexing another stays in range)."""
    out = []
    for a in k.args:
        lay = a.layout
        t = torch.empty(max(int(lay.storage_size), 1), dtype=lay.dtype, device=lay.device)
        if lay.dtype.is_floating_point or lay.dtype.is_complex:
            try:
                t.normal_()
            except (RuntimeError, NotImplementedError):  # (float8 has no normal_)
                t.zero_()
        else:
            t.zero_()
        out.append(t)
    return out


def _time(fn: Callable, args: list[Any], sync: Callable[[], Any]) -> float:
    """Seconds one call of ``fn(*args)`` takes: a first call (which may load the kernel),
    then the best of :data:`ROUNDS` rounds of calls between two ``sync()`` s, each round
    about :data:`ROUND_S` long."""
    fn(*args)
    sync()
    t0 = time.perf_counter()
    fn(*args)
    sync()
    once = time.perf_counter() - t0
    reps = max(1, min(MAX_REPS, int(ROUND_S / max(once, 1e-9))))
    best = once
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(*args)
        sync()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best

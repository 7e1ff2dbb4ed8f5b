"""One workload of either bench suite: eager, Inductor and the sdk, each compiled cold, checked
against eager and then timed in interleaved rounds (:func:`_run_workload`).

What a workload gives (:class:`Case`), the clock (:class:`_Clock`), what a backend's run and a
workload's row record (:class:`Result`, :class:`Row`), and the fresh cache directories of each
cold measurement. :mod:`sdk.tools.bench` describes the method these implement.
"""

from __future__ import annotations

import gc
import math
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sdk.tools.bench_check import _compare, _named

# ---------------------------------------------------------------------------
# Cache directories
# ---------------------------------------------------------------------------


_TEMP_DIRS: list[str] = []


def _fresh_cache_dirs() -> dict[str, str]:
    """Point every compile cache at a new empty directory (the SDK, Inductor and Triton
    read these variables when they next look up their cache)."""
    import sdk.cache

    dirs = sdk.cache.fresh_directories()
    _TEMP_DIRS.extend(dirs.values())
    return dirs


def _remove_temp_dirs() -> None:
    import shutil

    for d in _TEMP_DIRS:
        shutil.rmtree(d, ignore_errors=True)
    _TEMP_DIRS.clear()


# ---------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------


class Skip(Exception):
    """A workload that cannot run here (a missing package)."""


#: Observes one more warm step of a backend after timing: ``probe(step) -> record``.
Probe = Callable[[Callable[[], Any]], dict[str, Any]]


@dataclass
class Case:
    target: Callable[..., Any]  # what torch.compile gets
    step: Callable[[Callable[..., Any]], Any]  # one timed iteration through a target
    outputs: Callable[[Any], list[tuple[str, Any]]]  # step's result -> tensors to compare
    desc: str
    min_bytes: int = 0  # bytes an ideal kernel moves (bandwidth rows only)
    fp64_outputs: Callable[[], list[tuple[str, Any]]] | None = None  # Dynamo's rule
    rule_tol: float = 1e-4


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


class _Clock:
    def __init__(self, cuda: bool, repeat: int) -> None:
        self.cuda = cuda
        self.repeat = repeat

    def sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def wall(self, call: Callable[[], Any]) -> tuple[float, Any]:
        """Wall seconds of one call (synchronized on a GPU) and its result."""
        self.sync()
        t0 = time.perf_counter()
        out = call()
        self.sync()
        return time.perf_counter() - t0, out

    def profile(
        self, call: Callable[[], Any], calls: int, top: int, within: str | None = None
    ) -> str:
        """A cProfile of ``calls`` calls (synchronized after the last on a GPU): the ``top``
        functions by their own time, as ``pstats`` prints them; then, given ``within`` (a
        regular expression of file paths), the ``top`` of those by cumulative time."""
        import cProfile
        import io
        import pstats

        pr = cProfile.Profile()
        pr.enable()
        for _ in range(calls):
            call()
        self.sync()
        pr.disable()
        out = io.StringIO()
        stats = pstats.Stats(pr, stream=out)
        stats.sort_stats("tottime").print_stats(top)
        if within is not None:
            stats.sort_stats("cumulative").print_stats(within, top)
        return out.getvalue()

    def samples(self, call: Callable[[], Any], share: float = 1.0) -> list[float]:
        """Per-call seconds of the timed calls (after the caller's warm-up): ``share`` of
        the calls (or of the CPU's timing second) that one measurement takes."""
        gc.collect()
        gc.disable()
        try:
            return self._cuda(call, share) if self.cuda else self._cpu(call, share)
        finally:
            gc.enable()

    def _cpu(self, call: Callable[[], Any], share: float) -> list[float]:
        out: list[float] = []
        start = time.perf_counter()
        least = max(3, math.ceil(10 * share))
        while True:
            t0 = time.perf_counter()
            call()
            out.append(time.perf_counter() - t0)
            if self.repeat:
                if len(out) >= max(1, math.ceil(self.repeat * share)):
                    return out
            elif (len(out) >= least and time.perf_counter() - start >= share) or len(out) >= 10000:
                return out

    def _cuda(self, call: Callable[[], Any], share: float) -> list[float]:
        import torch

        n = max(1, math.ceil((self.repeat or 100) * share))
        events = [
            (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            for _ in range(n)
        ]
        torch.cuda.synchronize()
        for start, end in events:
            start.record()
            call()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in events]


# ---------------------------------------------------------------------------
# One workload
# ---------------------------------------------------------------------------


@dataclass
class Result:
    """One backend on one workload."""

    ms: float | None = None
    samples_ms: list[float] = field(default_factory=list)
    round_ms: list[float] = field(default_factory=list)  # the median of each timing round
    cold_s: float | None = None
    check: str = ""  # "ok", "MISMATCH", "error", "" (eager / not run)
    detail: str = ""
    error: str = ""
    profile: dict[str, Any] | None = None  # the probe's record of one warm step (models suite)


@dataclass
class Row:
    name: str
    desc: str = ""
    skipped: str = ""
    eager: Result = field(default_factory=Result)
    inductor: Result = field(default_factory=Result)
    sdk: Result = field(default_factory=Result)
    sdk_graphs: dict[str, Any] = field(default_factory=dict)
    min_bytes: int = 0


#: Timing rounds: the backends of a workload are timed in turn, this many times over, so
#: that a slow phase of the host (other tenants, clocks) falls on all of them alike.
ROUNDS = 3


def _own_code(target: Callable[..., Any]) -> Callable[..., Any]:
    """``target`` called from a function with a code object of its own, which is what each
    backend compiles. Dynamo keeps compiled entries per code object: two backends compiling
    the same module's ``forward`` share its entries, and every call of the backend compiled
    first fails the other's guards before it finds its own (about 17 us a call on the 2-core
    CPU, 29 on an H200 host: the bs1 rows' whole margin). A user compiles with one backend."""
    env: dict[str, Any] = {"target": target}
    exec("def call(*args, **kwargs):\n    return target(*args, **kwargs)\n", env)  # noqa: S102
    return env["call"]


def _prepare(
    name: str,
    case: Case,
    clock: _Clock,
    compile_fn: Callable[[Any], Any] | None,
    ref: list[tuple[str, Any]] | None,
    fp64: list[tuple[str, Any]] | None,
    sink: list[Any] | None = None,
    *,
    reset: bool = True,
) -> tuple[Result, list[tuple[str, Any]] | None, Callable[[], Any] | None]:
    """Compile (unless eager), cold call, check against ``ref``, warm up.

    Returns the result so far, the outputs of the first call and the step to time (None
    after a mismatch or an error). With ``reset=False`` Dynamo's caches are kept: a
    backend compiled earlier stays compiled beside this one (Dynamo guards on the backend,
    so this one still traces and compiles from scratch, with the sizes Dynamo saw for the
    earlier one forgotten: its graphs are those a fresh process would get)."""
    import sdk

    res = Result()
    outs = None
    try:
        if compile_fn is None:
            fn = case.target
            _, first = clock.wall(lambda: case.step(fn))
            outs = _named(case.outputs(first))
        else:
            sdk.reset(keep_compiled=not reset)
            _fresh_cache_dirs()
            fn = compile_fn(_own_code(case.target))
            with sdk.collect_reports() as compiled:
                try:
                    res.cold_s, first = clock.wall(lambda: case.step(fn))
                finally:
                    if sink is not None:
                        sink.extend(compiled.graphs)
            outs = _named(case.outputs(first))
            assert ref is not None
            ok, res.detail = _compare(ref, outs, fp64, case.rule_tol)
            res.check = "ok" if ok else "MISMATCH"
        del first
        if res.check == "MISMATCH":
            return res, outs, None  # never timed
        for _ in range(3):
            case.step(fn)
        clock.sync()
    except Exception as e:  # noqa: BLE001 - reported in the row and on stderr
        _record_error(name, res, e)
        return res, outs, None
    return res, outs, (lambda f=fn: case.step(f))


def _record_error(name: str, res: Result, e: BaseException) -> None:
    res.check = "error"
    lines = [ln.strip() for ln in f"{type(e).__name__}: {e}".splitlines() if ln.strip()]
    res.error = " ".join(lines[:2])[:300]
    res.detail = traceback.format_exc()
    print(f"\n[{name}] raised:\n{res.detail}", file=sys.stderr, flush=True)


def _time_interleaved(
    name: str,
    case: Case,
    clock: _Clock,
    entries: list[tuple[Result, Callable[[], Any]]],
    probe: Probe | None,
) -> None:
    """Time the prepared steps in :data:`ROUNDS` rounds, each step in turn within a round; then
    give ``probe`` one more warm step of each (its failure is recorded in
    ``Result.profile``, never fails the row)."""
    live = list(entries)
    for _ in range(ROUNDS):
        for res, step in list(live):
            try:
                secs = clock.samples(step, share=1 / ROUNDS)
            except Exception as e:  # noqa: BLE001 - reported in the row and on stderr
                _record_error(name, res, e)
                live.remove((res, step))
                continue
            ms = [t * 1e3 for t in secs]
            res.samples_ms += ms
            res.round_ms.append(statistics.median(ms))
    for res, step in live:
        res.ms = statistics.median(res.samples_ms)
        if probe is not None:
            try:
                res.profile = probe(step)
            except Exception as e:  # noqa: BLE001 - a probe never fails the row
                res.profile = {"error": f"{type(e).__name__}: {e}"[:300]}


def _graph_summary(reports: list[Any]) -> dict[str, Any]:
    import sdk

    try:
        fraction = sdk.ExplainReport(graphs=list(reports)).generated_fraction
    except Exception:  # noqa: BLE001 - a report format this code does not know: no share
        fraction = None
    reasons = sorted(
        {
            f"{f.op}: {(f.reason.splitlines() or [''])[0][:200]}"
            for g in reports
            for f in g.fallbacks
        }
    )
    return {
        "graphs": len(reports),
        "kernels": sum(len(g.kernels) for g in reports),
        "externs": sum(len(g.externs) for g in reports),
        "fallbacks": sum(len(g.fallbacks) for g in reports),
        "backward_graphs": sum(g.kind == "backward" for g in reports),
        "generated_fraction": fraction,
        "fallback_reasons": reasons,
    }


def _run_workload(
    name: str,
    make: Callable[[Any], Case],
    dev: Any,
    clock: _Clock,
    sdk_backend: Any,
    probe: Probe | None = None,
    mode: str | None = None,
) -> Row:
    """Eager, Inductor and the sdk on one workload: each compiled (cold time) and checked
    in turn, then all timed in interleaved rounds (:data:`ROUNDS`). ``mode``: the
    torch.compile mode both compilers get (None: the default)."""
    import torch

    row = Row(name)
    try:
        case = make(dev)
    except Skip as e:
        row.skipped = str(e)
        return row
    row.desc, row.min_bytes = case.desc, case.min_bytes
    print(f"[{name}] {case.desc}", flush=True)

    row.eager, ref, eager_step = _prepare(name, case, clock, None, None, None)
    if ref is None or eager_step is None:
        row.skipped = f"eager failed: {row.eager.error}"
        return row
    fp64 = None
    if case.fp64_outputs is not None:
        try:
            fp64 = case.fp64_outputs()
        except Exception as e:  # noqa: BLE001
            row.skipped = f"fp64 reference failed: {type(e).__name__}: {e}"
            return row

    row.inductor, _, ind_step = _prepare(
        name, case, clock, lambda t: torch.compile(t, mode=mode), ref, fp64
    )
    print(
        f"  inductor cold {_fmt_s(row.inductor.cold_s)} s, "
        f"{row.inductor.check}: {row.inductor.error or row.inductor.detail}",
        flush=True,
    )
    sink: list[Any] = []
    # Dynamo's caches stay: Inductor's compiled frames must outlive the sdk's compile
    row.sdk, _, sdk_step = _prepare(
        name,
        case,
        clock,
        lambda t: torch.compile(t, backend=sdk_backend, mode=mode),
        ref,
        fp64,
        sink,
        reset=False,
    )
    row.sdk_graphs = _graph_summary(sink)
    print(
        f"  sdk      cold {_fmt_s(row.sdk.cold_s)} s, "
        f"{row.sdk.check}: {row.sdk.error or row.sdk.detail}; {_graphs_cell(row.sdk_graphs)}",
        flush=True,
    )
    del ref, fp64
    steps = [(row.eager, eager_step), (row.inductor, ind_step), (row.sdk, sdk_step)]
    _time_interleaved(name, case, clock, [(r, s) for r, s in steps if s is not None], probe)
    print(
        "  ms (median; per round): "
        + "; ".join(
            f"{label} {_fmt_ms(r.ms)} ({', '.join(_fmt_ms(m) for m in r.round_ms)})"
            for label, (r, _) in zip(("eager", "inductor", "sdk"), steps)
        ),
        flush=True,
    )
    del case, steps, eager_step, ind_step, sdk_step
    _free(dev)
    return row


def _free(dev: Any) -> None:
    import torch

    import sdk

    sdk.reset()
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _prewarm(dev: Any, sdk_backend: Any) -> float:
    """Compile a trivial function with each backend: imports, compile worker pools and
    compiler probes are then not charged to the first workload's cold compile."""
    import torch

    import sdk

    t0 = time.perf_counter()
    x = torch.randn(64, device=dev)
    for backend in ("inductor", sdk_backend):
        sdk.reset()
        torch.compile(lambda t: t * 2.0 + 1.0, backend=backend)(x)
    sdk.reset()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def _copy_bandwidth(clock: _Clock) -> float:
    """Device-to-device copy of 1 GiB: (bytes read + written) / median time, in B/s."""
    import torch

    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    secs = _Clock(True, clock.repeat or 50).samples(lambda: dst.copy_(src))
    return 2 * n / statistics.median(secs)  # the buffers are freed on return


# ---------------------------------------------------------------------------
# Cells of the progress lines and the tables
# ---------------------------------------------------------------------------


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.2f}" if v < 100 else f"{v:.1f}"


def _fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _graphs_cell(g: dict[str, Any]) -> str:
    if not g:
        return "-"
    frac = g.get("generated_fraction")
    pct = "-" if frac is None else f"{frac:.0%}"
    return f"{g['graphs']}g {g['kernels']}k {g['externs']}x {g['fallbacks']}fb {pct}"

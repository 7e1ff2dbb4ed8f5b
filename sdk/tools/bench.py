"""``python -m sdk bench``: ``sdk:<plugin>``, Inductor and eager, side by side, in one process.

Two suites: ``--suite kernels`` (the default) times the microbenchmarks of this module
(elementwise chains, softmax, layer norm, MLPs; on a GPU also a GPT-2 training step and
resnet18); ``--suite models`` times real models, torchvision and timm inference and HF
transformers training steps, each in bf16 and fp32, at ``--size full`` (a GPU's default)
or ``--size small`` (the CPU's default): :mod:`sdk.tools.bench_models` describes its rows, sizes,
checks and CUDA launch counts. ``--only`` picks rows, ``--list`` prints them, ``--json``
writes everything; the exit status is 1 when any sdk result is a MISMATCH or an error.

Method of both suites (this is what the printed numbers mean):

* **Cold compile** (``cold s``): wall time of the first call of a freshly
  compiled function, after ``reset_dynamo()``, minus nothing. It includes
  Dynamo tracing, AOTAutograd, codegen, the C++/Triton compiler and the first
  run; for a training step also the backward compile. On a GPU the call is
  followed by ``torch.cuda.synchronize()`` inside the timed span. Caches: the
  process starts on fresh temporary ``SDK_CACHE_DIR``, ``TORCHINDUCTOR_CACHE_DIR``
  and ``TRITON_CACHE_DIR``, every cold measurement gets fresh ones again, and
  Inductor's FX-graph and AOTAutograd caches are switched off
  (:func:`configure_for_benchmark`). Not cleared: in-memory code caches of the
  process (Inductor's, Triton's, the cuda_triton plugin's loaded modules), and
  Inductor's compile worker subprocesses keep the environment they started
  with, so a kernel whose source exactly repeats one of an earlier workload's
  can still hit. Before the suite a trivial function is compiled once with each
  backend so that imports and one-time initialisation are not charged to
  whichever workload runs first.
* **Steady state** (``ms``): 3 warm-up calls after the cold call, then N timed
  calls; the median per call is reported. CPU: ``time.perf_counter`` around each
  call. GPU: a CUDA event pair around each call, one synchronize at the end.
  ``--repeat 0`` (automatic): CPU at least 10 calls and until ~1 s of calls;
  GPU 100 calls. The same inputs are used on every call and no cache is
  flushed between calls: the elementwise inputs are far larger than the
  last-level cache; the small MLPs' weights may stay cache-resident, as in a
  serving loop.
* **Correctness** is checked on the cold call's result, before anything is
  timed: ``torch.testing.assert_close`` against eager (default fp32 tolerances;
  bf16 ``rtol=atol=2e-2``); for the two full models on a GPU and every row of the
  models suite, Dynamo's benchmark rule against an fp64 reference
  (:func:`dynamo_rmse_rule`). A row
  whose sdk check fails is reported as ``MISMATCH`` and its sdk time is not
  measured. Graphs the plugin could not compile fall back to ATen; the ``sdk
  graphs`` column counts kernels and fallbacks so such a row cannot pass for a
  fast one.
"""

from __future__ import annotations

import argparse
import copy
import gc
import itertools
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sdk.core import config

#: Set at the top of :func:`main`, before anything compiles.
_CACHE_ENV = ("SDK_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


# ---------------------------------------------------------------------------
# Cache directories
# ---------------------------------------------------------------------------

_TEMP_DIRS: list[str] = []


def _fresh_cache_dirs() -> dict[str, str]:
    """Point every compile cache at a new empty directory (the SDK, Inductor and Triton
    read these variables when they next look up their cache)."""
    dirs = {}
    for var in _CACHE_ENV:
        d = tempfile.mkdtemp(prefix=f"sdk-bench-{var.split('_')[0].lower()}-")  # mode 0o700
        config.set_variables(**{var: d})
        dirs[var] = d
        _TEMP_DIRS.append(d)
    return dirs


def _remove_temp_dirs() -> None:
    import shutil

    for d in _TEMP_DIRS:
        shutil.rmtree(d, ignore_errors=True)
    _TEMP_DIRS.clear()


# ---------------------------------------------------------------------------
# Correctness
# ---------------------------------------------------------------------------


def _rmse(a: Any, b: Any) -> float:
    import torch

    return float(torch.sqrt(torch.mean(torch.square(a.double() - b.double()))))


def dynamo_rmse_rule(ref: Any, res: Any, fp64_ref: Any, tol: float) -> tuple[bool, str]:
    """Dynamo's benchmark accuracy rule for one tensor, reimplemented.

    What ``torch._dynamo.utils.same(ref, res, fp64_ref, tol=tol, equal_nan=True)``
    does for a floating tensor, as the Dynamo benchmark suites call it: pass if
    ``torch.allclose(ref, res, rtol=tol, atol=tol)``; else compare RMSEs against
    the fp64 reference and pass if ``rmse(fp64, res) <= multiplier *
    rmse(fp64, ref) + tol / 10``, where ``multiplier`` is 3 for fp16/bf16 and 2
    otherwise, and 3 for tensors of fewer than 1000 elements, 4-d tensors whose
    last two sizes are 1, or ``tol >= 2e-2``. (``ref`` is eager, ``res`` the
    compiled result; a result free of NaNs that matches the fp64 reference to 4e-2
    passes even when eager has NaNs; NaN in both errors passes, as with
    ``equal_nan=True``.)
    """
    import torch

    if ref.dtype != res.dtype:
        return False, f"dtype {res.dtype} != {ref.dtype}"
    if ref.shape != res.shape:
        return False, f"shape {tuple(res.shape)} != {tuple(ref.shape)}"
    if torch.allclose(ref, res, atol=tol, rtol=tol, equal_nan=True):
        return True, "allclose"
    loose = 4e-2
    if (
        not bool(fp64_ref.isnan().any())
        and not bool(res.isnan().any())
        and bool(ref.isnan().any())
        and torch.allclose(fp64_ref.to(res.dtype), res, atol=loose, rtol=loose)
    ):
        return True, "eager has NaN, result matches fp64"
    ref_err = _rmse(fp64_ref, ref)
    res_err = _rmse(fp64_ref, res)
    multiplier = 3.0 if res.dtype in (torch.float16, torch.bfloat16) else 2.0
    if (
        fp64_ref.numel() < 1000
        or (ref.ndim == 4 and ref.shape[-1] == ref.shape[-2] == 1)
        or tol >= 2e-2
    ):
        multiplier = 3.0
    ok = res_err <= multiplier * ref_err + tol / 10.0
    if not ok and math.isnan(ref_err) and math.isnan(res_err):
        ok = True
    return ok, (
        f"rmse(res, fp64)={res_err:.3g} {'<=' if ok else '>'} {multiplier:g} x "
        f"rmse(eager, fp64)={ref_err:.3g} + {tol / 10:.0e}"
    )


def _assert_close_check(ref: Any, res: Any) -> tuple[bool, str]:
    import torch

    kw: dict[str, float] = {}
    if ref.dtype in (torch.bfloat16, torch.float16):
        kw = {"rtol": 2e-2, "atol": 2e-2}
    try:
        torch.testing.assert_close(res, ref, **kw)
    except AssertionError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return False, "; ".join(lines[:4])
    diff = (res.double() - ref.double()).abs().max().item() if ref.numel() else 0.0
    return True, f"max abs diff {diff:.3g}"


def _compare(
    ref: list[tuple[str, Any]],
    res: list[tuple[str, Any]],
    fp64: list[tuple[str, Any]] | None,
    tol: float,
) -> tuple[bool, str]:
    """Every named tensor of ``res`` against ``ref`` (and ``fp64`` when given)."""
    if [n for n, _ in ref] != [n for n, _ in res]:
        return False, f"outputs differ: {[n for n, _ in res]} vs {[n for n, _ in ref]}"
    worst = ""
    for i, ((name, a), (_, b)) in enumerate(zip(ref, res)):
        if a is None or b is None:
            if (a is None) != (b is None):
                return False, f"{name}: one side has no tensor"
            continue
        if fp64 is not None:
            ok, detail = dynamo_rmse_rule(a, b, fp64[i][1], tol)
        else:
            ok, detail = _assert_close_check(a, b)
        if not ok:
            return False, f"{name}: {detail}"
        if i == 0:
            worst = f"{name}: {detail}"
    n = len(ref)
    return True, f"{n} tensor(s) ok" + (f" ({worst})" if worst else "")


def _named(pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return [(n, None if t is None else t.detach().clone()) for n, t in pairs]


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


def _pw(x: Any, y: Any) -> Any:
    import torch

    return (x * torch.sigmoid(x) + y).relu() * 0.5 - torch.tanh(y)


def _softmax(x: Any) -> Any:
    return x.softmax(dim=-1)


def _layer_norm(x: Any, w: Any, b: Any) -> Any:
    import torch.nn.functional as F

    return F.layer_norm(x, (x.shape[-1],), w, b)


def _one(r: Any) -> list[tuple[str, Any]]:
    return [("out", r)]


def _pw_case(dev: Any, m: int, n: int) -> Case:
    import torch

    x, y = (torch.randn(m, n, device=dev) for _ in range(2))
    return Case(
        _pw,
        lambda f: f(x, y),
        _one,
        f"{m}x{n} fp32, x*sigmoid(x)+y, relu, *0.5 - tanh(y)",
        min_bytes=3 * m * n * 4,
    )


def _softmax_case(dev: Any, m: int, n: int) -> Case:
    import torch

    x = torch.randn(m, n, device=dev)
    return Case(_softmax, lambda f: f(x), _one, f"{m}x{n} fp32, last dim", min_bytes=2 * m * n * 4)


def _layer_norm_case(dev: Any, m: int, n: int, dtype: Any) -> Case:
    import torch

    x = torch.randn(m, n, device=dev, dtype=dtype)
    w = torch.randn(n, device=dev, dtype=dtype)
    b = torch.randn(n, device=dev, dtype=dtype)
    size = torch.finfo(dtype).bits // 8
    return Case(
        _layer_norm,
        lambda f: f(x, w, b),
        _one,
        f"{m}x{n} {_dt(dtype)}, affine",
        min_bytes=(2 * m * n + 2 * n) * size,
    )


def _dt(dtype: Any) -> str:
    return str(dtype).replace("torch.", "").replace("float32", "fp32").replace("bfloat16", "bf16")


def _mlp(sizes: list[int], act: Callable[[], Any]) -> Any:
    import torch

    layers: list[Any] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        if i:
            layers.append(act())
        layers.append(torch.nn.Linear(a, b))
    return torch.nn.Sequential(*layers)


def _mlp_inference_case(dev: Any, batch: int, sizes: list[int], act: Any, dtype: Any) -> Case:
    import torch

    model = _mlp(sizes, act).to(device=dev, dtype=dtype).eval()
    x = torch.randn(batch, sizes[0], device=dev, dtype=dtype)

    def step(f: Callable[..., Any]) -> Any:
        with torch.no_grad():
            return f(x)

    arrows = " -> ".join(map(str, sizes))
    return Case(
        model, step, _one, f"batch {batch}, {arrows}, {act.__name__}, {_dt(dtype)}, no_grad"
    )


def _mlp_train_case(dev: Any) -> Case:
    import torch

    model = _mlp([512, 2048, 512], torch.nn.GELU).to(dev)
    x = torch.randn(256, 512, device=dev, requires_grad=True)
    params = list(model.named_parameters())

    def loss_fn(inp: Any) -> Any:
        return model(inp).pow(2).mean()

    def step(f: Callable[..., Any]) -> Any:
        model.zero_grad(set_to_none=True)
        x.grad = None
        loss = f(x)
        loss.backward()
        return loss

    def outputs(loss: Any) -> list[tuple[str, Any]]:
        return (
            [("loss", loss)] + [(f"grad {n}", p.grad) for n, p in params] + [("grad input", x.grad)]
        )

    return Case(
        loss_fn,
        step,
        outputs,
        "batch 256, 512 -> 2048 -> 512, GELU, fp32; fwd + pow(2).mean() + bwd",
    )


def _gpt2_train_case(dev: Any) -> Case:
    import torch

    try:
        from transformers import GPT2Config, GPT2LMHeadModel
        from transformers.utils import logging as hf_logging
    except ImportError as e:
        raise Skip(f"transformers is not installed ({e})") from e
    hf_logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = GPT2Config(
        n_layer=4, n_embd=768, n_head=12, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    model = GPT2LMHeadModel(cfg).to(dev).train()
    model64 = copy.deepcopy(model).double()
    model = model.to(torch.bfloat16)
    ids = torch.randint(0, cfg.vocab_size, (8, 512), device=dev)

    def run(m: Any, f: Callable[..., Any]) -> Any:
        m.zero_grad(set_to_none=True)
        loss = f(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    def collect(m: Any, loss: Any) -> list[tuple[str, Any]]:
        return [("loss", loss)] + [(f"grad {n}", p.grad) for n, p in m.named_parameters()]

    def fp64_outputs() -> list[tuple[str, Any]]:
        out = _named(collect(model64, run(model64, model64)))
        model64.zero_grad(set_to_none=True)
        return out

    return Case(
        model,
        lambda f: run(model, f),
        lambda loss: collect(model, loss),
        "HF GPT2LMHeadModel n_layer=4 n_embd=768 n_head=12, random weights, "
        "dropout 0, bf16, 8x512 tokens, loss(labels=input_ids) + bwd",
        fp64_outputs=fp64_outputs,
        rule_tol=1e-2,
    )


def _resnet18_case(dev: Any) -> Case:
    import torch

    try:
        import torchvision
    except ImportError as e:
        raise Skip(f"torchvision is not installed ({e})") from e
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).to(dev).eval()
    model64 = copy.deepcopy(model).double()
    model = model.to(torch.bfloat16)
    x = torch.randn(64, 3, 224, 224, device=dev)
    x64, x = x.double(), x.to(torch.bfloat16)

    def step(f: Callable[..., Any]) -> Any:
        with torch.no_grad():
            return f(x)

    def fp64_outputs() -> list[tuple[str, Any]]:
        with torch.no_grad():
            return [("out", model64(x64))]

    return Case(
        model,
        step,
        _one,
        "torchvision resnet18, weights=None, bs 64, 224x224, bf16, no_grad",
        fp64_outputs=fp64_outputs,
        rule_tol=1e-4,
    )


def _cpu_suite() -> dict[str, Callable[[Any], Case]]:
    import torch

    return {
        "pw_chain": lambda d: _pw_case(d, 2048, 4096),
        "softmax": lambda d: _softmax_case(d, 2048, 4096),
        "layer_norm": lambda d: _layer_norm_case(d, 4096, 1024, torch.float32),
        "mlp_inference": lambda d: _mlp_inference_case(
            d, 256, [512, 2048, 512], torch.nn.GELU, torch.float32
        ),
        "mlp_train_step": _mlp_train_case,
    }


def _gpu_suite() -> dict[str, Callable[[Any], Case]]:
    import torch

    return {
        "pw_chain": lambda d: _pw_case(d, 8192, 8192),
        "softmax": lambda d: _softmax_case(d, 8192, 8192),
        "layer_norm": lambda d: _layer_norm_case(d, 16384, 4096, torch.bfloat16),
        "mlp_inference": lambda d: _mlp_inference_case(
            d, 8192, [4096, 16384, 4096], torch.nn.GELU, torch.bfloat16
        ),
        "mlp_bs1": lambda d: _mlp_inference_case(
            d, 1, [512, 512, 512, 10], torch.nn.ReLU, torch.float32
        ),
        "gpt2_train_step": _gpt2_train_case,
        "resnet18_inference": _resnet18_case,
    }


#: GPU rows whose achieved bandwidth is reported against the device copy bandwidth.
_BANDWIDTH_ROWS = ("pw_chain", "softmax", "layer_norm")


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
    from sdk.core.adapters.torch_private import reset_dynamo

    res = Result()
    outs = None
    try:
        if compile_fn is None:
            fn = case.target
            _, first = clock.wall(lambda: case.step(fn))
            outs = _named(case.outputs(first))
        else:
            reset_dynamo(keep_compiled=not reset)
            _fresh_cache_dirs()
            fn = compile_fn(case.target)
            token = None
            if sink is not None:
                from sdk.core import pipeline

                token = pipeline.collect_reports(sink)
            try:
                res.cold_s, first = clock.wall(lambda: case.step(fn))
            finally:
                if token is not None:
                    from sdk.core import pipeline

                    pipeline.stop_collecting(token)
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
    aten = sum(g.aten_ops for g in reports)
    try:
        covered = sum(g.generated_fraction * g.aten_ops for g in reports)
    except Exception:  # noqa: BLE001 - a report format this code does not know: no share
        aten = 0
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
        "generated_fraction": covered / aten if aten else None,
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

    from sdk.core.adapters.torch_private import reset_dynamo

    reset_dynamo()
    gc.collect()
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _prewarm(dev: Any, sdk_backend: Any) -> float:
    """Compile a trivial function with each backend: imports, compile worker pools and
    compiler probes are then not charged to the first workload's cold compile."""
    import torch

    from sdk.core.adapters.torch_private import reset_dynamo

    t0 = time.perf_counter()
    x = torch.randn(64, device=dev)
    for backend in ("inductor", sdk_backend):
        reset_dynamo()
        torch.compile(lambda t: t * 2.0 + 1.0, backend=backend)(x)
    reset_dynamo()
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
# Machine info and output
# ---------------------------------------------------------------------------


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _loadavg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _machine_info(dev: Any, plugin: str) -> dict[str, Any]:
    import torch

    import sdk

    info: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "sdk": sdk.__version__,
        "plugin": plugin,
        "device": dev.type,
        "cpu": _cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "omp_num_threads_env": config.variable("OMP_NUM_THREADS"),
        "cpu_count": os.cpu_count(),
        "load_average_at_start": _loadavg(),
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001 - not installed or broken: reported as absent
        info["triton"] = None
    if dev.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(dev)
        info["cuda"] = torch.version.cuda
    return info


def _fmt_ms(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 10 else f"{v:.2f}" if v < 100 else f"{v:.1f}"


def _fmt_s(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _graphs_cell(g: dict[str, Any]) -> str:
    if not g:
        return "-"
    frac = g.get("generated_fraction")
    pct = "-" if frac is None else f"{frac:.0%}"
    return f"{g['graphs']}g {g['kernels']}k {g['externs']}x {g['fallbacks']}fb {pct}"


def _check_cell(r: Result) -> str:
    return r.check or "-"


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _render(head: list[str], body: list[list[str]]) -> list[str]:
    """Aligned text columns: the first left-aligned, the rest right-aligned; a body row of
    two cells that does not fill the head (a skipped row) is printed as name + text."""
    widths = [
        max(len(head[i]), *(len(b[i]) for b in body if len(b) > i and len(b) == len(head)))
        for i in range(len(head))
    ]
    lines = [
        "  ".join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in enumerate(zip(head, widths)))
    ]
    lines.append("  ".join("-" * w for w in widths))
    for b in body:
        if len(b) != len(head):
            lines.append(b[0].ljust(widths[0]) + "  " + b[1])
        else:
            lines.append(
                "  ".join(
                    c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(b, widths))
                )
            )
    return lines


def _table(rows: list[Row], bandwidth: float | None) -> tuple[str, float | None, int]:
    head = [
        "workload",
        "eager ms",
        "inductor ms",
        "sdk ms",
        "sdk/ind",
        "sdk/eager",
        "ind cold s",
        "sdk cold s",
        "sdk check",
        "ind check",
        "sdk graphs",
    ]
    body: list[list[str]] = []
    ratios: list[float] = []
    for r in rows:
        if r.skipped:
            body.append([r.name, f"skipped: {r.skipped}"])
            continue
        sdk_ms = r.sdk.ms if r.sdk.check == "ok" else None
        ind_ms = r.inductor.ms if r.inductor.check == "ok" else None
        si, se = _ratio(sdk_ms, ind_ms), _ratio(sdk_ms, r.eager.ms)
        if si is not None:
            ratios.append(si)
        body.append(
            [
                r.name,
                _fmt_ms(r.eager.ms),
                _fmt_ms(r.inductor.ms),
                "MISMATCH" if r.sdk.check == "MISMATCH" else _fmt_ms(sdk_ms),
                "-" if si is None else f"{si:.2f}",
                "-" if se is None else f"{se:.2f}",
                _fmt_s(r.inductor.cold_s),
                _fmt_s(r.sdk.cold_s),
                _check_cell(r.sdk),
                _check_cell(r.inductor),
                _graphs_cell(r.sdk_graphs),
            ]
        )
    geo = _geomean(ratios)
    body.append(
        [
            "geomean sdk/ind",
            "",
            "",
            "",
            "-" if geo is None else f"{geo:.2f}",
            "",
            "",
            "",
            f"n={len(ratios)}",
            "",
            "",
        ]
    )
    lines = _render(head, body)
    lines.append(
        "sdk graphs: g graphs, k generated kernels, x library calls (mm, conv, ...), "
        "fb ops run through the ATen fallback, % of ATen calls in generated kernels; "
        "ratios < 1 mean sdk is faster"
    )
    if bandwidth:
        lines.append("")
        lines.append(
            f"device copy bandwidth (1 GiB D2D copy, read + write, median): "
            f"{bandwidth / 1e9:.0f} GB/s"
        )
        for r in rows:
            if r.name in _BANDWIDTH_ROWS and r.min_bytes and not r.skipped:
                parts = []
                for label, res in (("sdk", r.sdk), ("inductor", r.inductor)):
                    if res.ms and res.check == "ok":
                        bw = r.min_bytes / (res.ms / 1e3)
                        parts.append(f"{label} {bw / 1e9:.0f} GB/s = {bw / bandwidth:.0%}")
                    else:
                        parts.append(f"{label} -")
                lines.append(
                    f"  {r.name}: minimum bytes {r.min_bytes / 2**20:.0f} MiB; "
                    + ", ".join(parts)
                    + " of copy bandwidth"
                )
    return "\n".join(lines), geo, len(ratios)


def _notes(rows: list[Row]) -> list[str]:
    out = []
    for r in rows:
        for label, res in (("sdk", r.sdk), ("inductor", r.inductor), ("eager", r.eager)):
            if res.check == "MISMATCH":
                out.append(f"{r.name}: {label} MISMATCH vs eager: {res.detail}")
            elif res.check == "error":
                out.append(f"{r.name}: {label} error: {res.error} (traceback on stderr)")
        reasons = r.sdk_graphs.get("fallback_reasons") if r.sdk_graphs else None
        if reasons:
            out.append(f"{r.name}: sdk fallbacks: " + " | ".join(reasons[:5]))
        if (
            "train" in r.name
            and r.sdk.check == "ok"
            and r.sdk_graphs
            and not r.sdk_graphs.get("backward_graphs")
        ):
            out.append(
                f"{r.name}: 'sdk graphs' counts no backward graph: the backward was "
                "compiled where the report collector does not reach (on CUDA autograd "
                "runs it on a device thread, outside the collector's ContextVar), so "
                "the column covers the forward graphs only"
            )
    return out


# ---------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------


def main(args: argparse.Namespace) -> int:
    """The kernel suite, ``python -m sdk bench`` (:mod:`sdk.cli` checks the options and sends
    ``--suite models`` to :mod:`sdk.tools.bench_models`)."""
    if getattr(args, "list", False):
        return _list_kernels()
    # Fresh caches before anything compiles (Inductor reads its variable lazily).
    start_dirs = _fresh_cache_dirs()
    try:
        return _main(args, start_dirs)
    finally:
        _remove_temp_dirs()


def _kernel_suite() -> tuple[Any, dict[str, Callable[[Any], Case]]]:
    import torch

    cuda = torch.cuda.is_available()
    return torch.device("cuda" if cuda else "cpu"), (_gpu_suite() if cuda else _cpu_suite())


def _list_kernels() -> int:
    dev, suite = _kernel_suite()
    print(f"kernels suite on {dev.type}:")
    for name in suite:
        print(f"  {name}")
    return 0


@dataclass
class Setup:
    """What every suite needs before its first workload."""

    dev: Any
    cuda: bool
    plugin: str
    sdk_backend: Any
    info: dict[str, Any]
    clock: _Clock


def _setup(args: argparse.Namespace) -> Setup | None:
    """Device, plugin and clock; ``None`` (after an error on stderr) when the plugin cannot
    be used here."""
    import torch

    import sdk
    from sdk.core.adapters import torch_private

    torch_private.configure_for_benchmark()
    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    plugin = args.plugin or ("cuda_triton" if cuda else "cpu_cpp")
    plugin = plugin.removeprefix("sdk:")
    try:
        sdk_backend = sdk.backend(plugin)
    except sdk.SDKError as e:
        print(f"error: sdk:{plugin} cannot be used here: {e}", file=sys.stderr)
        return None
    return Setup(
        dev, cuda, plugin, sdk_backend, _machine_info(dev, plugin), _Clock(cuda, args.repeat)
    )


def _mode(args: argparse.Namespace) -> str | None:
    mode = getattr(args, "mode", None)
    return None if mode in (None, "default") else mode


def _print_header(st: Setup, repeat: int, mode: str | None = None) -> None:
    info, dev = st.info, st.dev
    where = info.get("gpu") or info["cpu"]
    print(
        f"sdk bench: sdk:{st.plugin} vs inductor (torch.compile mode "
        f"{mode or 'default'}, both) vs eager"
    )
    print(
        f"torch {info['torch']}, python {info['python']}, sdk {info['sdk']}, "
        f"triton {info['triton'] or 'not installed'}"
    )
    print(
        f"device: {dev.type}, {where}; torch threads {info['torch_threads']} "
        f"(os.cpu_count {info['cpu_count']}, OMP_NUM_THREADS "
        f"{info['omp_num_threads_env'] or 'unset'})"
    )
    reps = (
        f"{repeat} timed calls"
        if repeat
        else "auto: 100 timed calls"
        if st.cuda
        else "auto: >= 10 timed calls and ~1 s"
    )
    load = info["load_average_at_start"]
    if load is not None and dev.type == "cpu":
        busy = (
            " (other processes are competing for the CPU: expect noisy times)"
            if load[0] > 0.5 * (os.cpu_count() or 1)
            else ""
        )
        print(f"load average (1/5/15 min) at start: {load[0]} {load[1]} {load[2]}{busy}")
    print(
        f"timing: median per call after 3 warm-up calls; {reps} per backend, in {ROUNDS} "
        f"interleaved rounds; cold = first call after a Dynamo reset with fresh cache "
        f"dirs, fx_graph_cache and autograd cache off"
    )


def _print_end(st: Setup, rows: list[Row], table: str) -> None:
    """The table, the load average after the run, and the notes."""
    st.info["load_average_at_end"] = _loadavg()
    print()
    print(table)
    if st.dev.type == "cpu" and st.info["load_average_at_end"] is not None:
        print(
            f"load average at end (this run's own compiler processes included): "
            f"{' '.join(map(str, st.info['load_average_at_end']))}"
        )
    notes = _notes(rows)
    if notes:
        print()
        print("notes:")
        for n in notes:
            print(f"  {n}")


def _method(st: Setup, repeat: int, prewarm_s: float, start_dirs: dict[str, str]) -> dict[str, Any]:
    return {
        "cold": "wall time of the first call after reset_dynamo(), fresh SDK_CACHE_DIR/"
        "TORCHINDUCTOR_CACHE_DIR/TRITON_CACHE_DIR per measurement, "
        "fx_graph_cache and enable_autograd_cache off; a trivial function was "
        "compiled with each backend first (prewarm_s)",
        "steady": f"median of per-call times after 3 warm-up calls, the backends timed in "
        f"turn in {ROUNDS} interleaved rounds (round_ms: each round's median)",
        "timer": "cuda events" if st.cuda else "time.perf_counter",
        "repeat": repeat,
        "prewarm_s": prewarm_s,
        "initial_cache_dirs": start_dirs,
    }


def _write_json(path: str, payload: dict[str, Any], *, quiet: bool = False) -> None:
    with open(path, "w") as f:
        json.dump(payload, f, indent=2)
    if not quiet:
        print(f"\nwrote {path}")


def _exit_code(rows: list[Row]) -> int:
    """1 when any sdk result is a MISMATCH or an error, else 0."""
    return 1 if any(r.sdk.check in ("MISMATCH", "error") for r in rows) else 0


def _main(args: argparse.Namespace, start_dirs: dict[str, str]) -> int:
    import torch

    dev, suite = _kernel_suite()
    names = list(suite)
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in suite]
        if unknown:
            print(
                f"error: unknown workload(s) {', '.join(unknown)}; on {dev.type} the "
                f"workloads are: {', '.join(names)}",
                file=sys.stderr,
            )
            return 2
        names = wanted
    st = _setup(args)
    if st is None:
        return 2
    _print_header(st, args.repeat, _mode(args))

    prewarm_s = _prewarm(st.dev, st.sdk_backend)
    bandwidth = _copy_bandwidth(st.clock) if st.cuda else None
    if st.cuda:
        torch.cuda.empty_cache()
    rows: list[Row] = []
    for name in names:
        rows.append(
            _run_workload(name, suite[name], st.dev, st.clock, st.sdk_backend, mode=_mode(args))
        )

    table, geo, n_geo = _table(rows, bandwidth)
    _print_end(st, rows, table)

    if args.json:
        _write_json(
            args.json,
            {
                "machine": st.info,
                "method": {
                    **_method(st, args.repeat, prewarm_s, start_dirs),
                    "mode": _mode(args) or "default",
                },
                "copy_bandwidth_bytes_per_s": bandwidth,
                "geomean_sdk_over_inductor": geo,
                "geomean_n": n_geo,
                "rows": [_row_json(r, bandwidth) for r in rows],
            },
        )
    return _exit_code(rows)


def _row_json(r: Row, bandwidth: float | None) -> dict[str, Any]:
    def res(x: Result) -> dict[str, Any]:
        return {
            "median_ms": x.ms,
            "samples_ms": x.samples_ms,
            "round_ms": x.round_ms,
            "cold_s": x.cold_s,
            "check": x.check or None,
            "detail": x.detail,
            "error": x.error or None,
        }

    out: dict[str, Any] = {
        "name": r.name,
        "desc": r.desc,
        "skipped": r.skipped or None,
        "eager": res(r.eager),
        "inductor": res(r.inductor),
        "sdk": res(r.sdk),
        "sdk_graphs": r.sdk_graphs,
    }
    ok = r.sdk.check == "ok"
    out["sdk_over_inductor"] = _ratio(r.sdk.ms, r.inductor.ms) if ok else None
    out["sdk_over_eager"] = _ratio(r.sdk.ms, r.eager.ms) if ok else None
    if bandwidth and r.min_bytes and r.name in _BANDWIDTH_ROWS:
        out["min_bytes"] = r.min_bytes
        for label, x in (("sdk", r.sdk), ("inductor", r.inductor)):
            if x.ms and x.check == "ok":
                out[f"{label}_bandwidth_fraction_of_copy"] = r.min_bytes / (x.ms / 1e3) / bandwidth
    return out

"""``python -m sdk bench``: ``sdk:<plugin>``, Inductor and eager, side by side, in one process.

Two suites: ``--suite kernels`` (the default) times the microbenchmarks of
:mod:`sdk.tools.bench_kernels` (elementwise chains, softmax, layer norm, MLPs; on a GPU also a
GPT-2 training step and resnet18); ``--suite models`` times real models, torchvision and timm
inference and HF transformers training steps, each in bf16 and fp32, at ``--size full`` (a
GPU's default) or ``--size small`` (the CPU's default): :mod:`sdk.tools.bench_models`
describes its rows, sizes, checks and CUDA launch counts. ``--only`` picks rows, ``--list``
prints them, ``--json`` writes everything; the exit status is 1 when any sdk result is a
MISMATCH or an error.

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
  serving loop. Each compiler compiles a function of its own that calls the
  workload (Dynamo keeps entries per code object: sharing the model's
  ``forward`` made each call of the first-compiled backend fail the other's
  guards first, 17-29 us a call, which decided the bs1 rows; Inductor paid it).
* **Correctness** is checked on the cold call's result, before anything is
  timed: ``torch.testing.assert_close`` against eager (default fp32 tolerances;
  bf16 ``rtol=atol=2e-2``); for the two full models on a GPU and every row of the
  models suite, Dynamo's benchmark rule against an fp64 reference
  (:func:`dynamo_rmse_rule`). A row
  whose sdk check fails is reported as ``MISMATCH`` and its sdk time is not
  measured. Graphs the plugin could not compile fall back to ATen; the ``sdk
  graphs`` column counts kernels and fallbacks so such a row cannot pass for a
  fast one.

The machinery lives beside this entry point, shared by both suites: :mod:`sdk.tools.bench_timing`
(one workload: compile, check, time), :mod:`sdk.tools.bench_check` (the comparisons with eager)
and :mod:`sdk.tools.bench_report` (setup, header, table, notes, JSON). This module re-exports
the names that scripts and tests import from it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from sdk.tools.bench_check import dynamo_rmse_rule
from sdk.tools.bench_kernels import _cpu_suite, _gpu_suite
from sdk.tools.bench_report import (
    Setup,
    _exit_code,
    _method,
    _mode,
    _print_end,
    _print_header,
    _row_json,
    _setup,
    _table,
    _write_json,
)
from sdk.tools.bench_timing import (
    ROUNDS,
    Case,
    Probe,
    Result,
    Row,
    Skip,
    _Clock,
    _copy_bandwidth,
    _fresh_cache_dirs,
    _prepare,
    _prewarm,
    _remove_temp_dirs,
    _run_workload,
    _time_interleaved,
)

__all__ = [
    "ROUNDS",
    "Case",
    "Probe",
    "Result",
    "Row",
    "Setup",
    "Skip",
    "_Clock",
    "_fresh_cache_dirs",
    "_prepare",
    "_remove_temp_dirs",
    "_run_workload",
    "_time_interleaved",
    "dynamo_rmse_rule",
    "main",
]


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

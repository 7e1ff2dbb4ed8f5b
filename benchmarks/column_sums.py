"""Column reductions of training backwards, alone: the sdk's kernel under several split
settings beside Inductor's and eager's, one process, each kernel timed alone.

    python benchmarks/column_sums.py [--json FILE] [--kinds bias,rms,ln] [--rows 4096,12000]
        [--cols 256,384,...] [--settings split,before,...]

Each case is a bf16 ``[rows, cols]`` gradient reduced over its rows, as the backward of a
Linear's bias (``bias``: ``g.sum(0)``) or of a LayerNorm's gamma and beta (``ln``: the sums
of ``g * xhat`` and of ``g``, siblings over one gradient) or of an RMSNorm's weight (``rms``:
the sum of ``g * x * rstd``; T5's). Every setting compiles afresh
(empty caches, ``torch._dynamo.reset()``), its output is checked against fp64 on fresh
random inputs, and its kernels' device time is read from ``torch.profiler`` over 20 calls
(launch gaps and host time left out: a kernel of a few microseconds is shorter than a call's
host work), twice: ``hot``, the same inputs again and again (in L2 where they fit, as a
gradient is that the kernel before wrote), and ``cold``, L2 flushed before each call.
The settings are ``sdk.plugins.cuda_triton.heuristics`` constants:

* ``split``: the default;
* ``before``: column splits as the sixteenth session left them (``SPLIT_OUTER_MIN_CHUNK``
  4096, ``SPLIT_OUTER_TARGET_PROGRAMS`` 1024, no ``SPLIT_OUTER_MIN_PROGRAMS``);
* ``nofloor``: as the seventeenth session left them (``SPLIT_OUTER_MIN_PROGRAMS`` 0);
* ``unsplit``: ``SPLIT_MIN_INNER_COLUMNS`` out of reach, one kernel of ``cdiv(cols, 16)``
  programs;
* ``tgt1024`` / ``chunk64k``: ``SPLIT_OUTER_TARGET_PROGRAMS`` 1024 / ``SPLIT_OUTER_MIN_CHUNK``
  65536;
* ``floor128``: ``SPLIT_OUTER_MIN_PROGRAMS`` 128;
* ``evict``: L2 eviction hints on the loads, as Inductor gives them (``EVICTION_HINTS`` 1);
* ``x64``: [64, 64] tiles of 64 columns on about 256 programs (``SPLIT_OUTER_XBLOCK`` 64,
  ``SPLIT_OUTER_TARGET_PROGRAMS`` 256).

``--settings`` times some of them only (``split,nofloor``, for example).

The tables printed last have one line per case: device microseconds per call by setting,
and GB/s of the best sdk setting over the bytes the case must move (its inputs read once).
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any

SETTINGS: dict[str, dict[str, int]] = {
    "split": {},
    "before": {
        "SPLIT_OUTER_MIN_CHUNK": 4096,
        "SPLIT_OUTER_TARGET_PROGRAMS": 1024,
        "SPLIT_OUTER_MIN_PROGRAMS": 0,
    },
    "nofloor": {"SPLIT_OUTER_MIN_PROGRAMS": 0},
    "unsplit": {"SPLIT_MIN_INNER_COLUMNS": 1 << 40},
    "tgt1024": {"SPLIT_OUTER_TARGET_PROGRAMS": 1024},
    "chunk64k": {"SPLIT_OUTER_MIN_CHUNK": 65536},
    "floor128": {"SPLIT_OUTER_MIN_PROGRAMS": 128},
    "evict": {"EVICTION_HINTS": 1},
    "x64": {"SPLIT_OUTER_XBLOCK": 64, "SPLIT_OUTER_TARGET_PROGRAMS": 256},
}


def _bias(g):
    return g.sum(0)


def _ln(g, x, mean, rstd):
    xhat = (x.float() - mean) * rstd
    gf = g.float()
    return (gf * xhat).sum(0).to(g.dtype), gf.sum(0).to(g.dtype)


def _rms(g, x, rstd):
    return (g.float() * (x.float() * rstd)).sum(0).to(g.dtype)


def _inputs(kind: str, rows: int, cols: int, dev):
    import torch

    g = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
    if kind == "bias":
        return (g,), rows * cols * 2
    x = torch.randn(rows, cols, device=dev, dtype=torch.bfloat16)
    if kind == "rms":
        rstd = torch.rsqrt(x.float().pow(2).mean(1, keepdim=True) + 1e-6)
        return (g, x, rstd), rows * cols * 4 + rows * 4
    mean = x.float().mean(1, keepdim=True)
    rstd = torch.rsqrt(x.float().var(1, keepdim=True, unbiased=False) + 1e-5)
    return (g, x, mean, rstd), rows * cols * 4 + rows * 8


def _check(out, ref) -> float:
    import torch

    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    worst = 0.0
    for o, r in zip(outs, refs):
        err = (o.double() - r).norm() / r.norm().clamp_min(1e-12)
        if not torch.isfinite(err):
            return float("inf")
        worst = max(worst, float(err))
    return worst


def _device_us(call, flush) -> float:
    """Device microseconds per ``call()`` from its kernels (``flush`` zeroes a buffer larger
    than L2 before each call; its kernel is not counted)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    reps = 20
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            if flush is not None:
                flush.zero_()
            call()
        torch.cuda.synchronize()
    total = 0.0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and "Fill" not in e.name:
            total += e.device_time
    return total / reps


def _case(kind: str, rows: int, cols: int, settings: list[str]) -> dict[str, Any]:
    import torch

    import sdk
    import sdk.cache
    from sdk.plugins.cuda_triton import heuristics

    dev = torch.device("cuda")
    fn = {"bias": _bias, "ln": _ln, "rms": _rms}[kind]
    args, nbytes = _inputs(kind, rows, cols, dev)
    ref = fn(*[a.double() for a in args])
    result: dict[str, Any] = {"kind": kind, "rows": rows, "cols": cols, "bytes": nbytes}
    variants: list[tuple[str, Any, dict[str, int]]] = [("eager", None, {})]
    variants.append(("inductor", "inductor", {}))
    variants += [(name, sdk.backend("cuda_triton"), SETTINGS[name]) for name in settings]
    for name, backend, knobs in variants:
        saved = {k: getattr(heuristics, k) for k in knobs}
        try:
            for k, v in knobs.items():
                setattr(heuristics, k, v)
            if backend is None:
                compiled = fn
            else:
                sdk.cache.fresh_directories()
                torch._dynamo.reset()
                compiled = torch.compile(fn, backend=backend, fullgraph=True)
            # compile (knobs set) and check on fresh inputs
            fresh, _ = _inputs(kind, rows, cols, dev)
            err = _check(compiled(*fresh), fn(*[a.double() for a in fresh]))
        finally:
            for k, v in saved.items():
                setattr(heuristics, k, v)
        err = max(err, _check(compiled(*args), ref))
        tol = 2e-2
        if err > tol:
            result[name] = {"hot": None, "cold": None, "rel_err": err}
            print(f"  {kind} {rows}x{cols} {name}: MISMATCH rel err {err:.3g}", flush=True)
            continue
        flush = torch.empty(256 << 20, dtype=torch.int8, device=dev)
        result[name] = {
            "hot": round(_device_us(functools.partial(compiled, *args), None), 2),
            "cold": round(_device_us(functools.partial(compiled, *args), flush), 2),
            "rel_err": err,
        }
    return result


def main(argv: list[str]) -> int:
    import torch

    import sdk.cache

    if not torch.cuda.is_available():
        print("column_sums.py times GPU kernels: no CUDA device here", file=sys.stderr)
        return 2
    path = argv[argv.index("--json") + 1] if "--json" in argv else None
    rows = [4096, 12000]
    cols = [256, 384, 512, 640, 768, 1024, 1536, 2304, 3072]
    kinds = ["bias", "rms"]
    settings = list(SETTINGS)
    if "--settings" in argv:
        settings = argv[argv.index("--settings") + 1].split(",")
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            print(f"unknown settings {unknown}; known: {', '.join(SETTINGS)}", file=sys.stderr)
            return 2
    if "--kinds" in argv:
        kinds = argv[argv.index("--kinds") + 1].split(",")
    if "--rows" in argv:
        rows = [int(r) for r in argv[argv.index("--rows") + 1].split(",")]
    if "--cols" in argv:
        cols = [int(c) for c in argv[argv.index("--cols") + 1].split(",")]
    sdk.cache.cold_compiles()
    done = []
    for kind in kinds:
        for r in rows:
            for c in cols:
                done.append(_case(kind, r, c, settings))
                print(json.dumps(done[-1]), flush=True)
                if path:
                    with open(path, "w") as f:
                        json.dump(done, f, indent=1)
    names = ["eager", "inductor", *settings]
    for which in ("hot", "cold"):
        print(f"\n{which}: device us per call")
        print("case            " + "".join(f"{n:>10s}" for n in names) + "   best sdk GB/s")
        for d in done:
            us = [d[n][which] for n in names]
            sdk_us = [u for n, u in zip(names, us) if n in settings and u]
            gbs = d["bytes"] / (min(sdk_us) * 1e3) if sdk_us else 0.0
            cells = "".join(f"{u:10.2f}" if u else f"{'-':>10s}" for u in us)
            print(f"{d['kind']:4s} {d['rows']:5d}x{d['cols']:<5d}{cells}   {gbs:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

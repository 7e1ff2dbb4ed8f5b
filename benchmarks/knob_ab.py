"""A plugin heuristic at two values, in one process: a models-suite row compiled by the sdk
with its default and with another value (cuda_triton on a GPU, else cpu_cpp at the suite's
small size), both timed in interleaved rounds beside eager,
then one profiled step of each (launches and device ms per kernel class).

    python benchmarks/knob_ab.py ROWS MODULE:NAME VALUE [--json FILE] [--host-ops N]
    python benchmarks/knob_ab.py ROWS options:NAME VALUE [--json FILE] [--host-ops N]

``MODULE:NAME`` sets a module constant that a compile reads (a heuristic), and
``MODULE:NAME1+NAME2`` several at once (``VALUE`` a tuple, e.g. ``(4096,1024)``); ``options:NAME``
compiles the second side with the backend option ``NAME=VALUE`` (``options={...}`` of
``torch.compile``). A constant read once when the plugin loads (what ``sdk_preferences``
answers, for example) is no knob here: the second side compiles the same program, which its
launches per step show, and the run says so.

e.g. whether BatchNorm's short column reductions should split (more launches, less device
time) on a host-bound training step:

    python benchmarks/knob_ab.py mobilenet_v3_large_train_bf16,resnet50_train_bf16 \\
        sdk.plugins.cuda_triton.heuristics:SPLIT_MIN_INNER_COLUMNS 8192

Several settings on the second side at once: more ``TARGET VALUE`` pairs (options and
constants mixed), e.g. the layout and the split of a tree before both (NCHW, BatchNorm's sums
unsplit) against the default:

    python benchmarks/knob_ab.py resnet50_train_fp32 options:channels_last False \\
        sdk.plugins.cuda_triton.heuristics:SPLIT_BY_GRID False

``--host-ops N``: one more step of each (eager's too) under ``torch.profiler``, and the N ops
that took the most host time of their own, with their calls: whether a layout costs more per
library call, for example (mobilenet_v3 training in channels-last or NCHW, on a host-bound
step):

    python benchmarks/knob_ab.py mobilenet_v3_large_train_bf16 \\
        options:channels_last False --host-ops 25

The knob is set while the second compile runs (its cold call and warm-up compile every
graph, the backward's included) and restored after; each compile starts from empty cache
directories, so the second cannot load the first's kernels. The launches per step tell
whether the knob changed the program at all. Compare only within a row.
"""

from __future__ import annotations

import ast
import importlib
import json
import sys
from typing import Any


def _host_ops(step: Any, top: int) -> list[dict[str, Any]]:
    """One step under ``torch.profiler`` (CPU activities): the ``top`` ops by their own host
    time, with calls and microseconds per call (a library call's ``aten::`` op, the runner's
    launches, the autograd engine's nodes)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    return [
        {
            "op": e.key,
            "calls": e.count,
            "self_us": round(e.self_cpu_time_total, 1),
            "self_us_per_call": round(e.self_cpu_time_total / max(e.count, 1), 2),
        }
        for e in events[:top]
    ]


def _get(mod: Any, attr: str) -> Any:
    """A constant's value, or the tuple of several's (``A+B``)."""
    names = attr.split("+")
    values = tuple(getattr(mod, n) for n in names)
    return values if len(names) > 1 else values[0]


def _set(mod: Any, attr: str, value: Any) -> None:
    names = attr.split("+")
    values = value if len(names) > 1 else (value,)
    if not isinstance(values, tuple) or len(values) != len(names):
        raise SystemExit(f"knob_ab.py: {attr} takes a tuple of {len(names)} values, not {value!r}")
    for n, v in zip(names, values):
        setattr(mod, n, v)


def _target(mod: Any, attr: str) -> str:
    """A setting's name as the command line gives it: ``MODULE:NAME`` or ``options:NAME``."""
    return f"{mod.__name__ if mod is not None else 'options'}:{attr}"


def _row(name: str, knobs: list[tuple[Any, str, Any]], host_ops: int = 0) -> dict[str, Any]:
    """``knobs``: (module, name, value) set on the second side; module None: ``name`` is a
    backend option, given ``value`` on the second side."""
    import torch

    import sdk
    from sdk.tools import bench_models, bench_timing
    from sdk.tools.bench_launches import cuda_launches

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    clock = bench_timing._Clock(cuda, 0)
    plugin = "cuda_triton" if cuda else "cpu_cpp"
    model, dtype = bench_models.rows()[name]
    case = model.build(dev, dtype, "full" if cuda else "small")
    print(f"[{name}] {case.desc}", flush=True)
    eager, ref, eager_step = bench_timing._prepare(name, case, clock, None, None, None)
    fp64 = case.fp64_outputs() if case.fp64_outputs is not None else None
    results: dict[str, Any] = {"eager": eager}
    steps = [(eager, eager_step)]
    constants = [(mod, attr, value) for mod, attr, value in knobs if mod is not None]
    defaults = [(mod, attr, _get(mod, attr)) for mod, attr, _ in constants]
    setting = ", ".join(f"{_target(mod, attr)}={v}" for mod, attr, v in knobs)
    for label in ("default", "knob"):
        options = {a: v for m, a, v in knobs if m is None} if label == "knob" else {}
        backend = sdk.backend(plugin, **options)
        if label == "knob":
            for mod, attr, v in constants:
                _set(mod, attr, v)
        try:
            res, _, step = bench_timing._prepare(
                name,
                case,
                clock,
                lambda t, backend=backend: torch.compile(t, backend=backend),
                ref,
                fp64,
                [],
                reset=False,
            )
        finally:
            for mod, attr, v in defaults:
                _set(mod, attr, v)
        shown = setting if label == "knob" else "defaults"
        print(f"  {label} ({shown}): cold {res.cold_s} s, {res.check} {res.error}", flush=True)
        results[label] = res
        if step is not None:
            steps.append((res, step))
    bench_timing._time_interleaved(name, case, clock, steps, cuda_launches if cuda else None)
    # ("knob" is the second setting's results below; the knobs' names are "setting")
    first_mod, first_attr, first_value = knobs[0]
    out: dict[str, Any] = {
        "row": name,
        "setting": _target(first_mod, first_attr),
        "value": first_value,
    }
    if len(knobs) > 1:
        out["settings"] = setting
    ops: dict[int, list[dict[str, Any]]] = {}
    if host_ops:
        for res, step in steps:
            ops[id(res)] = _host_ops(step, host_ops)
    for label, res in results.items():
        prof = res.profile or {}
        out[label] = {
            "median_ms": res.ms,
            "round_ms": res.round_ms,
            "cold_s": res.cold_s,
            "check": res.check,
            "launches": prof.get("launches"),
            "device_ms": prof.get("device_ms"),
            "by_class": prof.get("by_class"),
        }
        if id(res) in ops:
            out[label]["host_ops"] = ops[id(res)]
        print(
            f"  {label:8s} {res.ms and round(res.ms, 3)} ms (rounds {res.round_ms}), "
            f"launches {prof.get('launches')}, device {prof.get('device_ms')} ms",
            flush=True,
        )
        for op in ops.get(id(res), []):
            print(
                f"    {op['op'][:60]:60s} {op['calls']:6d} calls {op['self_us']:10.1f} us "
                f"({op['self_us_per_call']} per call)",
                flush=True,
            )
    launches = [(results[k].profile or {}).get("launches") for k in ("default", "knob")]
    if launches[0] is not None and launches[0] == launches[1]:
        print(
            f"  the same launches per step on both sides: {setting} may have changed nothing "
            "(a constant read when the plugin loads is no knob; a compile option is "
            "options:NAME)",
            flush=True,
        )
    return out


def main(argv: list[str]) -> int:
    flags = {"--json", "--host-ops"}
    path = argv[argv.index("--json") + 1] if "--json" in argv else None
    host_ops = int(argv[argv.index("--host-ops") + 1]) if "--host-ops" in argv else 0
    plain = [
        a for i, a in enumerate(argv) if a not in flags and (i == 0 or argv[i - 1] not in flags)
    ]
    if len(plain) < 3 or len(plain) % 2 == 0:
        print(__doc__, file=sys.stderr)
        return 2
    rows = plain[0].split(",")
    import sdk.cache

    sdk.cache.cold_compiles()
    knobs = []
    for target, raw in zip(plain[1::2], plain[2::2]):
        module, attr = target.split(":")
        mod = None if module == "options" else importlib.import_module(module)
        knobs.append((mod, attr, ast.literal_eval(raw)))
    done = []
    for name in rows:
        done.append(_row(name, knobs, host_ops))
        if path:
            with open(path, "w") as f:
                json.dump(done, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""What a bench run is on, and what it prints and writes: the device, plugin and machine
(:class:`Setup`), the header, the kernel suite's table and notes, each row's JSON and the exit
status. :mod:`sdk.tools.bench_models` builds its own table from the same cells.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
from dataclasses import dataclass
from typing import Any

from sdk.tools.bench_timing import ROUNDS, Result, Row, _Clock, _fmt_ms, _fmt_s, _graphs_cell

# ---------------------------------------------------------------------------
# Machine info and setup
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
        "omp_num_threads_env": sdk.plugin.environment_variable("OMP_NUM_THREADS"),
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
    import sdk.cache

    sdk.cache.cold_compiles()
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


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


#: GPU rows whose achieved bandwidth is reported against the device copy bandwidth.
_BANDWIDTH_ROWS = ("pw_chain", "softmax", "layer_norm")


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


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
        "fb ops run through the ATen fallback, % of the ATen calls that run code in generated "
        "kernels; "
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

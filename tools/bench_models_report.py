"""What the models suite prints and writes: the table with each row's ratios and target
(sdk over Inductor and over the faster of eager and Inductor, :data:`TARGET`), the launch
profile (``--profile``) and each row's JSON.
"""

from __future__ import annotations

from typing import Any

from sdk.tools import bench_report, bench_timing
from sdk.tools.bench_model_cases import Model
from sdk.tools.bench_timing import Row

#: The target for sdk/ind and sdk/best on every row (``--suite models``).
TARGET = 1.1


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def _best(r: Row) -> float | None:
    """The faster of eager and Inductor (Inductor only when its check passed)."""
    times = [
        t
        for t in (r.eager.ms, r.inductor.ms if r.inductor.check == "ok" else None)
        if t is not None
    ]
    return min(times) if times else None


def _ratios(r: Row) -> tuple[float | None, float | None, float | None]:
    """sdk/inductor, sdk/eager, sdk/min(eager, inductor); ``None`` where not measured."""
    if r.skipped or r.sdk.check != "ok":
        return None, None, None
    ind = r.inductor.ms if r.inductor.check == "ok" else None
    return (
        bench_report._ratio(r.sdk.ms, ind),
        bench_report._ratio(r.sdk.ms, r.eager.ms),
        bench_report._ratio(r.sdk.ms, _best(r)),
    )


def _target_cell(si: float | None, sb: float | None) -> str:
    if si is None or sb is None:
        return "-"
    if sb <= TARGET:
        return "met"
    return "ind only" if si <= TARGET else "missed"


def _f2(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def table(rows_: list[Row]) -> tuple[str, dict[str, Any]]:
    head = [
        "row",
        "eager ms",
        "inductor ms",
        "sdk ms",
        "sdk/ind",
        "sdk/eager",
        "sdk/best",
        "target",
        "ind cold s",
        "sdk cold s",
        "sdk check",
        "ind check",
        "sdk graphs",
    ]
    body: list[list[str]] = []
    si_all: list[float] = []
    se_all: list[float] = []
    sb_all: list[float] = []
    met_ind = met_best = n_targets = 0
    for r in rows_:
        if r.skipped:
            body.append([r.name, f"skipped: {r.skipped}"])
            continue
        si, se, sb = _ratios(r)
        if si is not None:
            si_all.append(si)
            if se is not None:
                se_all.append(se)
            if sb is not None:
                sb_all.append(sb)
                n_targets += 1
                met_ind += si <= TARGET
                met_best += sb <= TARGET
        sdk_ms = r.sdk.ms if r.sdk.check == "ok" else None
        body.append(
            [
                r.name,
                bench_timing._fmt_ms(r.eager.ms),
                bench_timing._fmt_ms(r.inductor.ms),
                "MISMATCH" if r.sdk.check == "MISMATCH" else bench_timing._fmt_ms(sdk_ms),
                _f2(si),
                _f2(se),
                _f2(sb),
                _target_cell(si, sb),
                bench_timing._fmt_s(r.inductor.cold_s),
                bench_timing._fmt_s(r.sdk.cold_s),
                bench_report._check_cell(r.sdk),
                bench_report._check_cell(r.inductor),
                bench_timing._graphs_cell(r.sdk_graphs),
            ]
        )
    geo = {
        "sdk_over_inductor": bench_report._geomean(si_all),
        "sdk_over_eager": bench_report._geomean(se_all),
        "sdk_over_best": bench_report._geomean(sb_all),
        "n": len(si_all),
    }
    body.append(
        [
            "geomean",
            "",
            "",
            "",
            _f2(geo["sdk_over_inductor"]),
            _f2(geo["sdk_over_eager"]),
            _f2(geo["sdk_over_best"]),
            "",
            "",
            "",
            f"n={len(si_all)}",
            "",
            "",
        ]
    )
    lines = bench_report._render(head, body)
    lines.append(
        "sdk/best = sdk / min(eager, inductor); target: both sdk/ind and sdk/best "
        f"<= {TARGET} ('met'; 'ind only': sdk/ind only); ratios < 1 mean sdk is faster"
    )
    lines.append(
        "sdk graphs: g graphs, k generated kernels, x library calls (mm, conv, ...), "
        "fb ops run through the ATen fallback, % of the ATen calls that run code in generated "
        "kernels"
    )
    targets = {
        "limit": TARGET,
        "rows": n_targets,
        "sdk_over_inductor_met": met_ind,
        "sdk_over_best_met": met_best,
    }
    lines.append(
        f"targets: sdk/ind <= {TARGET} on {met_ind}/{n_targets} rows, "
        f"sdk/min(eager, ind) <= {TARGET} on {met_best}/{n_targets} rows"
    )
    return "\n".join(lines), {"geomean": geo, "targets": targets}


def _profile_line(label: str, p: dict[str, Any] | None) -> str:
    if not p:
        return f"    {label:<8}  -"
    if "error" in p:
        return f"    {label:<8}  profile failed: {p['error']}"
    parts = [
        f"{c} {v['launches']}/{v['ms']:.3f}" for c, v in p["by_class"].items() if v["launches"]
    ]
    return f"    {label:<8}  {p['launches']:>5} launches  {p['device_ms']:9.3f} ms  " + "  ".join(
        parts
    )


def profile_text(rows_: list[Row], cuda: bool) -> str:
    if not cuda:
        return (
            "launches per step: counted on CUDA only (torch.profiler's CUDA activities); "
            "nothing to show on this device"
        )
    lines = [
        (
            "launches per step (one warm step under torch.profiler, CUDA activities): "
            "launches, device ms, and per class launches/ms"
        )
    ]
    for r in rows_:
        if r.skipped:
            continue
        lines.append(f"  {r.name}")
        for label, res in (("eager", r.eager), ("inductor", r.inductor), ("sdk", r.sdk)):
            lines.append(_profile_line(label, res.profile))
    return "\n".join(lines)


def _row_json(r: Row, model: Model, dtype: str, size: str, cuda: bool) -> dict[str, Any]:
    out = bench_report._row_json(r, None)
    si, se, sb = _ratios(r)
    out.update(
        {
            "model": model.name,
            "kind": model.kind,
            "package": model.package,
            "dtype": dtype,
            "size": size,
            "sdk_over_inductor": si,
            "sdk_over_eager": se,
            "sdk_over_best": sb,
            "target": _target_cell(si, sb),
        }
    )
    if not cuda:
        out["profile"] = {"skipped": "launches are counted on CUDA only"}
    elif r.skipped:
        out["profile"] = {"skipped": "row skipped"}
    else:
        out["profile"] = {
            label: res.profile or {"error": "not profiled (not timed)"}
            for label, res in (("eager", r.eager), ("inductor", r.inductor), ("sdk", r.sdk))
        }
    return out

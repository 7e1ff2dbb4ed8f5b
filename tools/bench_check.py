"""Correctness of the bench suites: each compiled backend's first result against eager's.

Both suites (:mod:`sdk.tools.bench`, :mod:`sdk.tools.bench_models`) check the cold call before
anything is timed: ``torch.testing.assert_close`` against eager, or, where the case gives an
fp64 reference, Dynamo's benchmark rule (:func:`dynamo_rmse_rule`).
"""

from __future__ import annotations

import math
from typing import Any

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

"""CUDA launches of one warm step, per kernel class: the models suite's probe
(:func:`cuda_launches`), also used by scripts in ``benchmarks/``.

One step runs under ``torch.profiler`` with CUDA activities; kernel, memcpy and memset
activities are counted and their device time summed per class (:func:`classify_kernel`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# ---------------------------------------------------------------------------
# Launch counting (CUDA)
# ---------------------------------------------------------------------------


KERNEL_CLASSES = ("triton", "gemm", "conv", "attention", "copy", "other")


#: Kernels the sdk's plugins generate are named ``k_<ops>`` (core/scheduler.kernel_name).
_GENERATED = re.compile(r"k_\w+")


_ATTENTION = re.compile(r"flash|fmha|attention|efficient|sdpa")


_CONV = re.compile(r"conv(?!ert)|cudnn|implicit|winograd|fprop|dgrad|wgrad|im2col|col2im")


_GEMM = re.compile(r"gemm|gemv|cublas|cutlass|sm90|sm100|nvjet|splitkreduce")


def classify_kernel(name: str) -> str:
    """A device activity's class from its name: ``copy`` (memcpy, memset), ``triton``
    (Inductor's ``triton_*`` and the sdk's generated ``k_*`` kernels), ``attention``,
    ``conv``, ``gemm``, else ``other``; checked in that order, so a cuDNN implicit-GEMM
    convolution is ``conv`` and a CUTLASS flash-attention kernel ``attention``."""
    n = name.lower()
    if "memcpy" in n or "memset" in n:
        return "copy"
    if n.startswith("triton") or _GENERATED.fullmatch(name):
        return "triton"
    if _ATTENTION.search(n):
        return "attention"
    if _CONV.search(n):
        return "conv"
    if _GEMM.search(n):
        return "gemm"
    return "other"


def _is_device_event(e: Any) -> bool:
    return str(getattr(e, "device_type", "")).rsplit(".", 1)[-1] == "CUDA"


def summarize_device_events(events: Any, top: int = 5) -> dict[str, Any]:
    """Launches and device time per kernel class of a profiler's events (CUDA ones only),
    and the ``top`` kernels by device time."""
    by_class = {c: {"launches": 0, "ms": 0.0} for c in KERNEL_CLASSES}
    per_kernel: dict[str, float] = {}
    total = 0
    for e in events:
        if not _is_device_event(e):
            continue
        us = float(e.time_range.elapsed_us())
        cls = by_class[classify_kernel(e.name)]
        cls["launches"] += 1
        cls["ms"] += us / 1e3
        per_kernel[e.name] = per_kernel.get(e.name, 0.0) + us / 1e3
        total += 1
    most = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:top]
    return {
        "launches": total,
        "device_ms": sum(c["ms"] for c in by_class.values()),
        "by_class": by_class,
        "top_kernels": [{"name": k[:160], "ms": ms} for k, ms in most],
    }


def kernel_times(events: Any) -> dict[str, list]:
    """Each CUDA kernel's ``[launches, device microseconds]`` among a profiler's events."""
    per: dict[str, list] = {}
    for e in events:
        if _is_device_event(e):
            row = per.setdefault(e.name, [0, 0.0])
            row[0] += 1
            row[1] += e.device_time
    return per


def cuda_launches(step: Callable[[], Any], top: int = 5) -> dict[str, Any]:
    """One call of ``step`` under the CUDA profiler: :func:`summarize_device_events`."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    out = summarize_device_events(prof.events(), top)
    if not out["launches"]:
        return {"error": "the profiler recorded no CUDA activity (is CUPTI available?)"}
    return out

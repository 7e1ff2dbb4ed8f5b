"""Pad matrix products to the alignment the GPU's BLAS libraries want.

cuBLAS and CUTLASS pick their fast tensor-core kernels only when every
leading dimension is a multiple of 16 bytes. A product with an odd dimension
(GPT-2's vocabulary of 50257, say) falls to slow "align1" kernels: on an H200
the LM head's three products took 7.9 ms of a 15 ms training step. These
decompositions (contributed through ``sdk_decompositions``) pad M, K and N
with zeros up to the alignment and slice the result: zeros add nothing to the
sums, so the values are those of the unpadded product.

Small products are left alone: the padding copies would cost more than they save. So are
float32 products unless TF32 is on (``torch.set_float32_matmul_precision("high")``): full
precision float32 runs on CUDA cores, whose kernels gain nothing from the alignment (on an
H200, DistilBERT's fp32 training step spent 0.29 ms padding its vocabulary projection and
0.5 ms more in the product it fed; Inductor benchmarks the choice and does not pad there).

Symbolic sizes (``dynamic=True``) are read, never branched on: the work is estimated from
the compiling call's sizes (``sdk.ir.size_hint``) and only static dimensions are padded, as
Inductor's pad_mm does. A comparison of a symbolic size would add a guard to Dynamo's
shape environment, and Dynamo would recompile the graph on each side of it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

import sdk
import sdk.ir

aten = torch.ops.aten

#: Pad only products of at least this many multiply-adds (M * N * K).
MIN_WORK = 1 << 30


def _align(dtype: torch.dtype) -> int:
    """Elements per 16 bytes."""
    return max(1, 16 // dtype.itemsize)


def _up(n: Any, a: int) -> Any:
    """``n`` rounded up to a multiple of ``a``; a symbolic size as it is."""
    return (n + a - 1) // a * a if isinstance(n, int) else n


def _tensor_cores(dtype: torch.dtype) -> bool:
    """Whether cuBLAS runs products of ``dtype`` on tensor cores (the ones that want the
    alignment): half types always, float32 only with TF32 allowed."""
    if dtype in (torch.float16, torch.bfloat16):
        return True
    if dtype == torch.float32:
        return (
            torch.get_float32_matmul_precision() != "highest"
            or getattr(torch.backends.cuda.matmul, "fp32_precision", None) == "tf32"
        )
    return False


def _wants_padding(work: tuple, dims: tuple, dtype: torch.dtype) -> bool:
    """Pad when the product runs on tensor cores, its multiply-adds (the product of
    ``work``) reach MIN_WORK and a static one of ``dims`` is not aligned."""
    if not _tensor_cores(dtype):
        return False
    try:
        if math.prod(sdk.ir.size_hint(x) for x in work) < MIN_WORK:
            return False
    except KeyError:  # a size without a value at compile time (data-dependent)
        return False
    a = _align(dtype)
    return any(isinstance(x, int) and x % a for x in dims)


def _is(x: Any, value: int) -> bool:
    """``x == value`` for a static ``x``; False (and no guard) for a symbolic one."""
    return isinstance(x, int) and x == value


def _pad2(t: torch.Tensor, rows: Any, cols: Any) -> torch.Tensor:
    r, c = t.shape[-2], t.shape[-1]
    pr = rows - r if isinstance(rows, int) else 0  # a symbolic size is never padded
    pc = cols - c if isinstance(cols, int) else 0
    if not (pr or pc):
        return t
    if _is(t.stride(-2), 1) and not _is(t.stride(-1), 1):
        # a transposed operand (a weight used as W.t()): pad its rows in memory
        # order and transpose back, a straight copy instead of a transposing one
        return F.pad(t.transpose(-1, -2), (0, pr, 0, pc)).transpose(-1, -2)
    return F.pad(t, (0, pc, 0, pr))


def mm(a: torch.Tensor, b: torch.Tensor) -> Any:
    (m, k), n = a.shape, b.shape[1]
    if not _wants_padding((m, k, n), (m, k, n), a.dtype):
        return NotImplemented
    al = _align(a.dtype)
    mp, kp, np_ = _up(m, al), _up(k, al), _up(n, al)
    return aten.mm(_pad2(a, mp, kp), _pad2(b, kp, np_))[:m, :n]


def bmm(a: torch.Tensor, b: torch.Tensor) -> Any:
    bs, m, k = a.shape
    n = b.shape[2]
    if not _wants_padding((bs, m, k, n), (m, k, n), a.dtype):
        return NotImplemented
    al = _align(a.dtype)
    mp, kp, np_ = _up(m, al), _up(k, al), _up(n, al)
    return aten.bmm(_pad2(a, mp, kp), _pad2(b, kp, np_))[:, :m, :n]


def addmm(
    bias: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: Any = 1, alpha: Any = 1
) -> Any:
    out = mm(a, b)
    if out is NotImplemented:
        return NotImplemented
    if alpha != 1:
        out = out * alpha
    return out + (bias if beta == 1 else bias * beta)


def decompositions() -> dict[Any, Callable[..., Any]]:
    return {aten.mm.default: mm, aten.bmm.default: bmm, aten.addmm.default: addmm}

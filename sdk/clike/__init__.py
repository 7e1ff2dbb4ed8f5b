"""Renderers as data: one loop-nest emitter for C-like targets, driven by a table.

A target whose kernels are C-like source (C or C++ with OpenMP, a vendor's C dialect) is a
:class:`CTarget`: what each IR op (:data:`sdk.ir.OPS`) and reduction
(:data:`sdk.ir.REDUCTIONS`) becomes, the C type of each dtype, how the few structural pieces
are spelt (:class:`Spelling`: :data:`C` or :data:`CXX`) and the preludes of a translation
unit. The emitter (:mod:`sdk.clike.emit`) owns what every such target shares: merged loop
dimensions, each expression hoisted to the outermost loop it depends on (CSE on the hashable
IR nodes), parallel blocks of ``omp simd`` loops, reductions vectorized by OpenMP clauses and
split across threads when rows are few and long, symbolic sizes, clamped loads where bounds
are unproven, and checked indirect indices. cpu_cpp is one such table (C++, op functions:
``plugins/cpu_cpp/render.py``), the ``--c-like`` scaffold another (C, op format strings).

The kernel the scaffold's table gives for ``relu(x * y + 1)`` over two contiguous fp32
tensors of symbolic sizes ``s77 x s27`` (``torch.compile(..., dynamic=True)``)::

    // kernel k_mul_add_relu                         // named after its ops; then where from
    //   from mul: aten.mul.Tensor                   // (the FX nodes) and its loop ranges
    //   from add_3: aten.add.Tensor
    //   from relu: aten.relu.default
    // outer: x0 < s77, x1 < s27
    // stage 0: inner -: store buf2
    void k_mul_add_relu(const float* arg2, const float* arg3, float* buf2,
                        const int64_t s27, const int64_t s77) {  // Kernel.size_args last
      // FloorDiv(s27*s77 + 4095, 4096) blocks of up to 4096 elements
      #pragma omp parallel for schedule(static) if((s27 * s77) >= 32768)  // x0, x1 merged
      for (int64_t p = 0; p < ((4095 + (s27 * s77)) / 4096); ++p) {
        const int64_t lo = p * 4096;
        const int64_t hi = sdk_imin(lo + 4096, (s27 * s77));  // Spelling.imin (C++: std::min)
        #pragma omp simd
        for (int64_t x1 = lo; x1 < hi; ++x1) {
          const float t0 = arg2[x1];                  // Load: sdk.ir.print_index
          const float t1 = arg3[x1];
          const float t2 = (t0 * t1);                 // ops["mul"] = "({a} * {b})"
          const float t3 = (t2 + 1.0f);               // Const(1.0): CTarget.literal
          const float t4 = ((t3 != t3 || t3 > 0.0f) ? t3 : 0.0f);  // ops["maximum"]
          buf2[x1] = t4;                              // Store
        }
      }
    }

A reduction is accumulated in ``CTarget.accumulate``'s type under ``#pragma omp simd
reduction(...)`` with ``Reducer.omp``; an indirect index is checked (the kernel then returns
``int64_t``: see :mod:`sdk.clike.emit`, "Index checks").

``CTarget.render(kernel)`` gives a :class:`sdk.KernelSource` (``meta``: ``nargs``,
``nsizes``, ``index_checks``); ``CTarget.unit(sources)`` one translation unit for
:mod:`sdk.toolchain`; :func:`launchers` the callables of the built library (they pass the
size arguments and raise :class:`IndexError` for an out-of-range index). :data:`C_TYPES`,
:data:`C_HALF`, :data:`C_PRELUDE` and :data:`C_INDEX_CHECKS` are what a C target starts from,
:data:`HALF_HELPERS` the exact bf16/fp16 conversions (C that C++ compiles too);
:func:`loop_helpers` and :func:`index_checks` the emitter's helpers in a :class:`Spelling`'s
language (one source for C and C++). An op,
reduction or type the table lacks raises :class:`NotImplementedError` naming it: the graph
then runs through ATen (a plugin should refuse such ops in ``sdk_op_support`` so that only
they fall back).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence

import sdk
from sdk import toolchain

from .c import (
    BF16_HELPERS,
    C_HALF,
    C_TYPES,
    CXX,
    HALF_HELPERS,
    TAKE_INDEX_ERROR,
    C,
    Reducer,
    Spelling,
    index_checks,
    loop_helpers,
)
from .emit import render, truth
from .target import (
    C_INDEX_CHECKS,
    C_PRELUDE,
    CTarget,
    OpCode,
    as_computed,
    translation_unit,
    wide,
)

__all__ = [
    "BF16_HELPERS", "CXX", "C_HALF", "C_INDEX_CHECKS", "C_PRELUDE", "C_TYPES", "HALF_HELPERS",
    "TAKE_INDEX_ERROR", "C", "CTarget", "OpCode", "Reducer", "Spelling", "as_computed",
    "index_checks", "launchers", "loop_helpers", "render", "translation_unit", "truth", "wide",
]  # fmt: skip


def launchers(lib: ctypes.CDLL, sources: Sequence[sdk.KernelSource]) -> list[sdk.KernelFn]:
    """The kernels of ``sources`` in ``lib`` (built from their translation unit), as the
    callables ``sdk_compile_kernels`` returns: each takes its tensors, then its size arguments
    (``meta["nsizes"]``); one that checks indirect indices (``meta["index_checks"]``) raises
    :class:`IndexError` naming the index, the extent and the kernel when one was out of
    range (the kernel read it clamped)."""
    out = []
    for s in sources:
        nargs, nsizes = s.meta["nargs"], s.meta.get("nsizes", 0)
        if s.meta.get("index_checks"):  # nonzero when an indirect index was out of range
            fn = toolchain.get_function(lib, s.entry, nargs, ctypes.c_int64, nsizes)
            take = toolchain.get_function(lib, TAKE_INDEX_ERROR, 1, ctypes.c_int64)
            error = functools.partial(_index_error, take, s.name)
            out.append(toolchain.launcher(fn, nargs, nsizes, error))
        else:
            fn = toolchain.get_function(lib, s.entry, nargs, None, nsizes)
            out.append(toolchain.launcher(fn, nargs, nsizes))
    return out


def _index_error(take: Callable[..., int], name: str) -> IndexError:
    """The error the calling thread's last checking kernel recorded (and clears it): the
    kernel read a clamped index instead."""
    got = (ctypes.c_int64 * 2)()
    take(ctypes.addressof(got))
    index, size = got
    return IndexError(
        f"index {index} is out of bounds for dimension with size {size} (kernel {name})"
    )

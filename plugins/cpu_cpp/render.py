"""cpu_cpp's renderer: :class:`sdk.clike.CTarget` :data:`TARGET`, C++ with OpenMP.

The emitter is the SDK's (:mod:`sdk.clike.emit`: loop merging, hoisting, ``omp simd``
loops with reduction clauses, rows split across threads, index checks); what C++ each op,
reduction and dtype becomes is data in :mod:`.ops` (:data:`CODE_FOR_OP`, :data:`REDUCERS`,
:data:`TYPE_MAP`), and the helpers those call are :data:`RENDER_PRELUDE` and
:data:`INDEX_CHECK_PRELUDE` (:mod:`.helpers`), after the toolchain's ``PRELUDE``.
"""

from __future__ import annotations

import sdk
import sdk.clike
from sdk.clike.emit import BLOCK, PARALLEL_MIN_WORK, SPLIT_MAX_OUTER, SPLIT_MIN_INNER
from sdk.ir import Kernel

from . import toolchain
from .helpers import INDEX_CHECK_PRELUDE, RENDER_PRELUDE, TAKE_INDEX_ERROR
from .ops import CODE_FOR_OP, HALF, REDUCERS, TYPE_MAP

__all__ = [
    "BLOCK", "CODE_FOR_OP", "INDEX_CHECK_PRELUDE", "PARALLEL_MIN_WORK", "REDUCERS",
    "RENDER_PRELUDE", "SPLIT_MAX_OUTER", "SPLIT_MIN_INNER", "TAKE_INDEX_ERROR", "TARGET",
    "TYPE_MAP", "render_kernel",
]  # fmt: skip

#: cpu_cpp as a C-like target: C++17 spellings, its op tables, reductions accumulated in
#: the type they compute in, column reductions in double (a float column of n rows adds them
#: in one chain: its error grows with n, where eager's cascade sums' grows with log n).
TARGET = sdk.clike.CTarget(
    name="cpu_cpp",
    ops=CODE_FOR_OP,
    reducers=REDUCERS,
    types=TYPE_MAP,
    half=HALF,
    accumulate=sdk.clike.as_computed,
    accumulate_columns=sdk.clike.wide,
    spelling=sdk.clike.CXX,
    preludes=(toolchain.PRELUDE, RENDER_PRELUDE),
    checks=INDEX_CHECK_PRELUDE,
    language=toolchain.LANGUAGE,
)


def render_kernel(kernel: Kernel) -> sdk.KernelSource:
    """``kernel`` as one ``extern "C"`` C++ function (:func:`sdk.clike.render`)."""
    return TARGET.render(kernel)

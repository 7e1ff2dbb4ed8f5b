"""The loop IR, public: what a plugin renders, and what a lowering override builds.

Kernels (:class:`Kernel`, :class:`Stage`, :class:`Store`, :class:`Reduction`,
:class:`BufferArg`, :class:`Layout`) are what ``sdk_render_kernel`` receives.
Scalar expressions (:class:`Const`, :class:`Load`, :class:`Op`,
:class:`IndexValue`, :class:`LocalRef`) form each kernel's body; :data:`OPS`
is the closed op vocabulary, :data:`REDUCTIONS` the reduction ops and
:data:`TRANSCENDENTAL` the ops that cost far more than a load (the scheduler stores what
they compute rather than recompute it).
A plugin's ``sdk_lower_op`` builds nodes with :class:`LoweringBuilder` from
:class:`TensorValue` inputs; ``sdk_can_fuse`` receives :class:`FusionGroup` s.
Indices are sympy expressions over :func:`var` symbols using
:class:`FloorDiv` and :class:`Mod`; :func:`print_index` renders them and
:func:`index_bounds` bounds them over loop ranges; :func:`merge_loops` merges a kernel's
adjacent ranges where every index runs through both contiguously (one variable, no
division). ``sdk_op_support`` and the
decomposition hooks receive ATen ops as :class:`OpOverload` s.

Symbolic sizes (plugins with ``Capability.SYMBOLIC_SIZES``): a size, stride or offset
may be a sympy expression over size symbols (:func:`size_var`, each an integer >= 2 known
at run time); a kernel takes its ``size_args`` as integers after the buffers.
:func:`is_static` tells them apart, :func:`print_size` renders one, :func:`size_hint`
gives the compiling call's value (for heuristics only), :func:`in_range` and
:func:`provably_nonneg` decide bounds for every value.

:data:`LIBRARY_OPS` are the library calls (matrix products, convolutions, attention) a
plugin may run through its own library with ``sdk_extern``.
"""

from typing import Any

from .expr import (
    CAST_VIA,
    OPS,
    PREDICATES,
    REDUCTIONS,
    TRANSCENDENTAL,
    Const,
    Expr,
    IndexValue,
    Load,
    LocalRef,
    Op,
    value_bounds,
    walk,
)
from .graph import LIBRARY_OPS, LoweringBuilder, TensorValue
from .index import (
    MIN_SIZE,
    FloorDiv,
    Mod,
    dominant_bounds,
    in_range,
    index_bounds,
    is_static,
    numel_hint,
    print_index,
    print_size,
    provably_nonneg,
    size_hint,
    size_symbols,
    size_var,
    static,
    var,
)
from .kernel import (
    BufferArg,
    FusionGroup,
    IRCheckError,
    Kernel,
    Layout,
    Reduction,
    Stage,
    Store,
    check_kernel,
)
from .loops import merge_dims, merge_loops


def __getattr__(name: str) -> Any:
    """``OpOverload``: torch's type of an ATen op, a private torch name (the core's adapter
    provides it, through sdk._seams), looked up on first use."""
    if name != "OpOverload":
        raise AttributeError(f"module 'sdk.ir' has no attribute {name!r}")
    from sdk._seams import private_torch

    value = globals()[name] = private_torch().OpOverload
    return value


__all__ = [
    "CAST_VIA",
    "LIBRARY_OPS",
    "MIN_SIZE",
    "OPS",
    "PREDICATES",
    "REDUCTIONS",
    "TRANSCENDENTAL",
    "BufferArg",
    "Const",
    "Expr",
    "FloorDiv",
    "FusionGroup",
    "IRCheckError",
    "IndexValue",
    "Kernel",
    "Layout",
    "Load",
    "LocalRef",
    "LoweringBuilder",
    "Mod",
    "Op",
    "OpOverload",
    "Reduction",
    "Stage",
    "Store",
    "TensorValue",
    "check_kernel",
    "dominant_bounds",
    "in_range",
    "index_bounds",
    "is_static",
    "merge_dims",
    "merge_loops",
    "numel_hint",
    "print_index",
    "print_size",
    "provably_nonneg",
    "size_hint",
    "size_symbols",
    "size_var",
    "static",
    "value_bounds",
    "var",
    "walk",
]

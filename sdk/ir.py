"""The loop IR, public: what a plugin renders, and what a lowering override builds.

Kernels (:class:`Kernel`, :class:`Stage`, :class:`Store`, :class:`Reduction`,
:class:`BufferArg`, :class:`Layout`) are what ``sdk_render_kernel`` receives.
Scalar expressions (:class:`Const`, :class:`Load`, :class:`Op`,
:class:`IndexValue`, :class:`LocalRef`) form each kernel's body; :data:`OPS`
is the closed op vocabulary and :data:`REDUCTIONS` the reduction ops.
A plugin's ``sdk_lower_op`` builds nodes with :class:`LoweringBuilder` from
:class:`TensorValue` inputs; ``sdk_can_fuse`` receives :class:`FusionGroup` s.
Indices are sympy expressions over :func:`var` symbols using
:class:`FloorDiv` and :class:`Mod`; :func:`print_index` renders them and
:func:`index_bounds` bounds them over loop ranges.
"""

from sdk.core.ir.expr import (
    OPS,
    PREDICATES,
    REDUCTIONS,
    Const,
    Expr,
    IndexValue,
    Load,
    LocalRef,
    Op,
    walk,
)
from sdk.core.ir.graph import TensorValue
from sdk.core.ir.index import FloorDiv, Mod, index_bounds, print_index, var
from sdk.core.ir.kernel import (
    BufferArg,
    IRCheckError,
    Kernel,
    Layout,
    Reduction,
    Stage,
    Store,
    check_kernel,
)
from sdk.core.lowering import LoweringBuilder
from sdk.core.scheduler import FusionGroup

__all__ = [
    "OPS",
    "PREDICATES",
    "REDUCTIONS",
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
    "Reduction",
    "Stage",
    "Store",
    "TensorValue",
    "check_kernel",
    "index_bounds",
    "print_index",
    "var",
    "walk",
]

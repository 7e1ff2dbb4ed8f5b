"""Lowering: ATen graph -> loop IR nodes, one module per op family.

:mod:`.lowerer` walks the graph (:class:`Lowerer`) and holds the table of lowerings
(``LOWERINGS``, filled by ``@register``); :mod:`.layouts` chooses strides and views'
layouts; :mod:`.helpers` is what the op lowerings share. The op families register
themselves on import: :mod:`.elementwise`, :mod:`.reductions`, :mod:`.views`,
:mod:`.movement` (data movement with computed indices) and :mod:`.mutation` (copies into
graph inputs). This package exports what the rest of the core uses.
"""

from __future__ import annotations

from . import elementwise, movement, mutation, reductions, views  # noqa: F401 - register
from .elementwise import SEED_BUFFER
from .layouts import _dense, _meta_view, same_strides, shape_of, strides_of
from .lowerer import (
    COLLECTIVE_OPS,
    IN_PLACE_FORMS,
    LIBRARY_OPS,
    WAIT_OPS,
    Lowerer,
    LoweringBuilder,
    cast,
    refusal,
)
from .views import reshape_reindex

__all__ = [
    "COLLECTIVE_OPS",
    "IN_PLACE_FORMS",
    "LIBRARY_OPS",
    "SEED_BUFFER",
    "WAIT_OPS",
    "Lowerer",
    "LoweringBuilder",
    "_dense",
    "_meta_view",
    "cast",
    "refusal",
    "reshape_reindex",
    "same_strides",
    "shape_of",
    "strides_of",
]

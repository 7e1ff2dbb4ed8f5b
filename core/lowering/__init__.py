"""Lowering: ATen graph -> loop IR nodes, one module per op family.

:mod:`.lowerer` walks the graph (:class:`Lowerer`); :mod:`.optable` holds the table of
lowerings (``LOWERINGS``, filled by ``@register``) and of library calls; :mod:`.layouts` chooses strides and views'
layouts; :mod:`.helpers` is what the op lowerings share. The op families register
themselves on import: :mod:`.elementwise`, :mod:`.reductions`, :mod:`.views`,
:mod:`.movement` (data movement with computed indices), :mod:`.pooling` and
:mod:`.mutation` (copies into graph inputs). This package exports what the rest of the core uses.
"""

from __future__ import annotations

from . import elementwise, movement, mutation, pooling, reductions, views  # noqa: F401 - register
from .elementwise import SEED_BUFFER
from .layouts import _dense, _meta_view, channels_last_wanted, same_strides, shape_of, strides_of
from .lowerer import (
    ORIGINS,
    Lowerer,
    LoweringBuilder,
    cast,
    origin_of,
    origins_of,
    refusal,
)
from .optable import COLLECTIVE_OPS, IN_PLACE_FORMS, LIBRARY_OPS, WAIT_OPS
from .views import reshape_reindex

__all__ = [
    "COLLECTIVE_OPS",
    "IN_PLACE_FORMS",
    "LIBRARY_OPS",
    "ORIGINS",
    "SEED_BUFFER",
    "WAIT_OPS",
    "Lowerer",
    "LoweringBuilder",
    "_dense",
    "_meta_view",
    "cast",
    "channels_last_wanted",
    "origin_of",
    "origins_of",
    "refusal",
    "reshape_reindex",
    "same_strides",
    "shape_of",
    "strides_of",
]

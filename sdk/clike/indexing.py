"""Index analysis for the emitter: merging loop dimensions (:func:`sdk.ir.merge_dims`).

Index bounds are :func:`sdk.ir.index_bounds`, shared with every renderer.
"""

from __future__ import annotations

from sdk.ir.loops import merge_dims

__all__ = ["merge_dims"]

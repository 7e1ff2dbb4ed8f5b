"""Adapter over torch's MegaCache (``torch.compiler.save_cache_artifacts`` and
``load_cache_artifacts``, private module ``torch.compiler._cache``).

Light on purpose: ``import sdk`` registers the SDK's artifact types through it, because
``load_cache_artifacts()`` must know every type of a blob before it reads any of it (a type it
does not know makes it drop the whole blob, torch's own entries too). ``import sdk`` imports
no torch: a type is registered with torch at once where torch is imported, else right after
``import torch`` (:mod:`.imports`), before anyone can load a blob.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .imports import when_imported

#: kind -> what loads an entry of it (``populate(key, content)``), as :func:`register` got it
_populates: dict[str, Callable[[str, bytes], None]] = {}
#: kind -> the artifact type registered with torch (none where torch has no MegaCache)
_types: dict[str, Any] = {}


def register(kind: str, populate: Callable[[str, bytes], None]) -> None:
    """Make ``save_cache_artifacts()`` carry entries of ``kind`` (recorded by :func:`record`)
    and ``load_cache_artifacts()`` hand each to ``populate(key, content)``."""
    if kind in _populates:
        return
    _populates[kind] = populate
    when_imported("torch", lambda _torch: _register_with_torch(kind))


def _register_with_torch(kind: str) -> None:
    try:
        from torch.compiler._cache import CacheArtifact, CacheArtifactFactory
    except ImportError:  # a torch without MegaCache: nothing to carry
        return
    if kind in _types:
        return
    populate = _populates[kind]

    def populate_cache(self: Any) -> None:
        populate(self.key, self.content)

    cls = type(
        f"SDKCacheArtifact_{kind}",
        (CacheArtifact,),
        {"populate_cache": populate_cache, "type": staticmethod(lambda: kind)},
    )
    _types[kind] = CacheArtifactFactory.register(cls)


def record(kind: str, key: str, content: bytes) -> None:
    """Record one entry for the next ``save_cache_artifacts()``."""
    if kind in _types:
        from torch.compiler._cache import CacheArtifactManager

        CacheArtifactManager.record_artifact(kind, key, content)

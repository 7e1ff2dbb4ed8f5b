"""Adapter over torch's MegaCache (``torch.compiler.save_cache_artifacts`` and
``load_cache_artifacts``, private module ``torch.compiler._cache``).

Light on purpose: ``import sdk`` registers the SDK's artifact type through it, because
``load_cache_artifacts()`` must know every type of a blob before it reads any of it (a type it
does not know makes it drop the whole blob, torch's own entries too).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    from torch.compiler._cache import CacheArtifact, CacheArtifactFactory, CacheArtifactManager
except ImportError:  # a torch without MegaCache: nothing to carry
    CacheArtifact = None  # type: ignore[assignment,misc]

_types: dict[str, Any] = {}


def register(kind: str, populate: Callable[[str, bytes], None]) -> None:
    """Make ``save_cache_artifacts()`` carry entries of ``kind`` (recorded by :func:`record`)
    and ``load_cache_artifacts()`` hand each to ``populate(key, content)``."""
    if CacheArtifact is None or kind in _types:
        return

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
        CacheArtifactManager.record_artifact(kind, key, content)

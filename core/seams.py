"""The core's side of the contract's seams (``sdk/_seams.py``): installs, when imported, what the
contract's own modules need of the core, so that they need not import it.

``import sdk`` imports this module (light: the adapter and the registry load at first use).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from typing import Any

from sdk import _seams

from .adapters import mega_cache


def _private_torch() -> Any:
    from .adapters import torch_private

    return torch_private


def _plugins() -> Any:
    from .registry import registry

    return registry()


@contextlib.contextmanager
def _plugins_from(entry_points: list[EntryPoint]) -> Iterator[Any]:
    from .registry import Registry, registry, set_registry

    previous = set_registry(Registry(entry_points))
    try:
        yield registry()
    finally:
        set_registry(previous)


_seams.install(
    private_torch=_private_torch,
    plugins=_plugins,
    plugins_from=_plugins_from,
    record_cache_artifact=mega_cache.record,
)

"""What the core's passes read beside the graph (:class:`Needs`): in a module of its own, which
the package and each pass module import (the passes take it; the package makes it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Needs:
    """What the core's passes read beside the graph: the call nodes the plugin's
    ``sdk_extern`` answered for (by name), and the plugin's hook callers."""

    taken: frozenset[str]
    hooks: Any

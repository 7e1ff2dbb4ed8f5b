"""The marker of the SDK's hook specifications and the entry-point group plugins are found
under: what the modules of the hook specification share (:mod:`sdk.hookspecs` re-exports
them)."""

from __future__ import annotations

import pluggy

PROJECT = "sdk"
hookspec = pluggy.HookspecMarker(PROJECT)
#: The entry-point group a plugin's wheel names the module of its hooks under
#: (``[project.entry-points."sdk.plugins"]`` in its pyproject.toml)
ENTRY_POINT_GROUP = "sdk.plugins"

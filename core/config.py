"""Every environment variable the SDK reads, read in this one place."""

from __future__ import annotations

import os
from dataclasses import dataclass


def _names(value: str | None) -> frozenset[str] | None:
    if value is None or not value.strip():
        return None
    return frozenset(part.strip() for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class Env:
    #: SDK_PLUGINS_ALLOW: comma-separated plugin names; when set, only these are imported.
    plugins_allow: frozenset[str] | None
    #: SDK_PLUGINS_DENY: comma-separated plugin names that are never imported.
    plugins_deny: frozenset[str]
    #: SDK_DEBUG=1: run the IR checker after every stage.
    debug: bool
    #: SDK_CACHE_DIR: root of the per-user cache (default ~/.cache/torch-backend-sdk).
    cache_dir: str | None
    #: XDG_CACHE_HOME: where per-user caches live when SDK_CACHE_DIR is unset.
    xdg_cache_home: str | None
    #: SDK_GRAPH_CACHE=0: keep compiled programs out of the whole-graph cache (default on).
    graph_cache: bool = True


def env() -> Env:
    """Read the environment now (cheap; callers read it when they need it)."""
    e = os.environ
    return Env(
        plugins_allow=_names(e.get("SDK_PLUGINS_ALLOW")),
        plugins_deny=_names(e.get("SDK_PLUGINS_DENY")) or frozenset(),
        debug=e.get("SDK_DEBUG", "") not in ("", "0", "false", "False"),
        cache_dir=e.get("SDK_CACHE_DIR") or None,
        xdg_cache_home=e.get("XDG_CACHE_HOME") or None,
        graph_cache=e.get("SDK_GRAPH_CACHE", "1") not in ("0", "false", "False", "off"),
    )

"""Calling the compile's codegen plugin: one caller per hook, its errors named.

:class:`PluginHooks` is what a :class:`~core.pipeline.Session` holds as ``hooks``: each
attribute is the pluggy caller of that hook for the session's plugin only, which runs the
hooks that build what runs (:data:`REAL_MODE_HOOKS`) outside the compile's fake mode and
raises :class:`HookFailed` (the plugin and the hook in its message) when a hook raises.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sdk.errors import SDKError, describe

from .adapters import torch_private as tp
from .registry import Registry


class HookFailed(RuntimeError):
    """A compile hook of the codegen plugin raised: the compile falls back (chain, ATen),
    with the plugin and the hook in the reason. The plugin's error is the ``__cause__``."""


#: The hooks that build what runs (callables, compiled artifacts): the core calls them
#: outside the compile's fake mode, so that a tensor they make (a constant, a traced or
#: exported example) is a real one. The other compile hooks run inside it (they read
#: ``node.meta["val"]``, fake tensors, and make nothing). ``sdk/hookspecs.py`` says which.
REAL_MODE_HOOKS = frozenset(
    {"sdk_extern", "sdk_compile_kernels", "sdk_compile_subgraph", "sdk_load_subgraph"}
)


class PluginHooks:
    """Hook callers that reach the compile's codegen plugin only."""

    def __init__(self, reg: Registry, plugin: str) -> None:
        self._reg, self._plugin, self._cache = reg, plugin, {}

    def __getattr__(self, hook: str) -> Callable:
        caller = self._cache.get(hook)
        if caller is None:
            caller = self._reg.caller(hook, [self._plugin])
            caller = self._cache[hook] = self._naming(hook, caller)
        return caller

    def implements(self, hook: str) -> bool:
        """Whether the plugin has a hookimpl of ``hook`` (so the core can skip preparing
        what only that hook would read)."""
        return bool(self._reg.caller(hook, [self._plugin]).get_hookimpls())

    def _naming(self, hook: str, caller: Callable) -> Callable:
        """``caller``, whose errors say which plugin and hook raised (an SDKError is the
        plugin saying so on purpose, and goes through as it is)."""

        real = hook in REAL_MODE_HOOKS

        def call(**kwargs: Any) -> Any:
            try:
                if real:
                    with tp.real_mode():
                        return caller(**kwargs)
                return caller(**kwargs)
            except SDKError:
                raise
            except Exception as exc:  # noqa: BLE001 - named, then handled as before
                raise HookFailed(f"sdk:{self._plugin} {hook} raised {describe(exc)}") from exc

        return call

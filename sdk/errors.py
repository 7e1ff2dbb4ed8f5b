"""Errors the SDK raises. Each message names the cause and the fix."""

from __future__ import annotations


class SDKError(RuntimeError):
    """Base class of every error the SDK raises on purpose."""


class PluginUnavailableError(SDKError):
    """A plugin was asked for by name but cannot be used here."""


class UnknownPluginError(SDKError, KeyError):
    """No plugin of that name was discovered."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class OptionError(SDKError, ValueError):
    """An unknown option, mode or option value."""


class LoweringError(SDKError):
    """An op could not be lowered and the fallback was switched off."""


class PluginHookError(SDKError):
    """A plugin's hook raised, and strict mode (``fallback=False`` or debug) is on."""


class CacheDirWarning(UserWarning):
    """The cache directory was refused (not private, not a directory, ...); the process
    caches in a private temporary directory instead. Says which, why and the fix."""


class PluginHookWarning(UserWarning):
    """A plugin's hook raised; the SDK went on without it (once per plugin and hook)."""

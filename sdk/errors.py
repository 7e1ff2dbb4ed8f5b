"""Errors the SDK raises. Each message names the cause and the fix."""

from __future__ import annotations

from collections.abc import Callable


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
    caches in a private temporary directory instead. Says which, why and the fix. Also: an
    entry of torch's AOTAutograd cache was corrupt and removed (a miss, stored again)."""


class PluginHookWarning(UserWarning):
    """A plugin's hook raised; the SDK went on without it (once per plugin and hook)."""


class PluginFallbackWarning(UserWarning):
    """A plugin failed to compile a partition it had claimed (its ``sdk_compile_subgraph``
    raised, or it refused a shape), or a kernel-level plugin failed to compile a whole graph
    (a compile hook raised or answered wrongly, its kernels did not build): that partition or
    graph runs in the next plugin of the chain, or in ATen. Right, but not what the plugin
    was asked for; the message names the plugin, the reason, the partition's or graph's ops
    and the fix (bring a plugin up with ``fallback=False`` and ``debug=True``). Once per
    plugin and reason; ``fallback=False`` raises :class:`SDKError` instead
    (:class:`LoweringError` for a partition), ``debug=True`` the plugin's own error."""


class SDKDeprecationWarning(DeprecationWarning):
    """A plugin or a caller uses a name or a declaration the SDK retired (``sdk.Verdict``, a
    plugin of hook API 5 declaring ``Capability.CHANNELS_LAST``); it still works, and the
    message names the replacement. Shown where ``DeprecationWarning`` is (tests, ``-W
    default``)."""


def describe(exc: BaseException, *, one_line: bool = False) -> str:
    """``"TypeName: message"`` of ``exc`` (``"TypeName"`` when the message is empty), safe
    for any exception a plugin raises: where its ``__str__`` raises or returns no string,
    its ``repr``, else ``"<unprintable TypeName>"``. Every message the SDK makes of a
    plugin's exception (fallback reasons, hook faults, warnings, ``sdk.explain``) is made
    by this, so an exception that cannot print itself is still that plugin's fault, not a
    failure of the user's compile. ``one_line``: the whole message on one line (every line
    kept, runs of whitespace collapsed to one space: a vendor runtime's first line is often
    only where it failed, ``Check 'false' failed at src/x.cpp:151:``, and the why follows),
    at most :data:`ONE_LINE_LIMIT` characters (longer ends in ``...``), and so the
    exception it was raised from, if any."""
    head = _head(exc, one_line)
    # one_line: also the exception it was raised from (``raise ... from``), on one line,
    # one level deep; a message that opens with advice (torch.onnx's ConversionError) keeps
    # its cause
    cause = getattr(exc, "__cause__", None) if one_line else None
    if isinstance(cause, BaseException) and cause is not exc:
        why = _head(cause, one_line=True)
        if why not in head:  # (a wrapper that already quotes its cause: said once)
            return f"{head} (from {why})"
    return head


#: the most characters :func:`describe` keeps of one exception's message on one line
ONE_LINE_LIMIT = 1000


def _one_line(text: str) -> str:
    """``text`` on one line: whitespace collapsed, at most :data:`ONE_LINE_LIMIT` characters."""
    text = " ".join(text.split())
    if len(text) > ONE_LINE_LIMIT:
        text = text[: ONE_LINE_LIMIT - 3].rstrip() + "..."
    return text


def _head(exc: BaseException, one_line: bool) -> str:
    """``describe`` of ``exc`` alone, without its cause."""
    name = _type_name(exc)
    text = _text(exc, str)
    if text is None:
        text = _text(exc, repr)
        text = f"<unprintable {name}>" if text is None else f"<unprintable {name}: {text}>"
    text = text.strip()
    if one_line:
        text = _one_line(text)
    return f"{name}: {text}" if text else name


def _type_name(exc: BaseException) -> str:
    try:
        name = type(exc).__name__
    except Exception:  # noqa: BLE001 - a metaclass's __name__ that raises
        return "<exception>"
    return name if isinstance(name, str) else "<exception>"


def _text(exc: BaseException, fn: Callable[[object], str]) -> str | None:
    try:
        text = fn(exc)
    except Exception:  # noqa: BLE001 - its __str__/__repr__ raised: see describe
        return None
    return str.__str__(text) if isinstance(text, str) else None

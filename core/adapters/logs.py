"""Adapter over torch's log registry (private module ``torch._logging._internal``): makes
``sdk`` a log name of ``TORCH_LOGS`` (and of ``torch._logging.set_logs(modules=...)``), for
the loggers under ``sdk`` (``sdk.core.pipeline``, ``sdk.core.program``, a plugin's).

``TORCH_LOGS=sdk`` shows their INFO lines (one per compiled graph), ``+sdk`` their DEBUG
lines too (each stage of a compile, timed).

torch parses ``TORCH_LOGS`` once, at the end of ``import torch``, before ``import sdk`` could
register the name; a name it does not know it takes for a module, which it imports with every
subpackage (Dynamo and triton with them) from inside ``import torch``. So importing this
module (``import sdk`` does it before anything that imports torch) runs :func:`register`:
where the variable names ``sdk`` and torch is not imported yet, it imports torch with ``sdk``
left out of the variable, then registers the name and has torch parse the variable again.
When torch was imported first, its parse of the variable imported the SDK, and so this
module: the logger it set up is the one registered, ``sdk``, and nothing is parsed again.
Where the variable does not name ``sdk``, ``import sdk`` imports no torch: the name is
registered once torch is imported (:mod:`.imports`), for ``torch._logging.set_logs``.
"""

from __future__ import annotations

import sys

from sdk import _config as config

from .imports import when_imported

#: the name ``TORCH_LOGS`` takes, and the logger it sets (the SDK's loggers are below it)
NAME = "sdk"
VARIABLE = "TORCH_LOGS"


def register() -> None:
    """Register :data:`NAME` with torch's logs; if ``TORCH_LOGS`` names it, apply it now."""
    settings = config.variable(VARIABLE)
    named = settings is not None and _names_sdk(settings)
    if not named and "torch" not in sys.modules:
        when_imported("torch", lambda _torch: register())  # (nothing to parse: named is False)
        return
    if named and "torch" not in sys.modules:
        rest = ",".join(t for t in settings.split(",") if not _is_sdk(t))
        with config.overridden(**{VARIABLE: rest or None}):
            import torch  # noqa: F401 - parses the rest of the variable
    try:
        from torch._logging import _internal
    except ImportError:  # pragma: no cover - every supported torch has it
        return
    register_log = getattr(_internal, "register_log", None)
    if register_log is None:  # pragma: no cover - a torch without the registry
        return  # ("sdk" still works there as a module name, as above)
    register_log(NAME, NAME)
    if not named or _initializing("torch"):
        return
    parse = getattr(_internal, "_parse_log_settings", None)
    if hasattr(parse, "cache_clear"):
        parse.cache_clear()  # (it remembers what it made of each string)
    _internal._init_logs()


def _is_sdk(token: str) -> bool:
    return token.strip().lstrip("+-") == NAME


def _names_sdk(settings: str) -> bool:
    return any(_is_sdk(t) for t in settings.split(","))


def _initializing(module: str) -> bool:
    """Whether ``module`` is being imported now (its ``__init__`` has not returned)."""
    spec = getattr(sys.modules.get(module), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


register()

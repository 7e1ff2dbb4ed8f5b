"""Adapter over Dynamo's registry of backend names (private module
``torch._dynamo.backends.registry``): every ``"sdk:<name>"`` is a name Dynamo knows.

``torch.compile(backend="sdk:cpu_cpp")`` finds the SDK through the ``torch_dynamo_backends``
entry points its wheel declares. A name no wheel declares, such as a typo
(``"sdk:cpu_cp"``) or a plugin that is not installed, made Dynamo raise its own
``InvalidBackend``, which names neither the installed plugins nor the fix. Once ``import sdk``
has run (the registry's module is told when it is imported: :mod:`.imports`), Dynamo's lookup
of such a name loads ``sdk.backend(name)``, as the declared names do: its error names the
installed plugins and the nearest name; a plugin installed without the entry point (its
wheel declares only ``sdk.plugins``) is found. A process that never imported the SDK still
gets Dynamo's error: nothing of the SDK runs there before it.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint
from types import ModuleType
from typing import Any

from .imports import when_imported

PREFIX = "sdk:"
REGISTRY = "torch._dynamo.backends.registry"
#: the entry-point group Dynamo reads its backend names from
GROUP = "torch_dynamo_backends"


class _WithSDKNames(dict):  # type: ignore[type-arg]
    """Dynamo's ``_BACKENDS`` (name -> entry point, or None for a backend registered in
    code), which holds every ``sdk:<name>`` as well: an undeclared one as an entry point of
    ``sdk.backends``, as a wheel declares them."""

    def __init__(self, names: dict[str, Any], discover: Any) -> None:
        super().__init__(names)
        self._discover = discover  # Dynamo's discovery of the names wheels declare

    def __contains__(self, key: object) -> bool:
        if dict.__contains__(self, key):
            return True
        if not (isinstance(key, str) and key.startswith(PREFIX)):
            return False
        self._discover()  # (the declared names first: those stay as their wheel has them)
        return True

    def __missing__(self, key: str) -> Any:
        if not key.startswith(PREFIX):
            raise KeyError(key)
        attr = key[len(PREFIX) :]
        if attr.isidentifier():
            # (loaded as a declared name is: sdk.backends keeps concurrent lookups apart)
            return EntryPoint(key, f"sdk.backends:{attr}", GROUP)
        return _Unknown(attr)


class _Unknown:
    """What Dynamo loads for an ``sdk:`` name that is no identifier (no plugin's name):
    ``sdk.backend(name)``, which raises the SDK's error."""

    def __init__(self, name: str) -> None:
        self.name = name

    def load(self) -> Any:
        from sdk import backend

        return backend(self.name)


def _install(registry: ModuleType) -> None:
    names = getattr(registry, "_BACKENDS", None)
    discover = getattr(registry, "_lazy_import", None)
    if type(names) is not dict or discover is None:  # (a torch whose registry differs)
        return
    registry._BACKENDS = _WithSDKNames(names, discover)


def install() -> None:
    """Make every ``sdk:<name>`` a backend name of Dynamo's, when its registry is imported."""
    when_imported(REGISTRY, _install)

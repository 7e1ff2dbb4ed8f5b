"""Entry-point targets for ``torch_dynamo_backends``.

``"sdk:<name>" = "sdk.backends:<name>"`` in a wheel's pyproject makes
``torch.compile(backend="sdk:<name>")`` find the SDK plugin ``<name>``:
any attribute of this module is the backend of the plugin of that name.

Dynamo's lookup of a backend by name is not thread-safe: it checks that the name is not
registered yet, loads the entry point (here: :func:`__getattr__`), then registers what it
loaded, asserting that the name is still new. Threads whose first ``torch.compile`` names
the same ``sdk:<name>`` at once all pass the check and load, and every registration after
the first failed with ``AssertionError: duplicate name``. So the loads Dynamo makes take
turns here: each waits until the lookup before it has registered the backend, then drops
that registration (its own registers the same backend object again), so every lookup
registers a new name. Dynamo never drops the GIL between its check and its read of the
registration, so a lookup that found the name registered reads it, and one that did not
comes here.
"""

from __future__ import annotations

import sys
import threading
import time
from importlib.metadata import EntryPoint
from typing import Any

from sdk._seams import private_torch

#: how long a load waits for the lookup before it to register the backend (a lookup
#: registers right after its load returns; this bounds the wait if it never does)
_HANDOVER_TIMEOUT_S = 10.0

_lock = threading.Lock()
#: one backend object per plugin name, whichever lookup loads it
_backends: dict[str, Any] = {}
#: the names whose last load was for a Dynamo lookup that may not have registered it yet
_in_flight: set[str] = set()


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    entry_point = _loading_entry_point()
    with _lock:
        fn = _backends.get(name)
        if fn is None:
            from sdk import backend

            fn = _backends[name] = backend(name)
        if entry_point is None:  # an attribute read, not a Dynamo lookup
            return fn
        tp = private_torch()  # (Dynamo's registry of backends: private torch)
        key = f"sdk:{name}"
        if name in _in_flight:
            deadline = time.monotonic() + _HANDOVER_TIMEOUT_S
            while not tp.dynamo_has_backend(key) and time.monotonic() < deadline:
                time.sleep(0.001)
        if tp.dynamo_has_backend(key):
            tp.dynamo_forget_backend(key, entry_point)
        _in_flight.add(name)
        return fn


def _loading_entry_point() -> EntryPoint | None:
    """The entry point whose ``load()`` reads the attribute (Dynamo's lookup of
    ``sdk:<name>``), or None for any other read."""
    frame = sys._getframe(2)  # (0: here, 1: __getattr__; getattr and reduce are C)
    if frame.f_code is EntryPoint.load.__code__:
        entry_point = frame.f_locals.get("self")
        if isinstance(entry_point, EntryPoint):
            return entry_point
    return None

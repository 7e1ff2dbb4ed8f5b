"""Run a function when a module is imported (torch's, which ``import sdk`` does not import).

``import sdk`` stays light: it imports neither Dynamo nor, where nothing else has, torch. What
the SDK must tell such a module before anyone uses it (Dynamo's backend names, torch's log
names and cache-artifact types) it tells it here: at once where the module is imported, else
right after its import, before the ``import`` statement that asked for it returns.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

_lock = threading.Lock()
#: module name -> what to run once it is imported, in order
_waiting: dict[str, list[Callable[[ModuleType], None]]] = {}


def when_imported(name: str, fn: Callable[[ModuleType], None]) -> None:
    """``fn(module)`` once the module ``name`` is imported: now, where it is (its import
    finished), else when its import ends (after the module's own code ran)."""
    module = sys.modules.get(name)
    if module is not None and not _initializing(module):
        fn(module)
        return
    with _lock:
        _waiting.setdefault(name, []).append(fn)
        if _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


def _initializing(module: ModuleType) -> bool:
    """Whether ``module`` is being imported now (its code has not finished)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: for a module :func:`when_imported` waits for, it takes the spec
    the other finders give and has its loader run the waiting functions after the module's
    code (the loader object is the module's own: file loaders are made per module)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _waiting:
            return None
        spec = _spec_from_the_others(self, fullname, path, target)
        loader = getattr(spec, "loader", None)
        if not isinstance(loader, _FILE_LOADERS):
            return spec  # (a loader that may be shared: the functions wait for the next one)
        run_code = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            try:
                run_code(module)
            finally:
                del loader.exec_module  # (the class's again)
            with _lock:
                fns = _waiting.pop(fullname, [])
                if not _waiting and _FINDER in sys.meta_path:
                    sys.meta_path.remove(_FINDER)
            for fn in fns:
                fn(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _spec_from_the_others(
    me: Any, fullname: str, path: Sequence[str] | None, target: ModuleType | None
) -> importlib.machinery.ModuleSpec | None:
    for finder in list(sys.meta_path):
        find = getattr(finder, "find_spec", None)
        if finder is me or find is None:
            continue
        spec = find(fullname, path, target)
        if spec is not None:
            return spec
    return None


#: the loaders made for one module each (a file's), whose ``exec_module`` may be replaced
_FILE_LOADERS = (importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader)
_FINDER = _AfterImport()

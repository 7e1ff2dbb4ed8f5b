"""What the contract's own modules need of the core, as interfaces the core provides (issue 48).

The contract package (``sdk/``) is what the core depends on, not the other way round: apart
from its entries (``sdk.backend``, ``sdk.explain``, the command line), no module of it
imports the core. Where one needs what only the core has, it calls a function here, and the
core installs the implementation when ``import sdk`` imports its side (``core/seams.py``,
imported by ``sdk/__init__.py``; importing any ``sdk.x`` runs that first):

* :func:`private_torch`: the private torch APIs the contract uses (:class:`PrivateTorch`).
  Only ``core/adapters/`` may touch private torch (CONTRIBUTING.md), so the core's adapter
  is what answers: storages and steps for ``sdk.runtime``, a ``torch.SymInt``'s expression
  for ``sdk.ir``, Dynamo's backend registry for ``sdk.backends``, torch's compile caches
  for ``sdk.cache.cold_compiles``, pytrees and the OpInfo database for ``sdk.conformance``,
  torch's compile worker pool for ``sdk.workers``;
* :func:`plugins` and :func:`plugins_from`: the installed plugins (:class:`Plugins`, the
  core's registry), for the conformance suite;
* :func:`record_cache_artifact`: an entry for torch's next ``save_cache_artifacts()`` (the
  core's MegaCache adapter), for the libraries ``sdk.toolchain`` builds.

Not public API; plugins import ``sdk`` names only.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from importlib.metadata import EntryPoint
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from sdk.plugin import PluginInfo, PluginKind


class PrivateTorch(Protocol):
    """The private torch APIs the contract's modules use (the core's
    ``core/adapters/torch_private.py`` is one)."""

    #: torch's type of an ATen op overload (``sdk.ir.OpOverload``)
    OpOverload: type

    # -- sdk.runtime: steps and storages, for wrapper plugins
    def step_token(self) -> Hashable: ...
    def storage_weakref(self, storage: torch.UntypedStorage) -> Any: ...
    def set_access_error(self, t: torch.Tensor, message: str) -> bool: ...
    def storage_new_alias(self) -> Callable[[int, torch.device, int], torch.UntypedStorage]: ...
    def storage_impl(self, storage: torch.UntypedStorage) -> int: ...
    def use_counters(
        self,
    ) -> tuple[Callable[[torch.Tensor], int], Callable[[int], int]]: ...
    def cuda_tensor_constructor(
        self,
    ) -> Callable[[dict[str, Any], torch.UntypedStorage], torch.Tensor] | None: ...
    def data_ptrs_equal(self, tensors: list[Any], ptrs: list[int], at: list[int]) -> bool: ...

    # -- sdk.ir.index: a torch.SymInt (only while the core traces)
    def sym_size(self, x: Any) -> Any: ...
    def size_hint_of(self, x: Any) -> int | None: ...

    # -- sdk.cache.cold_compiles: torch's own compile caches off
    def configure_for_benchmark(self) -> None: ...

    # -- sdk.backends: Dynamo's registry of backends by name
    def dynamo_has_backend(self, name: str) -> bool: ...
    def dynamo_forget_backend(self, name: str, entry_point: Any) -> None: ...

    # -- sdk.conformance: pytrees, and torch's OpInfo database
    def tree_flatten(self, tree: Any) -> tuple[list[Any], Any]: ...
    def tree_unflatten(self, leaves: list[Any], spec: Any) -> Any: ...
    def opinfo_db(self) -> list[Any]: ...

    # -- sdk.workers: torch's compile worker pool (Inductor's)
    def compile_worker_pool(self, workers: int) -> Any: ...


class PluginRecord(Protocol):
    """One discovered plugin."""

    name: str
    #: the distribution that ships it (``torch-backend-sdk`` for the built-in plugins)
    distribution: str
    info: PluginInfo | None
    #: the module that holds its hooks
    plugin: ModuleType


class Plugins(Protocol):
    """The installed plugins (the core's registry)."""

    def require(self, name: str, kinds: tuple[PluginKind, ...]) -> PluginRecord:
        """Plugin ``name`` if it is usable and of one of ``kinds``; else an ``sdk.SDKError``
        naming the cause and the fix."""
        ...

    def record(self, name: str) -> PluginRecord: ...

    def usable_names(self, kinds: tuple[PluginKind, ...]) -> list[str]: ...


_installed: dict[str, Callable[..., Any]] = {}
_private: list[PrivateTorch] = []  # what private_torch answered, once asked


def install(
    *,
    private_torch: Callable[[], PrivateTorch],
    plugins: Callable[[], Plugins],
    plugins_from: Callable[[list[EntryPoint]], AbstractContextManager[Plugins]],
    record_cache_artifact: Callable[[str, str, bytes], None],
) -> None:
    """The core's implementations (``core/seams.py`` calls this when imported)."""
    _private.clear()
    _installed.update(
        private_torch=private_torch,
        plugins=plugins,
        plugins_from=plugins_from,
        record_cache_artifact=record_cache_artifact,
    )


def _get(name: str) -> Callable[..., Any]:
    try:
        return _installed[name]
    except KeyError:
        raise RuntimeError(
            f"sdk._seams.{name}: the core has not installed it (`import sdk` does, through "
            "core/seams.py); is the SDK installed whole (pip install torch-backend-sdk)?"
        ) from None


def private_torch() -> PrivateTorch:
    """The private torch APIs the contract uses (imported at first use: they pull in sympy;
    kept after: a CUDA-graph replay asks for them a few hundred times)."""
    if not _private:
        _private.append(_get("private_torch")())
    return _private[0]


def plugins() -> Plugins:
    """The installed plugins this process uses now."""
    return _get("plugins")()


def plugins_from(entry_points: list[EntryPoint]) -> AbstractContextManager[Plugins]:
    """For the block, process-wide: the plugins of ``entry_points`` (``sdk.plugins`` entry
    points) instead of the installed ones."""
    return _get("plugins_from")(entry_points)


def record_cache_artifact(kind: str, key: str, content: bytes) -> None:
    """Record an entry of the SDK's artifact type ``kind`` for torch's next
    ``save_cache_artifacts()``."""
    _get("record_cache_artifact")(kind, key, content)

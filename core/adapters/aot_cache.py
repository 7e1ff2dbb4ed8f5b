"""Adapter over torch's AOTAutograd cache and MegaCache (private torch APIs, like
:mod:`core.adapters.torch_private`).

Inductor's warm processes skip AOTAutograd (the joint trace, its metadata, the min-cut
partition): ``AOTAutogradCache`` (``torch/_functorch/_aot_autograd/autograd_cache.py``)
stores what it made, with the compiled forward and backward, and a later process rebuilds
AOTAutograd's runtime wrappers from it. The cache is consulted only for a compiler wrapped
in ``SerializableAOTDispatchCompiler`` that returns an ``OutputCode``; a compiler other than
Inductor is stored in the bundled mode (``functorch.config.bundled_autograd_cache``), where
the entry pickles the ``OutputCode`` itself. :class:`SDKOutputCode` is the SDK's: it pickles
a plain recipe (see :mod:`core.warm`), never the live program.

AOTAutograd's key does not include the compiler, so the backend's identity goes into
``torch.compiler.config.cache_key_tag`` while the compile runs (:func:`caching`). The entry
is written by torch, with pickle, under ``$TORCHINDUCTOR_CACHE_DIR/aotautograd``
(:func:`entry_dir`); torch reads it with pickle too, so the SDK uses the cache only where
that directory is private (:mod:`core.warm` checks).

The backward is compiled with the forward (``force_non_lazy_backward_lowering``) while the
cache is on: torch saves the entry when both are compiled, and only a save inside the
compile sees the configuration above.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

_UNSUPPORTED: str | None = None
try:
    import torch._functorch.config as _functorch_config
    from torch._functorch._aot_autograd.autograd_cache import (
        AOTAutogradCache,
        BypassAOTAutogradCache,
    )
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
    from torch._inductor.output_code import OutputCode
except ImportError as exc:  # a torch without these: no AOTAutograd cache for the SDK
    _UNSUPPORTED = f"this torch has no AOTAutograd cache for other compilers ({exc})"
    OutputCode = object  # type: ignore[assignment,misc]
    BypassAOTAutogradCache = RuntimeError  # type: ignore[assignment,misc]
else:
    for _name in ("bundled_autograd_cache", "force_non_lazy_backward_lowering"):
        if not hasattr(_functorch_config, _name):
            _UNSUPPORTED = f"this torch's functorch.config has no {_name}"


def unsupported() -> str | None:
    """Why this torch cannot cache the SDK's AOTAutograd results, or None."""
    if _UNSUPPORTED:
        return _UNSUPPORTED
    if torch.compiler.config.force_disable_caches:
        return "torch.compiler.config.force_disable_caches is set"
    if not _functorch_config.enable_autograd_cache:
        return "functorch.config.enable_autograd_cache is off (TORCHINDUCTOR_AUTOGRAD_CACHE=0)"
    import torch._inductor.config as inductor_config

    if not inductor_config.fx_graph_cache:
        # AOTAutogradCache.check_cacheable bypasses every graph without it
        return "torch._inductor.config.fx_graph_cache is off (TORCHINDUCTOR_FX_GRAPH_CACHE=0)"
    return None


def entry_dir() -> str:
    """Where torch writes AOTAutograd cache entries (created if missing)."""
    return AOTAutogradCache._get_tmp_dir()


class Uncacheable(BypassAOTAutogradCache):  # type: ignore[misc,valid-type]
    """Raised while an entry is saved: this result is not stored (torch logs it at INFO
    level and goes on)."""


@contextlib.contextmanager
def caching(tag: str) -> Iterator[None]:
    """Within the block, AOTAutograd looks up and saves results of serialisable compilers
    (:func:`serializable`), under keys that include ``tag``."""
    with (
        _functorch_config.patch(
            bundled_autograd_cache=True,
            force_non_lazy_backward_lowering=True,
        ),
        torch.compiler.config.patch(cache_key_tag=tag),
    ):
        yield


def serializable(compile_fn: Callable[..., SDKOutputCode]) -> Any:
    """``compile_fn`` (ATen graph, example inputs -> :class:`SDKOutputCode`) as a compiler
    AOTAutograd caches."""
    return SerializableAOTDispatchCompiler(SDKOutputCode, compile_fn)


class SDKOutputCode(OutputCode):  # type: ignore[misc,valid-type]
    """A compiled ATen graph as torch's AOTAutograd cache stores it.

    Live, it calls ``compiled``. Stored, it is ``freeze()``'s answer (plain data) and the
    module-level function ``restore``, which a later process calls on that data to get
    the compiled callable again (``post_compile``). ``freeze`` raises :class:`Uncacheable`
    for a result that must not be stored.
    """

    def __init__(
        self,
        compiled: Callable[..., Any],
        freeze: Callable[[], Any],
        restore: Callable[[Any], Callable[..., Any]],
    ) -> None:
        self._run: Callable[[list[Any]], Any] | None = _boxed(compiled)
        self._freeze: Callable[[], Any] | None = freeze
        self._restore = restore
        self._state: Any = None
        # an instance attribute: the wrappers torch puts around a backward copy __dict__
        self._boxed_call = True

    def __call__(self, inputs: list[Any]) -> Any:
        return self._run(inputs)  # type: ignore[misc]  (None only while stored)

    def prepare_for_serialization(self) -> None:
        # called on a shallow copy (BundledOutputCodeLoadable.pre_save): the live object
        # keeps running
        if self._freeze is None:
            raise Uncacheable("the SDK program has no recipe")
        self._state = self._freeze()
        self._run = None
        self._freeze = None

    def post_compile(self, example_inputs: Any, constants: Any, graph_kwargs: Any) -> None:
        if self._run is None:
            self._run = _boxed(self._restore(self._state))

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass


def _boxed(fn: Callable[..., Any]) -> Callable[[list[Any]], Any]:
    """``fn`` taking its inputs as one list (AOTAutograd's boxed convention)."""
    if getattr(fn, "_boxed_call", False):
        return fn
    return lambda inputs: fn(*inputs)

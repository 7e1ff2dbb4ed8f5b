"""Run-time helpers for wrapper plugins: steps, and outputs handed out over memory the
wrapper keeps (CUDA graphs replay into the same memory every time).

* :func:`step_token` changes when a new step may begin: at each call of a torch.compile'd
  function and at ``torch.compiler.cudagraph_mark_step_begin()``; a backward does not change
  it. What to do with an unchanged token, or a forward whose backward has not run yet, is
  the wrapper's policy.
* :func:`handout` gives the caller tensors over the wrapper's memory with storage objects of
  their own, so that :func:`revoke` can make *those* raise on access, with a message that
  says why and what to do, once the wrapper is about to overwrite the memory, while the
  wrapper's own tensors stay usable.
* :class:`StorageRef` tells whether any tensor still uses a handed-out storage (views
  included).
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from sdk.core.adapters import torch_private as _tp

__all__ = ["StorageRef", "handout", "revoke", "step_token"]


def step_token() -> Hashable:
    """A value that changes at each torch.compile'd call and each
    ``torch.compiler.cudagraph_mark_step_begin()``."""
    return _tp.step_token()


def mark_step_called(before: Hashable, now: Hashable) -> bool:
    """Did ``torch.compiler.cudagraph_mark_step_begin()`` run between the two tokens?"""
    return before is None or before[1] != now[1]  # type: ignore[index]


class StorageRef:
    """A weak reference to a tensor's storage: :attr:`alive` while any tensor uses it."""

    __slots__ = ("_ref",)

    def __init__(self, t: torch.Tensor) -> None:
        from torch.multiprocessing.reductions import StorageWeakRef

        self._ref = StorageWeakRef(t.untyped_storage())

    @property
    def alive(self) -> bool:
        return not self._ref.expired()


def handout(outputs: Sequence[Any]) -> tuple[tuple[Any, ...], list[StorageRef],
                                             list[weakref.ref]]:
    """The caller's copies of ``outputs``: same memory, sizes, strides and offsets, new
    storage objects (outputs that share a storage share the new one too). Non-tensors pass
    through. Also returns a :class:`StorageRef` per handed-out tensor and a weak reference
    to each, for :func:`revoke`.

    The new storages own none of the memory: the caller must keep ``outputs`` alive for as
    long as any of the returned references is :attr:`StorageRef.alive`."""
    storages: dict[int, torch.UntypedStorage] = {}
    out: list[Any] = []
    refs: list[StorageRef] = []
    tensors: list[weakref.ref] = []
    for o in outputs:
        if not isinstance(o, torch.Tensor):
            out.append(o)
            continue
        st = o.untyped_storage()
        key = st.data_ptr()
        alias = storages.get(key)
        if alias is None:
            alias = storages[key] = _tp.storage_alias(st, o.device)
        t = torch.empty(0, dtype=o.dtype, device=o.device)
        t.set_(alias, o.storage_offset(), o.size(), o.stride())
        out.append(t)
        tensors.append(weakref.ref(t))
    for o in out:
        if isinstance(o, torch.Tensor):
            refs.append(StorageRef(o))
    return tuple(out), refs, tensors


def revoke(tensors: Sequence[weakref.ref], message: str) -> int:
    """Make the still-living handed-out tensors (and every view of their storage) raise
    ``message`` on access. Returns how many it reached; 0 where torch cannot (CPU builds)."""
    n = 0
    for ref in tensors:
        t = ref()
        if t is not None and _tp.set_access_error(t, message):
            n += 1
    return n

"""Run-time helpers for wrapper plugins: steps, and outputs handed out over memory the
wrapper keeps (CUDA graphs replay into the same memory every time).

* :func:`step_token` changes when a new step may begin: at each call of a torch.compile'd
  function and at ``torch.compiler.cudagraph_mark_step_begin()``; a backward does not change
  it. What to do with an unchanged token, or a forward whose backward has not run yet, is
  the wrapper's policy.
* :class:`Outputs` hands the caller tensors over the wrapper's memory with storage objects
  of their own, again at each run: a tensor nobody holds any more is handed out again (no
  new objects), one still held can be :meth:`~Outputs.revoke`\\ d, so that reading it raises
  a message that says why and what to do, while the wrapper's own tensors stay usable.
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Any

import torch

from sdk._seams import PrivateTorch, private_torch


def _tp() -> PrivateTorch:
    """The private torch APIs of steps and storages (the core's adapter provides them; it is
    imported at first use: a wrapper plugin imports this module when it is discovered,
    `python -m sdk list` too, and the adapter pulls in sympy)."""
    return private_torch()


__all__ = ["Outputs", "mark_step_called", "step_token"]


def step_token() -> Hashable:
    """A value that changes at each torch.compile'd call and each
    ``torch.compiler.cudagraph_mark_step_begin()``."""
    return _tp().step_token()


def mark_step_called(before: Hashable, now: Hashable) -> bool:
    """Did ``torch.compiler.cudagraph_mark_step_begin()`` run between the two tokens?"""
    return before is None or before[1] != now[1]  # type: ignore[index]


def _alias(o: torch.Tensor, storage: torch.UntypedStorage) -> torch.Tensor:
    t = torch.empty(0, dtype=o.dtype, device=o.device)
    t.set_(storage, o.storage_offset(), o.size(), o.stride())
    return t


class Outputs:
    """Hands out ``outputs`` (a wrapper's own tensors; non-tensors pass through) at each
    :meth:`hand_out`: tensors with the same memory, sizes, strides and offsets, and storage
    objects of their own, which own none of the memory: :attr:`outputs` keeps it, so keep
    this object while any handed-out tensor is :meth:`in_use`.

    An output with a storage of its own is handed out as the same tensor object each time,
    unless that tensor is still held (by a reference, a view, autograd) or was changed (its
    sizes, its storage, ``requires_grad`` where ``grad_ok`` is False): then as a new one.
    With ``reuse=False`` (outputs autograd may keep as ``.grad``), and for outputs that share
    a storage, every hand-out is new (outputs that share a storage share the new one).

    :meth:`revoke` makes the handed-out tensors raise ``message`` on access. torch revokes
    tensor objects, not memory: a view made from an output, or a tensor autograd made over
    its storage (a ``.grad`` it kept), is out of reach and reads whatever the memory holds
    next. :meth:`unreachable` says whether such a tensor holds memory now: the wrapper must
    not overwrite that memory while it does.
    """

    def __init__(
        self, outputs: Sequence[Any], message: str, *, reuse: bool = True, grad_ok: bool = False
    ) -> None:
        self.outputs = tuple(outputs)
        self._message = message
        self._grad_ok = grad_ok
        at = [i for i, o in enumerate(self.outputs) if isinstance(o, torch.Tensor)]
        shared = Counter(self.outputs[i].untyped_storage().data_ptr() for i in at)
        self._reused = [
            i for i in at if reuse and shared[self.outputs[i].untyped_storage().data_ptr()] == 1
        ]
        self._fresh_at = sorted(set(at) - set(self._reused))
        n = len(self.outputs)
        self._kept: list[torch.Tensor | None] = [None] * n  # the reused slots' tensors
        self._weak: list[Any] = [None] * n
        self._base: list[tuple[int, int, int] | None] = [None] * n  # counts when unheld
        # the last new hand-out: per storage, a reference to it and to the tensors over it
        self._fresh: list[tuple[torch.UntypedStorage, Any, list[weakref.ref]]] = []
        self._lingering: list[Any] = []  # storages held by tensors revoke could not reach

    # -- reused slots ---------------------------------------------------------

    def _counts(self, i: int) -> tuple[int, int, int]:
        t, tp = self._kept[i], _tp()
        return (
            sys.getrefcount(t),
            tp.tensor_use_count(t),  # type: ignore[arg-type]
            tp.storage_use_count(self._weak[i]),
        )

    def _held(self, i: int) -> bool:
        return self._kept[i] is not None and self._counts(i) != self._base[i]

    def _shared(self, i: int) -> bool:
        """Does a tensor other than the kept one use its storage (a view, say)?"""
        base = self._base[i][2]  # type: ignore[index]
        return self._kept[i] is not None and _tp().storage_use_count(self._weak[i]) > base

    def _intact(self, i: int) -> bool:
        t, o = self._kept[i], self.outputs[i]
        assert t is not None
        if t.data_ptr() != o.data_ptr() or t.shape != o.shape or t.stride() != o.stride():
            return False
        if t.requires_grad and not self._grad_ok:
            return False
        if t._backward_hooks is not None:
            t._backward_hooks = None
        return True

    def _revoke_slot(self, i: int) -> int:
        if self._shared(i):
            self._lingering.append(self._weak[i])
        n = _tp().set_access_error(self._kept[i], self._message)  # type: ignore[arg-type]
        self._kept[i] = None
        return int(n)

    # -- fresh hand-outs ------------------------------------------------------

    @staticmethod
    def _unreached(weak: Any, tensors: list[weakref.ref]) -> bool:
        """Does the storage have holders besides the tracked tensors and our alias?"""
        live = sum(1 for ref in tensors if ref() is not None)
        return _tp().storage_use_count(weak) > live + 1

    # -- the interface --------------------------------------------------------

    def hand_out(self) -> tuple[Any, ...]:
        out = list(self.outputs)
        for i in self._reused:
            if self._kept[i] is not None and self._held(i):
                self._revoke_slot(i)  # the memory changed under it
            if self._kept[i] is None or not self._intact(i):
                o = self.outputs[i]
                self._kept[i] = t = _alias(o, _tp().storage_alias(o.untyped_storage(), o.device))
                self._weak[i] = _tp().storage_weakref(t.untyped_storage())
                del t
                self._base[i] = self._counts(i)
            out[i] = self._kept[i]
        if self._fresh_at:
            self._revoke_fresh()  # what the last fresh hand-out still holds: none, normally
            groups: dict[int, tuple[torch.UntypedStorage, Any, list[weakref.ref]]] = {}
            tp = _tp()
            for i in self._fresh_at:
                o = self.outputs[i]
                st = o.untyped_storage()
                group = groups.get(st.data_ptr())
                if group is None:
                    alias = tp.storage_alias(st, o.device)
                    group = groups[st.data_ptr()] = (alias, tp.storage_weakref(alias), [])
                out[i] = t = _alias(o, group[0])
                group[2].append(weakref.ref(t))
            self._fresh = list(groups.values())
        return tuple(out)

    def in_use(self) -> bool:
        """Does anything still hold memory of the outputs (a handed-out tensor, a view,
        a tensor over its storage)?"""
        use_count = _tp().storage_use_count
        return (
            any(self._held(i) for i in self._reused)
            or any(use_count(weak) > 1 for _, weak, _ in self._fresh)
            or self.unreachable()
        )

    def unreachable(self) -> bool:
        """Is memory of the outputs held by a tensor :meth:`revoke` cannot reach (a view, a
        tensor over the storage that is not a handed-out one)?"""
        use_count = _tp().storage_use_count
        self._lingering = [w for w in self._lingering if use_count(w) > 0]
        return (
            bool(self._lingering)
            or any(self._shared(i) for i in self._reused)
            or any(self._unreached(weak, tensors) for _, weak, tensors in self._fresh)
        )

    def revoke(self) -> int:
        """Make the handed-out tensors still held raise the message on access; the next
        :meth:`hand_out` hands out new ones in their place. Memory that other tensors still
        hold stays :meth:`unreachable` until they are gone. Returns how many tensors it
        reached; 0 where torch cannot (CPU builds)."""
        n = 0
        for i in self._reused:
            if self._held(i):
                n += self._revoke_slot(i)
        return n + self._revoke_fresh()

    def _revoke_fresh(self) -> int:
        n, tp = 0, _tp()
        for _alias_storage, weak, tensors in self._fresh:
            for ref in tensors:
                t = ref()
                if t is not None:
                    n += tp.set_access_error(t, self._message)
                    del t
            if tp.storage_use_count(weak) > 1:  # more than our alias: out of reach
                self._lingering.append(weak)
        self._fresh = []
        return n

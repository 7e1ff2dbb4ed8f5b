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
from collections.abc import Hashable, Sequence
from typing import Any, NamedTuple

import torch

from sdk._seams import PrivateTorch, private_torch


def _tp() -> PrivateTorch:
    """The private torch APIs of steps and storages (the core's adapter provides them; it is
    imported at first use: a wrapper plugin imports this module when it is discovered,
    `python -m sdk list` too, and the adapter pulls in sympy)."""
    return private_torch()


__all__ = ["Outputs", "Scan", "data_ptrs_equal", "mark_step_called", "step_token"]


def step_token() -> Hashable:
    """A value that changes at each torch.compile'd call and each
    ``torch.compiler.cudagraph_mark_step_begin()``."""
    return _tp().step_token()


def mark_step_called(before: Hashable, now: Hashable) -> bool:
    """Did ``torch.compiler.cudagraph_mark_step_begin()`` run between the two tokens?"""
    return before is None or before[1] != now[1]  # type: ignore[index]


def data_ptrs_equal(tensors: list[Any], ptrs: list[int], at: list[int]) -> bool:
    """Is ``tensors[i].data_ptr() == ptrs[i]`` for every ``i`` in ``at`` (``ptrs`` indexed
    like ``tensors``)? One C++ call on CUDA builds of torch: a wrapper checks its
    in-place inputs at every replay."""
    return _tp().data_ptrs_equal(tensors, ptrs, at)


def _meta(o: torch.Tensor) -> dict[str, Any]:
    """What a tensor like ``o`` is rebuilt from over another storage."""
    return {
        "size": tuple(o.shape),
        "stride": o.stride(),
        "storage_offset": o.storage_offset(),
        "dtype": o.dtype,
    }


def _set_over(meta: dict[str, Any], storage: torch.UntypedStorage) -> torch.Tensor:
    """A tensor over ``storage`` with ``meta``'s layout, through ``set_`` (the constructor of
    one C++ call exists for CUDA tensors only)."""
    t = torch.empty(0, dtype=meta["dtype"], device=storage.device)
    return t.set_(storage, meta["storage_offset"], meta["size"], meta["stride"])


class Scan(NamedTuple):
    """What holds a hand-out's memory, at one look (:meth:`Outputs.scan`)."""

    #: the kept slots held, each as (slot, whether its storage has another holder)
    held: list[tuple[int, bool]]
    #: is memory held where revoking cannot reach (:meth:`Outputs.unreachable`)?
    unreachable: bool


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

    A wrapper calls these at every replay, over every output of a graph (a GPT-2 backward
    hands out over a hundred gradients): each check is one loop over flat lists, and a new
    tensor is one C++ call on CUDA.
    """

    def __init__(
        self, outputs: Sequence[Any], message: str, *, reuse: bool = True, grad_ok: bool = False
    ) -> None:
        self.outputs = tuple(outputs)
        self._message = message
        self._grad_ok = grad_ok
        tp = _tp()
        self._counters = tp.use_counters()
        self._new_storage = tp.storage_new_alias()
        by_storage: dict[int, list[int]] = {}
        for i, o in enumerate(self.outputs):
            if isinstance(o, torch.Tensor):
                by_storage.setdefault(o.untyped_storage().data_ptr(), []).append(i)
        fast = tp.cuda_tensor_constructor()

        def build(o: torch.Tensor) -> Any:
            return fast if fast is not None and o.device.type == "cuda" else _set_over

        # reused slots: outputs with a storage of their own, handed out as one kept tensor
        self._reused = [m[0] for m in by_storage.values() if reuse and len(m) == 1]
        slots = [self.outputs[i] for i in self._reused]
        self._layout = [(o.data_ptr(), o.shape, o.stride()) for o in slots]
        self._make = [(_meta(o), build(o)) for o in slots]
        n = len(self._reused)
        self._kept: list[torch.Tensor | None] = [None] * n
        self._impl = [0] * n  # each kept tensor's StorageImpl (it holds it)
        self._base: list[tuple[int, int, int]] = [(0, 0, 0)] * n  # its counts when unheld
        # fresh groups: per storage, (data_ptr, nbytes, device, builder, [(position, meta)])
        reused = set(self._reused)
        self._groups = []
        for ptr, members in by_storage.items():
            if members[0] in reused:
                continue
            o = self.outputs[members[0]]
            st = o.untyped_storage()
            metas = [(i, _meta(self.outputs[i])) for i in members]
            self._groups.append((ptr, st.nbytes(), o.device, build(o), metas))
        # the last new hand-out: per storage, our alias, its StorageImpl, the tensors over it
        self._fresh: list[tuple[torch.UntypedStorage, int, list[weakref.ref]]] = []
        self._lingering: list[Any] = []  # storages held by tensors revoke could not reach

    # -- reused slots ---------------------------------------------------------

    def _kept_new(self, j: int) -> torch.Tensor:
        """A new tensor for slot ``j``, over a storage of its own, and its counts unheld."""
        i = self._reused[j]
        o = self.outputs[i]
        meta, build = self._make[j]
        st = o.untyped_storage()
        t = build(meta, self._new_storage(st.data_ptr(), o.device, st.nbytes()))
        self._kept[j] = t
        self._impl[j] = _tp().storage_impl(t.untyped_storage())
        tensor_count, storage_count = self._counters
        # the kept list, ``t`` and the argument: as in the loops that compare with it
        self._base[j] = (sys.getrefcount(t), tensor_count(t), storage_count(self._impl[j]))
        return t

    def _revoke_slot(self, j: int, shared: bool) -> int:
        t = self._kept[j]
        assert t is not None
        if shared:  # a view or a sharer outlives the revoked tensor: watch the storage
            self._lingering.append(_tp().storage_weakref(t.untyped_storage()))
        n = _tp().set_access_error(t, self._message)
        self._kept[j] = None
        return int(n)

    def _held(self) -> list[tuple[int, bool]]:
        """The kept slots held since they were handed out (their counts moved: a reference,
        a view, autograd), each as ``(j, shared)``: shared, its storage has another holder
        (a view, a sharer), which outlives revoking the tensor."""
        tensor_count, storage_count = self._counters
        getrefcount, kept, impl, base = sys.getrefcount, self._kept, self._impl, self._base
        states = []
        for j in range(len(kept)):
            t = kept[j]
            if t is None:
                continue
            counts = (getrefcount(t), tensor_count(t), storage_count(impl[j]))
            b = base[j]
            if counts != b:
                states.append((j, counts[2] > b[2]))
        return states

    # -- the interface --------------------------------------------------------

    def hand_out(self, *, unheld: bool = False) -> tuple[Any, ...]:
        """The outputs, to hand to the caller. ``unheld``: :meth:`release` has just run and
        nothing since (a replay aside), so no kept tensor is held: they are not counted."""
        out = list(self.outputs)
        if self._reused:
            if not unheld:
                for j, shared in self._held():
                    self._revoke_slot(j, shared)  # the memory changes under it
            kept, layout, grad_ok = self._kept, self._layout, self._grad_ok
            for j, i in enumerate(self._reused):
                t = kept[j]
                if t is not None:
                    ptr, shape, stride = layout[j]
                    if (
                        t.data_ptr() != ptr
                        or t.shape != shape
                        or t.stride() != stride
                        or (t.requires_grad and not grad_ok)
                    ):
                        t = None  # changed, then dropped: nobody holds it
                    elif t._backward_hooks is not None:
                        t._backward_hooks = None
                out[i] = t if t is not None else self._kept_new(j)
                del t
        if self._groups:
            if self._fresh:
                self._revoke_fresh()  # what the last fresh hand-out still holds: none, normally
            new_storage, impl, ref = self._new_storage, _tp().storage_impl, weakref.ref
            fresh = []
            for ptr, nbytes, device, build, members in self._groups:
                alias = new_storage(ptr, device, nbytes)
                tensors = []
                for i, meta in members:
                    out[i] = t = build(meta, alias)
                    tensors.append(ref(t))
                fresh.append((alias, impl(alias), tensors))
            del t
            self._fresh = fresh
        return tuple(out)

    def in_use(self) -> bool:
        """Does anything still hold memory of the outputs (a handed-out tensor, a view,
        a tensor over its storage)?"""
        held = self._held()
        if held:
            return True
        storage_count = self._counters[1]
        if any(storage_count(impl) > 1 for _, impl, _ in self._fresh):
            return True
        return self._unreachable(held)

    def unreachable(self) -> bool:
        """Is memory of the outputs held by a tensor :meth:`revoke` cannot reach (a view, a
        tensor over the storage that is not a handed-out one)?"""
        return self._unreachable(self._held())

    def scan(self) -> Scan:
        """One look at what holds the outputs now, for :meth:`release`; it stays true only
        while no code that could take or drop a handed-out tensor runs."""
        held = self._held()
        return Scan(held, self._unreachable(held))

    def _unreachable(self, held: list[tuple[int, bool]]) -> bool:
        if self._lingering and self._still_lingering():
            return True
        if any(shared for _, shared in held):
            return True
        storage_count = self._counters[1]
        for _alias_storage, impl, tensors in self._fresh:
            holders = storage_count(impl)
            if holders > 1:  # beyond our alias: the live tensors, and any other?
                live = 0
                for ref in tensors:
                    live += ref() is not None
                if holders > live + 1:
                    return True
        return False

    def revoke(self) -> int:
        """Make the handed-out tensors still held raise the message on access; the next
        :meth:`hand_out` hands out new ones in their place. Memory that other tensors still
        hold stays :meth:`unreachable` until they are gone. Returns how many tensors it
        reached; 0 where torch cannot (CPU builds)."""
        n = sum(self._revoke_slot(j, shared) for j, shared in self._held())
        return n + self._revoke_fresh()

    def release(self, scan: Scan | None = None) -> bool:
        """:meth:`revoke`, then :meth:`unreachable`, with one look at each output (or none,
        given this moment's :meth:`scan`)."""
        for j, shared in self._held() if scan is None else scan.held:
            if self._kept[j] is not None:
                self._revoke_slot(j, shared)
        self._revoke_fresh()
        # every slot left kept is unheld and unshared now, the fresh hand-out is gone:
        # what revoke could not reach is what it left lingering
        return self._still_lingering()

    def _still_lingering(self) -> bool:
        """Drop the lingering storages nothing holds any more; is any still held?"""
        storage_count = self._counters[1]
        self._lingering = [w for w in self._lingering if storage_count(w.cdata) > 0]
        return bool(self._lingering)

    def _revoke_fresh(self) -> int:
        n, tp = 0, _tp()
        storage_count = self._counters[1]
        for alias, impl, tensors in self._fresh:
            for ref in tensors:
                t = ref()
                if t is not None:
                    n += tp.set_access_error(t, self._message)
                    del t
            if storage_count(impl) > 1:  # more than our alias: out of reach
                self._lingering.append(tp.storage_weakref(alias))
        self._fresh = []
        return n
